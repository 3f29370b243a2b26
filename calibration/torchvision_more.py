"""Training-mode exports and measured model steps of more torchvision networks.

The same procedure as ../shared/groundtruth/README.md's torchvision section, for networks the
ground truth holds and we do not: each network (weights=None) is exported in training mode
(torch.onnx.export(..., training=TrainingMode.TRAINING, do_constant_folding=False, dynamo=False,
opset 17, input "images" with a dynamic batch), its initializers stripped of their data (dims and
dtypes kept, as the shared exports are), and then measured in a fresh process of its own:
  - model: param_bytes, buffer_bytes, alloc_after_load;
  - model_step at 224x224, batch 1, 2, 4, 8, 16, 32, 64, 128, fp32 then AMP (fp16 autocast): the
    model in train mode, zero_grad(set_to_none=True), x = randn(B,3,224,224) resident, the forward
    (under autocast with amp), loss = out.sum() outside autocast, backward, del out; the same
    step twice, the second measured after reset_peak_memory_stats: m0, after_fwd, peak,
    peak_req, peak_reserved.
A network whose train-mode forward returns several tensors (googlenet's and inception_v3's
auxiliary logits) is exported with one output each, all with a dynamic batch, and its loss is the
sum of their sums, as the ground truth's YOLOv9 model steps sum the head's outputs.
With --empty-cache, torch.cuda.empty_cache() runs before each scenario (as the ground truth's
YOLOv9 calibration does), so that each peak_reserved is the scenario's own and not what earlier
batches left cached.
With --no-flash, flash attention is turned off (torch.backends.cuda.enable_flash_sdp(False)), so
fused attention on half inputs runs the memory-efficient kernel, as on a card below sm 8.0; each
line then says "no_flash": true.
Usage: python3 calibration/torchvision_more.py --out DIR [--models a,b] [--jsonl NAME] [--empty-cache] [--no-flash]
Writes DIR/NAME (torchvision_more.jsonl by default; the ground truth's line format) and
DIR/tv/MODEL-train.onnx.
"""
import argparse
import io
import json
import os
import subprocess
import sys

MODELS = ["resnet50", "efficientnet_b0", "convnext_tiny", "vit_b_16", "regnet_y_400mf", "densenet121"]
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128]


def varint(b, i):
    """Reads a protobuf varint at b[i:], returns (value, next index)."""
    v, s = 0, 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def enc_varint(v):
    out = bytearray()
    while True:
        c = v & 0x7F
        v >>= 7
        if v:
            out.append(c | 0x80)
        else:
            out.append(c)
            return bytes(out)


def fields(b):
    """Yields (field number, wire type, raw bytes of the whole field, payload) of a message."""
    i = 0
    while i < len(b):
        start = i
        key, i = varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            _, i = varint(b, i)
            payload = None
        elif wt == 1:
            i += 8
            payload = None
        elif wt == 2:
            n, i = varint(b, i)
            payload = b[i:i + n]
            i += n
        elif wt == 5:
            i += 4
            payload = None
        else:
            raise ValueError("wire type %d" % wt)
        yield num, wt, b[start:i], payload


def ld(num, payload):
    return enc_varint(num << 3 | 2) + enc_varint(len(payload)) + payload


def strip_tensor(t):
    # TensorProto: 4 float_data, 5 int32_data, 6 string_data, 7 int64_data, 9 raw_data,
    # 10 double_data, 11 uint64_data, 13 external_data, 14 data_location.
    return b"".join(raw for num, _, raw, _ in fields(t) if num not in (4, 5, 6, 7, 9, 10, 11, 13, 14))


def strip_graph(g):
    out = []
    for num, _, raw, payload in fields(g):
        if num == 5:  # initializer
            out.append(ld(5, strip_tensor(payload)))
        else:
            out.append(raw)
    return b"".join(out)


def strip_model(m):
    out = []
    for num, _, raw, payload in fields(m):
        out.append(ld(7, strip_graph(payload)) if num == 7 else raw)
    return b"".join(out)


