"""Measured model steps under checkpoint plans that `onnxmem plan` made.

The ground truth's model step (../shared/groundtruth/README.md) with an explicit plan instead of
checkpoint_sequential's: each range [a, b] of top-level layers runs under
torch.utils.checkpoint.checkpoint(use_reentrant=False) as forward_segments of yolov9_segments.py
runs a chunk (the chunk's inputs from earlier layers, its outputs that later layers read; after
it, the saved outputs no later layer reads are dropped), the other layers as the official layer
loop runs them. Models, warm-up, measurement and figures are yolov9_segments.py's (imported).
Each plan runs in a fresh process. Usage:
    python3 calibration/plan_measure.py --out calibration/results \
        --plans "yolov9-s:8:640:amp:0-3,6-7,9-14;yolov9-c:16:640:amp:0-12,13-22"
Writes results/plan_measure.json: per plan the measured figures.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

import yolov9_segments as ys  # noqa: E402


def forward_ranges(model, x, ranges):
    layers = list(model.model)
    n = len(layers)
    last = {}
    for i, m in enumerate(layers):
        for j in ys.reads(m, i):
            last[j] = max(last.get(j, -1), i)
    starts = {a: b for a, b in ranges}
    y = {}
    i = 0
    while i < n:
        if i not in starts:
            x = ys.run_layer(layers[i], x, y)
            if i in model.save:
                y[i] = x
            i += 1
            continue
        a, b = i, starts[i] + 1
        ins = sorted({j for k in range(a, b) for j in ys.reads(layers[k], k) if j < a - 1 or (j == a - 1 and j in y)})
        outs = [j for j in range(a, b) if j in model.save]

        def fn(x, *args, a=a, b=b, ins=ins, outs=outs):
            yy = dict(zip(ins, args))
            for k in range(a, b):
                x = ys.run_layer(layers[k], x, yy)
                if k in model.save:
                    yy[k] = x
            return (x, *[yy[j] for j in outs])

        res = checkpoint(fn, x, *[y[j] for j in ins], use_reentrant=False)
        x = res[0]
        for j, v in zip(outs, res[1:]):
            y[j] = v
        del res
        for j in [j for j in y if last.get(j, -1) < b]:
            del y[j]
        i = b
    return x


def one(spec):
    cfg, batch, img, prec, plan = spec.split(":")
    batch, img, amp = int(batch), int(img), prec == "amp"
    ranges = []
    for part in plan.split(","):
        a, _, b = part.partition("-")
        ranges.append((int(a), int(b or a)))
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    model = ys.Model(ys.TABLES[cfg]).to(ys.DEV).train()
    # scenario() runs step(model, x, k, amp); k is the plan here.
    orig = ys.forward_segments
    ys.forward_segments = lambda model, x, k: forward_ranges(model, x, ranges)
    try:
        res, _ = ys.scenario(model, cfg, batch, img, amp, 2, False)
    finally:
        ys.forward_segments = orig
    return {"cfg": cfg, "batch": batch, "img": img, "amp": amp, "checkpoint": [list(r) for r in ranges], "result": res}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="calibration/results")
    ap.add_argument("--plans", required=True)
    ap.add_argument("--one")
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one)))
        return
    out = []
    for spec in a.plans.split(";"):
        p = subprocess.run([sys.executable, __file__, "--plans", "-", "--one", spec], capture_output=True, text=True)
        try:
            out.append(json.loads(p.stdout.strip().splitlines()[-1]))
        except Exception:  # noqa
            out.append({"spec": spec, "error": (p.stdout + p.stderr)[-1500:]})
        print(json.dumps(out[-1])[:400], flush=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "plan_measure.json"), "w") as fh:
        json.dump({"torch": torch.__version__, "plans": out}, fh, indent=1)


if __name__ == "__main__":
    main()
