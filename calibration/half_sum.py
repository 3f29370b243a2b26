"""The transient of torch.sum over dim 0 of a large tensor, by dtype and size (CBFuse's reduction).

CBFuse (models/common.py) ends with torch.sum(torch.stack(res + xs[-1:]), dim=0). PyTorch's CUDA
reduction (aten/src/ATen/native/cuda/Reduce.cuh, gpu_reduce_kernel) splits an iterator that
cannot use 32-bit indexing (an operand spanning more than 2^31 - 1 bytes) into sub-iterators,
and when the output's type cannot hold the accumulator (float16 or bfloat16 in and out, the
accumulator float32) it first allocates an AccumulationBuffer of the output's elements in the
accumulator's type through the caching allocator. This script measures the bytes requested
during the sum beyond its output, for stacks of 6 maps of 64x320x320 (yolov9-e's layer 16) at
batches on both sides of the limit, in float16, bfloat16 and float32, without autocast (the
eval step's half model) and under autocast (float16 and bfloat16 inputs: sum autocasts to
float32, so it sums a float32 copy).

Rerun on a GPU machine (seconds): python3 calibration/half_sum.py --out calibration/results
"""
import argparse
import json
import os

import torch

DEV = torch.device("cuda:0")


def one(shape, dtype, autocast=None):
    torch.cuda.empty_cache()
    t = torch.ones(shape, dtype=dtype, device=DEV)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    st0 = torch.cuda.memory_stats()
    base, base_alloc = st0["requested_bytes.all.current"], st0["allocated_bytes.all.current"]
    with torch.no_grad(), torch.autocast("cuda", dtype=autocast or torch.float16, enabled=autocast is not None):
        o = torch.sum(t, dim=0)
    torch.cuda.synchronize()
    st = torch.cuda.memory_stats()
    out_bytes = o.numel() * o.element_size()
    r = {"shape": list(shape), "dtype": str(dtype).replace("torch.", ""),
         "autocast": str(autocast).replace("torch.", "") if autocast else None,
         "in_bytes": t.numel() * t.element_size(), "over_int32": t.numel() * t.element_size() > 2**31 - 1,
         "out_dtype": str(o.dtype).replace("torch.", ""), "out_bytes": out_bytes,
         "peak_req_over_input": st["requested_bytes.all.peak"] - base,
         "transient": st["requested_bytes.all.peak"] - base - out_bytes,
         "peak_alloc_over_input": st["allocated_bytes.all.peak"] - base_alloc}
    del t, o
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="calibration/results")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = False
    rows = []
    for b in (4, 27, 28, 32):
        shape = (6, b, 64, 320, 320)
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            rows.append(one(shape, dtype))
        for dtype in (torch.float16, torch.bfloat16):
            rows.append(one(shape, dtype, autocast=dtype))
    for r in rows:
        print("sum(dim=0) of %-22s %-8s autocast %-8s in %11d B (> 2^31-1: %-5s) out %-8s %11d B: transient %11d B = %.3f x out" % (
            r["shape"], r["dtype"], r["autocast"], r["in_bytes"], r["over_int32"], r["out_dtype"], r["out_bytes"],
            r["transient"], r["transient"] / float(r["out_bytes"])), flush=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "half_sum.json"), "w") as fh:
        json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
