"""cuDNN workspaces of patch embeddings: convolutions of kernel = stride and no padding.

conv_sweep.py pads every convolution by k // 2, as the YOLO models do. The patch embedding of a
vision transformer (vit_b_16: 3 -> 768, 16x16, stride 16; vit_b_32: 32x32, stride 32) and the
stems of ConvNeXt and Swin (3 -> 96 or 128, 4x4, stride 4) have no padding, so their maps are
smaller and cuDNN picks other algorithms: calibration/vit_trace.py saw vit_b_32's take 19.6 MB in
its backward-filter pass at batch 8, where cuDNNWorkspaceRule gives 0.75 MB. This measures the
three calls of each such convolution on 224x224 images, batch 1 to 128, float16 and float32, the
way conv_sweep.py measures (the peak requested bytes of the call above what was allocated
before it, less its output).
Usage: python3 calibration/patchify_sweep.py --out DIR   (writes DIR/patchify_sweep.json; seconds)
"""
import argparse
import json
import os

import torch

import conv_sweep

EMBEDS = [(4, 96), (4, 128), (4, 192), (14, 1280), (16, 768), (16, 1024), (32, 768), (32, 1024)]


def measure(n, cin, cout, h, k, e):
    dt = torch.float16 if e == 2 else torch.float32
    x = torch.randn(n, cin, h, h, device=conv_sweep.DEV, dtype=dt)
    wt = torch.randn(cout, cin, k, k, device=conv_sweep.DEV, dtype=dt)
    args = ([k, k], [0, 0], [1, 1], False, [0, 0], 1)
    y, p = conv_sweep.peak_above(lambda: torch.ops.aten.convolution(x, wt, None, *args))
    fwd = p - conv_sweep.nbytes(y)
    gy = torch.randn_like(y)
    del y
    (gx, _, _), p = conv_sweep.peak_above(lambda: torch.ops.aten.convolution_backward(gy, x, wt, None, *args, [True, False, False]))
    bwd_data = p - conv_sweep.nbytes(gx)
    del gx
    (_, gw, _), p = conv_sweep.peak_above(lambda: torch.ops.aten.convolution_backward(gy, x, wt, None, *args, [False, True, False]))
    bwd_filter = p - conv_sweep.nbytes(gw)
    return [fwd, bwd_data, bwd_filter]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = False
    rows = []
    for e in (2, 4):
        for k, cout in EMBEDS:
            for n in (1, 2, 4, 8, 16, 32, 64, 128):
                measure(n, 3, cout, 224, k, e)  # warm
                rows.append([n, 3, cout, 224, 224, k, k, 1, e] + measure(n, 3, cout, 224, k, e))
    with open(os.path.join(a.out, "patchify_sweep.json"), "w") as f:
        json.dump({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "padding": 0, "rows": rows}, f)
    print(len(rows), "convolutions")


if __name__ == "__main__":
    main()
