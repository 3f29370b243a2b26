"""The ops of torchvision's CNNs on CUDA: what they allocate, what autograd
saves, what their backward allocates; the cuBLAS workspaces matrix products
leave allocated; and allocation traces of whole model steps of resnet18 and
mobilenet_v3_large, run the way ../shared/groundtruth/torchvision.jsonl was
measured.

Rerun on a GPU machine:  python3 calibration/torchvision_ops.py --out DIR
(writes DIR/torchvision_ops.json and DIR/torchvision_steps.json). Settings:
cudnn.benchmark=False, cuda:0.

Part 1 (ops): each case builds a non-leaf input (x * 1 of a leaf), runs the op
under saved_tensors_hooks, and records the allocator's events of the forward
and the backward (memtrace.compact), and, per saved tensor, its shape, dtype,
bytes and whether its storage is the op's input, its output or new.

Part 2 (cublas): in a fresh process each, a linear layer's forward and
backward at batch 1 and 8, fp32 and autocast: the bytes still allocated
after the step beyond what is expected (the workspaces), and every
allocation of 1 MiB or more with the phase it happened in.

Part 3 (steps): for each model, fresh process: model.train(), x resident,
two steps (zero_grad(set_to_none=True), forward under autocast when amp,
out.sum(), backward, del out); the second is traced and its m0, after_fwd,
peak, peak_req and the compact event list are written.
"""
import argparse
import json
import os
import subprocess
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memtrace import compact, trace_entries, trace_reset  # noqa: E402

DEV = torch.device("cuda:0")


def sptr(t):
    return t.untyped_storage().data_ptr()


def op_case(name, make, amp=False):
    """make() -> (leaf inputs, fn(*nonleaf) -> output)."""
    torch.cuda.empty_cache()
    leaves, fn = make()
    xs = [l * 1 for l in leaves]  # non-leaf activations
    torch.cuda.synchronize()
    saved = []
    in_ptrs = {sptr(x): "in%d" % i for i, x in enumerate(xs)}

    def pack(t):
        saved.append((t, ))
        return t

    def unpack(t):
        return t

    trace_reset()
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        with torch.autocast("cuda", torch.float16, enabled=amp):
            y = fn(*xs)
    torch.cuda.synchronize()
    fwd = compact(trace_entries())
    out_ptr = sptr(y)
    sv = []
    for (t, ) in saved:
        p = sptr(t)
        lab = in_ptrs.get(p, "out" if p == out_ptr else "new")
        for i, l in enumerate(leaves):
            if p == sptr(l):
                lab = "leaf%d" % i
        sv.append({"shape": list(t.shape), "dtype": str(t.dtype), "nbytes": t.numel() * t.element_size(), "storage": lab})
    g = torch.ones_like(y)
    del xs
    trace_reset()
    y.backward(g)
    torch.cuda.synchronize()
    bwd = compact(trace_entries())
    torch.cuda.memory._record_memory_history(enabled=None)
    return {"name": name, "amp": amp, "out": [list(y.shape), str(y.dtype)], "same_storage_as_in0": None, "saved": sv, "fwd": fwd, "bwd": bwd}


