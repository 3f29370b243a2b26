"""What F.normalize allocates and saves under autocast (swin_v2's cosine attention).

For a float16 q of [64, 3, 64, 32] (the shape of swin_v2_t's first-stage q at batch 1), under
torch.autocast('cuda', float16) and without it: the dtypes of q.norm(2, -1, keepdim=True) and of
F.normalize(q, dim=-1), and the allocation trace (sizes in order) of the normalize, and of the
bmm that follows, with autograd recording. Prints one JSON line.
Usage: python3 calibration/normalize_autocast.py

Not run yet: written on 2026-12-05 when the device stopped being lent, to check what swin_v2_t's
AMP steps (torchvision_new.jsonl, within 1.2% of onnxmem) still differ in: the norm's type and
whether linalg_vector_norm casts its input (onnxmem assumes autocast's fp32_set_opt_dtype: no
copy, a float32 result), and the division's promoted float32 output.
"""
import json

import torch
import torch.nn.functional as F


def trace(fn):
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=100000)
    r = fn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    ev = [[e["action"][0], e["size"]] for e in snap["device_traces"][0] if e["action"] in ("alloc", "free_completed")]
    return r, ev


out = {}
for amp in (False, True):
    dt = torch.float16 if amp else torch.float32
    q = torch.randn(64, 3, 64, 32, device="cuda", dtype=dt, requires_grad=True)
    k = torch.randn(64, 3, 64, 32, device="cuda", dtype=dt, requires_grad=True)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        n = q.norm(2, -1, keepdim=True)
        (qn, ev) = trace(lambda: F.normalize(q, dim=-1))
        kn = F.normalize(k, dim=-1)
        (attn, ev2) = trace(lambda: qn @ kn.transpose(-2, -1))
    res = {"norm_dtype": str(n.dtype), "normalize_dtype": str(qn.dtype), "attn_dtype": str(attn.dtype),
           "q_bytes": q.numel() * q.element_size(), "normalize_events": ev, "matmul_events": ev2}
    (_, ev3) = trace(lambda: attn.float().sum().backward())
    res["backward_events"] = ev3
    out["amp" if amp else "fp32"] = res
print(json.dumps(out))
