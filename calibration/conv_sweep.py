"""cuDNN workspaces of every convolution the built-in YOLOv9 models run.

conv_workspace.py measured 182 YOLOv9-like convolutions at batch 1 and 8. The model steps
run more: calibration/yolov9_segments.py found the peak of yolov9-s with four checkpoint
segments at batch 32 inside a 1x1 conv's forward (384 -> 192 channels, 40x40, float16)
whose workspace was IN + OUT, where the rule of conv_workspace.py had none. This script
measures the three cuDNN calls of each distinct convolution in the ten built-in models
(onnxmem models) at batch 1 to 64, on square images of 320 to 640 pixels (every 32, the models'
largest stride), in float32 and float16:

  - fwd:        aten.convolution(x, w)
  - bwd-data:   aten.convolution_backward(gy, x, w, output_mask=[True, False, False])
  - bwd-filter: aten.convolution_backward(gy, x, w, output_mask=[False, True, False])

with a contiguous x, no bias, padding k // 2, dilation 1, and x, w, gy all in the compute
type (autocast hands cuDNN float16 tensors). The workspace of a call is the peak of
requested_bytes.all during the call above what was allocated before it, less the call's
own output (y, the input gradient or the weight gradient): that is, the largest transient
allocation, exact to the byte. cudnn.benchmark is off, as in the measurements of
../shared/groundtruth.

The configurations come from CONFIGS (a JSON list of [N, Cin, Cout, H, W, K, stride,
groups, element size]), written by

    go run calibration/conv_configs.go -o calibration/results/conv_configs.json

(git-ignored: it is made again in a second), and the result, results/conv_sweep.json, holds {"env": ..., "rows": [[N, Cin, Cout, H, W,
K, stride, groups, element size, fwd, bwd-data, bwd-filter], ...]} in the same order.

Rerun on a GPU machine, from the repository root:
    python3 calibration/conv_sweep.py --configs calibration/results/conv_configs.json --out calibration/results
(about four minutes; --keep calibration/results/conv_sweep.json measures only new configurations)

--channels-last measures the same calls on channels-last x (and so channels-last y and gy),
as ConvNeXt runs its convolutions after its LayerNorm2d; such configurations carry their
padding as a tenth number (conv_configs.go -channels-last), and the rows keep it:
    go run calibration/conv_configs.go -onnx calibration/results/tv/convnext_tiny-train.onnx,calibration/results/tv/convnext_small-train.onnx -channels-last -o calibration/results/conv_configs_cl.json
    python3 calibration/conv_sweep.py --channels-last --configs calibration/results/conv_configs_cl.json --out calibration/results/cl

--dfl measures, instead of CONFIGS, the 1x1 convolution of YOLOv9's DFL in eval mode
(models/common.py: DFL.forward runs conv(16 -> 1) on the softmax of the box channels, a contiguous
[N, 16, 4, A] for A anchors), which no graph holds: at every batch 1 to 128, for the anchors of
square images of 320 to 1280 (every 32) and of 640-pixel letterboxed rectangles (640 by 256 to
608; and 672x448 and 384x672, which calibration §23 validated), in float16 and float32:
    python3 calibration/conv_sweep.py --dfl --out calibration/results/dfl
"""
import argparse
import json
import os
import sys
import time

import torch

DEV = torch.device("cuda:0")


def req():
    return torch.cuda.memory_stats()["requested_bytes.all.current"]


