"""The global-memory staging of PyTorch's CUDA column sums, as a Linear's bias gradient takes it.

A Linear on [B, L, E] (a transformer's) sums its output gradient over its B*L rows for the bias
gradient (addmm's backward: grad.sum(0)). PyTorch's reduction kernel (aten/src/ATen/native/cuda/
Reduce.cuh) splits long columns over several thread blocks, which then combine their partial
sums through a float32 staging buffer and a semaphore array allocated for the call
(ReduceConfig::global_memory_size, semaphore_size). calibration/vit_trace.py found 37.5 MiB for
the 3072-wide fc1 of vit_b_32 at batch 32 (1,600 rows) and none at batch 8 (400 rows).

For every R rows x C columns below, in float16 and float32, this measures the bytes that
x.sum(0) requests beyond its output (requested_bytes.all.peak during the call minus before
it, minus the output), and each allocation of the call (torch.cuda.memory._record_memory_history)
for the first ones; and for a few shapes the same through autograd (F.linear on [R/50, 50, C]
under autocast), to check that the bias gradient's reduction is this one.
Usage: python3 calibration/reduce_staging.py --out DIR   (writes DIR/reduce_staging.json; seconds)
"""
import argparse
import json
import os

import torch
import torch.nn.functional as F

ROWS = [50, 64, 100, 128, 197, 256, 394, 400, 512, 788, 800, 1024, 1576, 1600, 2048, 3152, 3200,
        4096, 6272, 6304, 6400, 8192, 12544, 12608, 12800, 16384, 25088, 25216, 25600, 32768, 50176,
        65536, 100352, 200704, 401408]
COLS = [64, 96, 128, 192, 256, 384, 512, 768, 1000, 1024, 1536, 2048, 2304, 3072, 4096]


def extra(x):
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["requested_bytes.all.current"]
    torch.cuda.reset_peak_memory_stats()
    y = x.sum(0)
    torch.cuda.synchronize()
    peak = torch.cuda.memory_stats()["requested_bytes.all.peak"]
    out = y.numel() * y.element_size()
    del y
    return peak - before - out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    rows = []
    for dt in (torch.float16, torch.float32):
        for r in ROWS:
            for c in COLS:
                if r * c > 1 << 28:
                    continue
                x = torch.randn(r, c, device=dev, dtype=dt)
                extra(x)  # warm
                rows.append([r, c, x.element_size(), extra(x)])
                del x
    allocs = []
    for r, c, dt in [(1600, 3072, torch.float16), (1600, 768, torch.float16), (400, 3072, torch.float16),
                     (6400, 768, torch.float32), (25088, 256, torch.float16)]:
        x = torch.randn(r, c, device=dev, dtype=dt)
        x.sum(0)
        torch.cuda.synchronize()
        torch.cuda.memory._record_memory_history(max_entries=1000)
        y = x.sum(0)
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        ev = [(e["action"], e["size"]) for d in snap["device_traces"] for e in d if e["action"] in ("alloc", "free_requested")]
        allocs.append({"rows": r, "cols": c, "elem": x.element_size(), "events": ev})
        del x, y
    autograd = []
    for b, c, amp in [(32, 3072, True), (8, 3072, True), (32, 768, True), (128, 768, False)]:
        w = torch.randn(c, 768, device=dev, requires_grad=True)
        bias = torch.randn(c, device=dev, requires_grad=True)
        x = torch.randn(b, 50, 768, device=dev, requires_grad=True)
        for step in range(2):
            with torch.autocast("cuda", torch.float16, enabled=amp):
                y = F.linear(x, w, bias)
            g = torch.ones_like(y)
            torch.cuda.synchronize()
            if step == 1:
                torch.cuda.memory._record_memory_history(max_entries=1000)
            y.backward(g)
            torch.cuda.synchronize()
            if step == 1:
                snap = torch.cuda.memory._snapshot()
                torch.cuda.memory._record_memory_history(enabled=None)
            del y, g
            w.grad = bias.grad = x.grad = None
        ev = [(e["action"], e["size"]) for d in snap["device_traces"] for e in d if e["action"] in ("alloc", "free_requested")]
        autograd.append({"batch": b, "tokens": 50, "out": c, "amp": amp, "events": ev})
    res = {"torch": torch.__version__, "gpu": props.name, "sms": props.multi_processor_count,
           "max_threads_per_sm": props.max_threads_per_multi_processor,
           "rows": rows, "allocs": allocs, "autograd": autograd}
    with open(os.path.join(a.out, "reduce_staging.json"), "w") as f:
        json.dump(res, f)
    print(len(rows), "shapes")


if __name__ == "__main__":
    main()