def ops():
    N, C, H = 8, 64, 56
    res = []

    def leaf(*s, dt=torch.float32):
        return torch.randn(*s, device=DEV, dtype=dt).requires_grad_()

    def seq(*mods):
        m = nn.Sequential(*mods).to(DEV).train()
        return lambda x: m(x)

    cases = [
        ("bn_relu_inplace", lambda: ([leaf(N, C, H, H)], seq(nn.BatchNorm2d(C), nn.ReLU(inplace=True)))),
        ("bn_relu", lambda: ([leaf(N, C, H, H)], seq(nn.BatchNorm2d(C), nn.ReLU()))),
        ("bn_hardswish_inplace", lambda: ([leaf(N, C, H, H)], seq(nn.BatchNorm2d(C), nn.Hardswish(inplace=True)))),
        ("bn_hardswish", lambda: ([leaf(N, C, H, H)], seq(nn.BatchNorm2d(C), nn.Hardswish()))),
        ("conv_hardsigmoid", lambda: ([leaf(N, C, 1, 1)], seq(nn.Conv2d(C, C, 1), nn.Hardsigmoid()))),
        ("conv_relu", lambda: ([leaf(N, C, 1, 1)], seq(nn.Conv2d(C, C, 1), nn.ReLU()))),
        ("avgpool", lambda: ([leaf(N, C, H, H)], seq(nn.AdaptiveAvgPool2d(1)))),
        ("avgpool_flatten", lambda: ([leaf(N, C, 7, 7)], lambda x: torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))),
        ("se_mul", lambda: ([leaf(N, C, 1, 1), leaf(N, C, H, H)], lambda s, x: s * x)),
        ("bn_add_inplace", lambda: ([leaf(N, C, H, H), leaf(N, C, H, H)], (lambda bn: (lambda x, idn: bn(x).add_(idn)))(nn.BatchNorm2d(C).to(DEV)))),
        ("linear_b1", lambda: ([leaf(1, 960)], seq(nn.Linear(960, 1280)))),
        ("linear_b8", lambda: ([leaf(8, 960)], seq(nn.Linear(960, 1280)))),
        ("linear_hs_dropout_inplace", lambda: ([leaf(8, 960)], seq(nn.Linear(960, 1280), nn.Hardswish(inplace=True), nn.Dropout(0.2, inplace=True)))),
        ("bn_dropout_inplace", lambda: ([leaf(N, C, H, H)], seq(nn.BatchNorm2d(C), nn.Dropout(0.2, inplace=True)))),
        ("bn_dropout", lambda: ([leaf(N, C, H, H)], seq(nn.BatchNorm2d(C), nn.Dropout(0.2)))),
    ]
    for name, make in cases:
        for amp in (False, True):
            if amp and not name.startswith(("linear", "bn_hardswish_inplace", "avgpool_flatten")):
                continue
            try:
                res.append(op_case(name, make, amp))
            except Exception as e:  # noqa
                res.append({"name": name, "amp": amp, "error": repr(e)[:300]})
    return res


CUBLAS_CHILD = r"""
import torch, json, sys
sys.path.insert(0, %r)
from memtrace import trace_reset, trace_entries
B, amp = int(sys.argv[1]), sys.argv[2] == '1'
lin = torch.nn.Linear(512, 1000).cuda()
x = torch.randn(B, 512, device='cuda')
base = torch.cuda.memory_allocated()
trace_reset()
out = []
with torch.autocast('cuda', torch.float16, enabled=amp):
    y = lin(x)
torch.cuda.synchronize()
n_fwd = len(trace_entries())
after_fwd = torch.cuda.memory_allocated() - base
y.sum().backward()
torch.cuda.synchronize()
ev = trace_entries()
big = [[('fwd' if i < n_fwd else 'bwd'), e['action'], e['size']] for i, e in enumerate(ev) if e['size'] >= (1 << 20) and e['action'] in ('alloc', 'free_completed')]
del y
lin.zero_grad(set_to_none=True)
torch.cuda.synchronize()
print(json.dumps({'B': B, 'amp': amp, 'after_fwd': after_fwd, 'residue': torch.cuda.memory_allocated() - base, 'big': big}))
"""


def cublas():
    res = []
    for B in (1, 8):
        for amp in ("0", "1"):
            p = subprocess.run([sys.executable, "-c", CUBLAS_CHILD % os.path.dirname(os.path.abspath(__file__)), str(B), amp], capture_output=True, text=True)
            try:
                res.append(json.loads(p.stdout.strip().splitlines()[-1]))
            except Exception:  # noqa
                res.append({"B": B, "amp": amp, "error": (p.stdout + p.stderr)[-500:]})
    return res