def export(name, path):
    import torch
    import torchvision
    model = getattr(torchvision.models, name)(weights=None)
    model.train()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        o = model(x)
    n = len(o) if isinstance(o, tuple) else 1
    outs = ["output"] if n == 1 else ["output%d" % i for i in range(n)]
    axes = {"images": {0: "batch"}}
    axes.update({o: {0: "batch"} for o in outs})
    buf = io.BytesIO()
    torch.onnx.export(model, (x,), buf, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      dynamo=False, opset_version=17, input_names=["images"], output_names=outs,
                      dynamic_axes=axes)
    data = strip_model(buf.getvalue())
    with open(path, "wb") as f:
        f.write(data)
    return len(buf.getvalue()), len(data)


CHILD = r'''
import json, sys, torch, torchvision
name = sys.argv[1]
empty = sys.argv[2] == "1"
noflash = len(sys.argv) > 3 and sys.argv[3] == "1"
if noflash:
    # a card without flash attention (below sm 8.0): scaled_dot_product_attention
    # on half inputs takes the memory-efficient kernel
    torch.backends.cuda.enable_flash_sdp(False)
torch.backends.cudnn.benchmark = False
dev = torch.device("cuda")
torch.cuda.init()
model = getattr(torchvision.models, name)(weights=None).to(dev)
model.train()
pb = sum(p.numel() * p.element_size() for p in model.parameters())
bb = sum(b.numel() * b.element_size() for b in model.buffers())
out = [{"kind": "model", "cfg": name, "model": "tv/%%s-train.onnx" %% name, "param_bytes": pb, "buffer_bytes": bb,
        "alloc_after_load": torch.cuda.memory_allocated()}]
def step(x, amp):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        o = model(x)
    outs = tuple(o) if isinstance(o, tuple) else (o,)
    loss = None
    for t in outs:
        s = t.float().sum() if t.dtype != torch.float32 else t.sum()
        loss = s if loss is None else loss + s
    fwd = torch.cuda.memory_allocated()
    loss.backward()
    del o, outs, t, s, loss
    return fwd
for amp in (False, True):
    for B in %s:
        try:
            if empty:
                torch.cuda.empty_cache()
            x = torch.randn(B, 3, 224, 224, device=dev)
            step(x, amp)
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            m0 = torch.cuda.memory_allocated()
            fwd = step(x, amp)
            torch.cuda.synchronize()
            st = torch.cuda.memory_stats()
            out.append({"kind": "model_step", "cfg": name, "model": "tv/%%s-train.onnx" %% name, "batch": B, "img": 224,
                        "amp": amp, "segments": 0, "measured": {"m0": m0, "after_fwd": fwd,
                        "peak": st["allocated_bytes.all.peak"], "peak_req": st["requested_bytes.all.peak"],
                        "peak_reserved": st["reserved_bytes.all.peak"]}})
            if noflash:
                out[-1]["no_flash"] = True
            del x
        except torch.OutOfMemoryError:
            out.append({"kind": "model_step", "cfg": name, "batch": B, "amp": amp, "measured": {"oom": True}})
            torch.cuda.empty_cache()
print(json.dumps(out))
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    ap.add_argument("--jsonl", default="torchvision_more.jsonl")
    ap.add_argument("--empty-cache", action="store_true")
    ap.add_argument("--no-flash", action="store_true", help="torch.backends.cuda.enable_flash_sdp(False), as on a card below sm 8.0")
    a = ap.parse_args()
    os.makedirs(os.path.join(a.out, "tv"), exist_ok=True)
    batches = [int(b) for b in a.batches.split(",")]
    lines = []
    for name in a.models.split(","):
        try:
            full, stripped = export(name, os.path.join(a.out, "tv", name + "-train.onnx"))
            print(name, "exported", full, "->", stripped, "bytes", flush=True)
        except Exception as e:  # noqa
            print(name, "export failed:", repr(e)[:300], flush=True)
        p = subprocess.run([sys.executable, "-c", CHILD % repr(batches), name, "1" if a.empty_cache else "0", "1" if a.no_flash else "0"], capture_output=True, text=True)
        try:
            got = json.loads(p.stdout.strip().splitlines()[-1])
        except Exception:  # noqa
            got = [{"kind": "error", "cfg": name, "error": (p.stdout + p.stderr)[-800:]}]
        lines.extend(got)
        print(name, "measured", len(got), "lines", flush=True)
        with open(os.path.join(a.out, a.jsonl), "w") as f:
            for l in lines:
                f.write(json.dumps(l) + "\n")


if __name__ == "__main__":
    main()
