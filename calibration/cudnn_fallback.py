"""cuDNN's out-of-memory fallback and the CUDA context, measured (issue 34).

With cudnn.benchmark off, PyTorch's aten/src/ATen/native/cudnn/Conv_v8.cpp
(run_single_conv) runs the plan cached for a call's shape; else the top
heuristic engine config, then every heuristic config, then cuDNN's fallback
list (try_configs). run_conv_plan allocates the plan's workspace through the
caching allocator; when that fails (after the allocator released its cached
blocks and retried: num_alloc_retries, then num_ooms), c10::OutOfMemoryError is
caught and the next config is tried. The first config that runs is cached for
the shape (benchmark cache), so later calls of the shape keep it.

For a few convolution calls whose workspace is large, each in a fresh process:
  probe    uncapped: the call's allocations (output, workspace) recorded with
           torch.cuda.memory._record_memory_history, and reserved before it;
  fits     capped at exactly reserved + output's segment + workspace's segment;
  short    capped 2 MiB below that (the top engine's workspace cannot be had);
  half     capped at half the workspace's segment;
  none     capped at reserved + output's segment (no workspace at all);
  release  16 MiB of small-pool segments cached (they cannot serve a large
           request) and the cap at "fits": the workspace fits only once the
           allocator released its cache;
each capped run records the call's allocations and OOM events, memory_stats'
num_ooms and num_alloc_retries, reserved before and after; then the cap is
lifted and the call runs again (does the plan cache keep the engine that ran?).

Context: in a fresh process, total - free of cudaMemGetInfo less
memory_reserved() after CUDA init, after the first cuDNN convolution and after
the first cuBLAS matmul (CUDA_MODULE_LOADING as the environment has it).

Rerun on a GPU machine:  python3 calibration/cudnn_fallback.py --out DIR
(writes DIR/cudnn_fallback.json)
"""
import argparse
import json
import os
import subprocess
import sys

MIB = 1 << 20

# name: (which, dtype, N, Cin, Cout, H, K, stride)
CASES = {
    "fwd_3x3_fp16": ("fwd", "half", 16, 256, 256, 80, 3, 1),
    "bwd_data_3x3_fp16": ("bwd-data", "half", 16, 256, 256, 80, 3, 1),
    "bwd_filter_3x3_fp16": ("bwd-filter", "half", 16, 256, 256, 80, 3, 1),
    "fwd_3x3_fp32": ("fwd", "float", 8, 256, 256, 160, 3, 1),
    "bwd_data_1x1_fp16": ("bwd-data", "half", 8, 512, 256, 160, 1, 1),
    "bwd_filter_3x3s2_fp16": ("bwd-filter", "half", 32, 128, 256, 160, 3, 2),
}


def seg(n):
    """The segment cudaMalloc'd for a request of n bytes (CUDACachingAllocator)."""
    r = n if n < 512 else (n + 511) // 512 * 512
    if r <= MIB:
        return 2 * MIB
    if r < 10 * MIB:
        return 20 * MIB
    return (r + 2 * MIB - 1) // (2 * MIB) * (2 * MIB)