STEP_CHILD = r"""
import torch, torchvision, json, sys
sys.path.insert(0, %r)
from memtrace import trace_reset, trace_entries, compact
torch.backends.cudnn.benchmark = False
name = sys.argv[1]
out = []
model = getattr(torchvision.models, name)(weights=None).cuda().train()
for B, amp in [(8, False), (8, True), (64, False)]:
    torch.cuda.empty_cache()
    x = torch.randn(B, 3, 224, 224, device='cuda')
    for step in range(2):
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        m0 = torch.cuda.memory_allocated()
        if step == 1:
            trace_reset()
        with torch.autocast('cuda', torch.float16, enabled=amp):
            o = model(x)
        torch.cuda.synchronize()
        after_fwd = torch.cuda.memory_allocated()
        n_fwd = len(trace_entries()) if step == 1 else 0
        loss = o.sum()
        loss.backward()
        del o, loss
        torch.cuda.synchronize()
    st = torch.cuda.memory_stats()
    ev = trace_entries()
    out.append({'model': name, 'B': B, 'amp': amp, 'm0': m0, 'after_fwd': after_fwd, 'peak': st['allocated_bytes.all.peak'],
                'peak_req': st['requested_bytes.all.peak'], 'peak_reserved': st['reserved_bytes.all.peak'], 'n_fwd_events': n_fwd,
                'events': compact(ev)})
    torch.cuda.memory._record_memory_history(enabled=None)
    del x
print(json.dumps(out))
"""


def steps():
    res = []
    for name in ("resnet18", "mobilenet_v3_large"):
        p = subprocess.run([sys.executable, "-c", STEP_CHILD % os.path.dirname(os.path.abspath(__file__)), name], capture_output=True, text=True)
        try:
            res.extend(json.loads(p.stdout.strip().splitlines()[-1]))
        except Exception:  # noqa
            res.append({"model": name, "error": (p.stdout + p.stderr)[-800:]})
    return res


# What these showed (torch 2.11.0+cu130, H200), which schedule's rules and
# tests follow (schedule/classifier_test.go):
#   relu_ allocates nothing and saves its result, the overwritten input;
#   hardswish_ clones its input before overwriting it (the autograd codegen's
#     original_self for an in-place op whose formula reads self) and saves
#     the clone; out of place, hardswish and hardsigmoid save their input;
#   dropout_ (nn.Dropout(inplace=True)) makes float noise of the input's size
#     and type, which mul_ saves; out of place, native_dropout makes a bool
#     mask, then its output, and saves the mask;
#   adaptive_avg_pool2d(x, 1) saves nothing; its backward makes one gradient
#     of the input's size; torch.flatten is a view;
#   linear: output, then (first time on the thread) the 32 MiB cuBLAS and
#     the 1 MiB cuBLASLt workspaces, at batch 1 too; backward: mat1's
#     gradient, (first time on the autograd thread) its 32 MiB workspace, the
#     weight's gradient, the bias's; under autocast the bias, weight and
#     input casts come first and ToCopyBackward makes the float32 .grad of
#     input, weight, bias in that order;
#   scale * x with a broadcast scale: x's gradient, then the scale's product
#     of x's size, its sum to the scale's shape, and the product's free;
#   a model step's leftover is 65 MiB: 32 + 32 + 1 MiB in every case.
# torchvision_steps.json: the measured step of resnet18 and
# mobilenet_v3_large (batch 8 fp32 and amp, 64 fp32), each model in a fresh
# process; onnxmem's program matches its allocation sequence event for event
# (but for the order autocast's cache frees its bias casts, a hash map's),
# once depthwise convs that PyTorch runs with its own kernels rather than
# cuDNN's (every float32 one, and the float16 ones use_cudnn_depthwise
# turns down) make the weight's gradient before the input's; and the first
# step of each process gives onnxmem's peak, peak_req, peak_reserved,
# after_fwd and m0 to the byte (internal/sim/torchvision_test.go).


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.backends.cudnn.benchmark = False
    res = {"torch": torch.__version__, "ops": ops(), "cublas": cublas()}
    with open(os.path.join(a.out, "torchvision_ops.json"), "w") as f:
        json.dump(res, f)
    with open(os.path.join(a.out, "torchvision_steps.json"), "w") as f:
        json.dump(steps(), f)
    print("done")


if __name__ == "__main__":
    main()
