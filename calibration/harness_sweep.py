"""Model steps swept one after another in one process, the way the ground truth's harness
measured them, to check onnxmem.Process (the caching allocator's history across scenarios) on
models and sizes the ground truth lacks.

The ground truth's reserved peaks (../shared/groundtruth/calibration.jsonl) are reproduced only
when its scenarios are replayed in file order, in one process per model, with the cache emptied
before each scenario and again just before the measured step, while the warm-up's gradients are
alive (calibration/README.md §10). This script runs that protocol, scenario after scenario:

    torch.cuda.empty_cache()
    model.zero_grad(set_to_none=True)   # the previous measured step's gradients go
    x = torch.randn(B, 3, S, S)
    step(x)                             # warm-up
    torch.cuda.empty_cache()            # the warm-up's gradients still alive
    model.zero_grad(set_to_none=True)
    reset_peak_memory_stats(); m0; step(x); memory_stats()
    del x

over, per model, fp32 then AMP, segments 0, 2 and 4, and the batches given, with the model of
yolov9_segments.py (the official modules, SiLU in place as initialize_weights sets it). A
scenario that runs out of memory is recorded as {"oom": true} after the cache is emptied, and the
sweep goes on. Output: JSON Lines in predict's format (kind model_step, "model": null, cfg, batch,
img, amp, segments, measured), one process per model (one file per model, concatenated).

Rerun on a GPU machine, from the repository root:
    python3 calibration/harness_sweep.py --out calibration/results/harness_sweep.jsonl \
        --models yolov9-t:1,2,4,8,16,32,64 yolov9-m:1,2,4,8,16,32 gelan-c:1,2,4,8,16,32 yolov9-e:1,2,4,8,16
"""
import argparse
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import yolov9_segments as ys  # noqa: E402


def measured_step(model, x, k, amp):
    """Drops the warm-up's gradients and measures the next step: memory_stats() after it."""
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    m0 = torch.cuda.memory_allocated()
    after_fwd, fwd_peak = ys.step(model, x, k, amp)
    st = torch.cuda.memory_stats()
    return {"m0": m0, "after_fwd": after_fwd, "fwd_peak": fwd_peak, "peak": st["allocated_bytes.all.peak"],
            "peak_req": st["requested_bytes.all.peak"], "peak_reserved": st["reserved_bytes.all.peak"],
            "after_bwd": torch.cuda.memory_allocated()}


def trace(spec, img, path):
    """Runs one scenario, CFG:B:amp|fp32:K, in a fresh process by the same protocol and writes
    its measured step's allocation trace as the ground truth's traces are written."""
    cfg, b, prec, k = spec.split(":")
    b, k, amp = int(b), int(k), prec == "amp"
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    model = ys.Model(ys.TABLES[cfg]).to(ys.DEV).train()
    torch.cuda.empty_cache()
    x = torch.randn(b, 3, img, img, device=ys.DEV)
    ys.step(model, x, k, amp)
    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=2000000)
    res = measured_step(model, x, k, amp)
    ev = ys.events(torch.cuda.memory._snapshot()["device_traces"][0])
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(path, "w") as f:
        json.dump({"result": res, "events": ev}, f)
    print(spec, res)


def sweep(cfg, batches, img):
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    model = ys.Model(ys.TABLES[cfg]).to(ys.DEV).train()
    out = []
    for amp in (False, True):
        for k in (0, 2, 4):
            for b in batches:
                line = {"kind": "model_step", "cfg": cfg, "model": None, "batch": b, "img": img, "amp": amp, "segments": k}
                try:
                    torch.cuda.empty_cache()
                    model.zero_grad(set_to_none=True)
                    x = torch.randn(b, 3, img, img, device=ys.DEV)
                    ys.step(model, x, k, amp)
                    torch.cuda.empty_cache()
                    line["measured"] = measured_step(model, x, k, amp)
                    del x
                except torch.OutOfMemoryError:
                    x = None
                    line["measured"] = {"oom": True}
                    torch.cuda.empty_cache()
                out.append(line)
                print(json.dumps(line), file=sys.stderr, flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--img", type=int, default=640)
    ap.add_argument("--models", nargs="+", default=[], help="CFG:B1,B2,... each swept in a process of its own")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--trace", help="CFG:B:amp|fp32:K: trace this one scenario, in this process, into --out")
    a = ap.parse_args()
    if a.trace:
        trace(a.trace, a.img, a.out)
        return
    if a.child:
        cfg, bs = a.child.split(":")
        for line in sweep(cfg, [int(b) for b in bs.split(",")], a.img):
            print(json.dumps(line))
        return
    lines = []
    for spec in a.models:
        p = subprocess.run([sys.executable, __file__, "--out", a.out, "--img", str(a.img), "--child", spec],
                           capture_output=True, text=True)
        if p.returncode != 0:
            print(p.stderr[-3000:], file=sys.stderr)
            sys.exit(p.returncode)
        lines += [l for l in p.stdout.splitlines() if l.strip()]
        print(spec, "done:", len(lines), "lines", flush=True)
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