def child(case, level, allowed_extra):
    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.benchmark = False
    which, dt, n, cin, cout, h, k, s = CASES[case]
    dtype = getattr(torch, dt)
    dev = torch.device("cuda:0")
    torch.cuda.init()
    total = torch.cuda.mem_get_info()[1]
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(n, cin, h, h, device=dev, dtype=dtype, generator=g)
    w = torch.randn(cout, cin, k, k, device=dev, dtype=dtype, generator=g) * 0.01
    p = k // 2
    ho = (h + 2 * p - k) // s + 1
    gy = torch.randn(n, cout, ho, ho, device=dev, dtype=dtype, generator=g)
    torch.cuda.synchronize()

    def call():
        if which == "fwd":
            return F.conv2d(x, w, None, s, p)
        mask = [which == "bwd-data", which == "bwd-filter", False]
        return torch.ops.aten.convolution_backward(gy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, mask)

    base = torch.cuda.memory_reserved()
    if level == "release":
        ballast = [torch.empty(MIB, dtype=torch.uint8, device=dev) for _ in range(16)]
        del ballast
    r0 = torch.cuda.memory_reserved()
    a0 = torch.cuda.memory_allocated()
    allowed = None if allowed_extra is None else base + allowed_extra
    if allowed is not None:
        torch.cuda.set_per_process_memory_fraction((allowed + 64) / total, 0)
    out = {"case": case, "level": level, "reserved_base": base, "reserved_before": r0, "allocated_before": a0,
           "allowed": allowed, "total": total}

    def traced(tag):
        try:
            torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", clear_history=True)
        except TypeError:
            torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
        torch.cuda.reset_peak_memory_stats()
        st0 = torch.cuda.memory_stats()
        res = {"ok": True}
        try:
            y = call()
            torch.cuda.synchronize()
            del y
        except torch.OutOfMemoryError as e:
            res = {"ok": False, "error": str(e).splitlines()[0][:300]}
        st = torch.cuda.memory_stats()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        ev = []
        for e in snap["device_traces"][0]:
            if e["action"] in ("alloc", "free_completed", "segment_alloc", "segment_free", "oom"):
                ev.append([e["action"], e["size"]])
        res.update({"events": ev,
                    "num_ooms": st["num_ooms"] - st0["num_ooms"],
                    "num_alloc_retries": st["num_alloc_retries"] - st0["num_alloc_retries"],
                    "peak_allocated": st["allocated_bytes.all.peak"],
                    "reserved_after": torch.cuda.memory_reserved(),
                    "allocated_after": torch.cuda.memory_allocated()})
        out[tag] = res

    traced("call")
    if allowed_extra is not None:
        torch.cuda.set_per_process_memory_fraction(1.0, 0)
        traced("again_uncapped")
    print(json.dumps(out))


def context():
    import torch
    out = {"CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING", "")}
    torch.cuda.init()
    dev = torch.device("cuda:0")

    def used(tag):
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        out[tag] = {"total": total, "free": free, "reserved": torch.cuda.memory_reserved(),
                    "outside": total - free - torch.cuda.memory_reserved()}

    torch.empty(1, device=dev)
    used("init")
    x = torch.randn(8, 64, 80, 80, device=dev)
    w = torch.randn(64, 64, 3, 3, device=dev)
    torch.nn.functional.conv2d(x, w, padding=1)
    used("after_cudnn_conv")
    a = torch.randn(512, 512, device=dev)
    a @ a
    used("after_cublas_matmul")
    with torch.autocast("cuda", dtype=torch.float16):
        torch.nn.functional.conv2d(x, w, padding=1)
        a @ a
    used("after_fp16_conv_matmul")
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["cudnn"] = torch.backends.cudnn.version()
    out["gpu"] = torch.cuda.get_device_name(0)
    out["capability"] = list(torch.cuda.get_device_capability(0))
    out["total_memory"] = torch.cuda.get_device_properties(0).total_memory
    try:
        out["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,memory.total,memory.used", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # noqa: BLE001
        out["nvidia_smi"] = repr(e)
    print(json.dumps(out))


def run_child(args):
    p = subprocess.run([sys.executable, __file__] + args, capture_output=True, text=True, timeout=300)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"args": args, "rc": p.returncode, "stderr": p.stderr[-2000:]}
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--child", nargs=3)
    ap.add_argument("--context", action="store_true")
    a = ap.parse_args()
    if a.child:
        case, level, extra = a.child
        child(case, level, None if extra == "none" else int(extra))
        return
    if a.context:
        context()
        return
    res = {"context": [run_child(["--context"]) for _ in range(2)], "cases": []}
    for case in CASES:
        probe = run_child(["--child", case, "probe", "none"])
        rec = {"case": case, "spec": CASES[case], "probe": probe, "capped": []}
        res["cases"].append(rec)
        if "call" not in probe:
            continue
        allocs = [s for a_, s in probe["call"]["events"] if a_ == "alloc"]
        # The output (or gradient) first, then the workspace (the largest
        # block freed inside the call).
        if len(allocs) < 2:
            rec["note"] = "no workspace in the probe"
            continue
        o, ws = allocs[0], max(allocs[1:])
        rec["output"], rec["workspace"] = o, ws
        fit = seg(o) + seg(ws)
        levels = {"fits": fit, "short": fit - 2 * MIB, "half": seg(o) + seg(ws) // 2, "none": seg(o), "release": fit}
        for lv, extra in levels.items():
            r = run_child(["--child", case, lv, str(extra)])
            rec["capped"].append(r)
            print(case, lv, json.dumps({k: (r.get("call") or {}).get(k) for k in ("ok", "num_ooms", "num_alloc_retries", "peak_allocated", "reserved_after")}), file=sys.stderr, flush=True)
    with open(os.path.join(a.out, "cudnn_fallback.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