def peak_above(fn):
    """Runs fn() and returns (its result, peak requested bytes above the level before it)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = req()
    out = fn()
    torch.cuda.synchronize()
    return out, torch.cuda.memory_stats()["requested_bytes.all.peak"] - before


def nbytes(t):
    return t.numel() * t.element_size()


BF16 = False  # --bf16: the 2-byte calls in bfloat16 (autocast's amp_dtype bfloat16) instead of float16
CHANNELS_LAST = False  # --channels-last: x (so y and gy) channels-last


def measure(n, cin, cout, h, w, k, s, g, e, pad=None):
    dt = (torch.bfloat16 if BF16 else torch.float16) if e == 2 else torch.float32
    x = torch.randn(n, cin, h, w, device=DEV, dtype=dt)
    if CHANNELS_LAST:
        x = x.contiguous(memory_format=torch.channels_last)
    wt = torch.randn(cout, cin // g, k, k, device=DEV, dtype=dt)
    p = k // 2 if pad is None else pad
    args = ([s, s], [p, p], [1, 1], False, [0, 0], g)
    y, p = peak_above(lambda: torch.ops.aten.convolution(x, wt, None, *args))
    fwd = p - nbytes(y)
    gy = torch.randn_like(y)
    del y
    (gx, _, _), p = peak_above(lambda: torch.ops.aten.convolution_backward(gy, x, wt, None, *args, [True, False, False]))
    bwd_data = p - nbytes(gx)
    del gx
    (_, gw, _), p = peak_above(lambda: torch.ops.aten.convolution_backward(gy, x, wt, None, *args, [False, True, False]))
    bwd_filter = p - nbytes(gw)
    del gw, gy, x, wt
    return [fwd, bwd_data, bwd_filter]


def dfl_configs():
    """The DFL convolution's configurations (--dfl): N, 16, 1, 4, A, 1, 1, 1, element size."""
    sizes = {(s, s) for s in range(320, 1281, 32)} | {(640, r) for r in range(256, 640, 32)} | {(672, 448), (384, 672)}
    anchors = sorted({sum((h // st) * (w // st) for st in (8, 16, 32)) for h, w in sizes})
    return [[n, 16, 1, 4, a, 1, 1, 1, e] for e in (2, 4) for a in anchors for n in range(1, 129)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="calibration/results/conv_configs.json")
    ap.add_argument("--out", default="calibration/results")
    ap.add_argument("--budget", type=float, default=540, help="seconds; stop early and write what was measured")
    ap.add_argument("--keep", help="an earlier conv_sweep.json whose rows are kept instead of measured again "
                    "(the heuristics are deterministic: two sweeps agreed on all 7812 shared rows)")
    ap.add_argument("--bf16", action="store_true", help="measure the 2-byte calls in bfloat16 (write to another --out)")
    ap.add_argument("--channels-last", action="store_true", help="channels-last inputs; configurations of ten numbers, the last the padding")
    ap.add_argument("--dfl", action="store_true", help="the DFL's convolution at batch 1 to 128 instead of --configs")
    a = ap.parse_args()
    global BF16, CHANNELS_LAST
    BF16, CHANNELS_LAST = a.bf16, a.channels_last
    torch.backends.cudnn.benchmark = False
    configs = dfl_configs() if a.dfl else json.load(open(a.configs))
    width = 10 if CHANNELS_LAST else 9
    kept = {}
    if a.keep:
        kept = {tuple(r[:width]): r for r in json.load(open(a.keep))["rows"]}
    t0 = time.time()
    rows = []
    for i, c in enumerate(configs):
        if time.time() - t0 > a.budget:
            print("budget spent after %d of %d configs" % (i, len(configs)), file=sys.stderr)
            break
        if tuple(c) in kept:
            rows.append(kept[tuple(c)])
            continue
        rows.append(list(c) + measure(*c))
        if i % 500 == 0:
            torch.cuda.empty_cache()
            print("%d/%d %.0fs" % (i, len(configs), time.time() - t0), file=sys.stderr, flush=True)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "gpu": torch.cuda.get_device_name(DEV), "benchmark": torch.backends.cudnn.benchmark, "bf16": BF16,
           "channels_last": CHANNELS_LAST, "dfl": a.dfl,
           "configs": len(configs), "measured": len(rows), "kept": sum(1 for c in configs if tuple(c) in kept),
           "elapsed_s": round(time.time() - t0, 1)}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "conv_sweep.json"), "w") as fh:
        fh.write('{"env": %s,\n "rows": [\n' % json.dumps(env))
        fh.write(",\n".join("  " + json.dumps(r) for r in rows))
        fh.write("\n ]}\n")
    print(json.dumps(env))


if __name__ == "__main__":
    main()
