"""cudaMalloc's segment addresses in a real training process, to check the driver's placement
rule that allocator.vaSpace simulates (found on torch.empty sequences, allocator_conf.py).

It runs harness_sweep.py's protocol for one model (fp32 then AMP, segments 0, 2 and 4, the
batches given, one process) with torch.cuda.memory._record_memory_history on from before the
model is built, and writes every segment_alloc and segment_free the allocator recorded, in
order, with each scenario's measured numbers: {"scenarios": [...], "segments": [[action,
address, size, scenario index], ...]}. cuDNN, cuBLAS and the driver's own allocations (module
loading, handles) are not in it: they show only as places that the rule did not predict.

Rerun on a GPU machine, from the repository root (about a minute for yolov9-t to batch 16):
    python3 calibration/va_sweep.py --cfg yolov9-t --batches 1,2,4,8,16 --out calibration/results/va_sweep.json
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness_sweep as hs  # noqa: E402
import yolov9_segments as ys  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cfg", default="yolov9-t")
    ap.add_argument("--batches", default="1,2,4,8,16")
    ap.add_argument("--img", type=int, default=640)
    ap.add_argument("--precisions", default="fp32,amp")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=20000000)
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    model = ys.Model(ys.TABLES[a.cfg]).to(ys.DEV).train()
    scen = []
    marks = []

    def mark():
        # The number of segment events so far, read from a fresh snapshot.
        tr = torch.cuda.memory._snapshot()["device_traces"][0]
        return sum(1 for e in tr if e["action"] in ("segment_alloc", "segment_free"))

    for prec in a.precisions.split(","):
        amp = prec == "amp"
        for k in (0, 2, 4):
            for b in [int(s) for s in a.batches.split(",")]:
                line = {"cfg": a.cfg, "batch": b, "img": a.img, "amp": amp, "segments": k}
                try:
                    torch.cuda.empty_cache()
                    model.zero_grad(set_to_none=True)
                    x = torch.randn(b, 3, a.img, a.img, device=ys.DEV)
                    ys.step(model, x, k, amp)
                    torch.cuda.empty_cache()
                    line["measured"] = hs.measured_step(model, x, k, amp)
                    del x
                except torch.OutOfMemoryError:
                    x = None
                    line["measured"] = {"oom": True}
                    torch.cuda.empty_cache()
                scen.append(line)
                marks.append(mark())
                print(json.dumps(line), flush=True)
    tr = torch.cuda.memory._snapshot()["device_traces"][0]
    segs, n, s = [], 0, 0
    for e in tr:
        if e["action"] in ("segment_alloc", "segment_free"):
            while s < len(marks) and n >= marks[s]:
                s += 1
            segs.append([e["action"], e["addr"], e["size"], s])
            n += 1
    with open(a.out, "w") as f:
        json.dump({"scenarios": scen, "segments": segs}, f)
    print(len(segs), "segment events")


if __name__ == "__main__":
    main()
