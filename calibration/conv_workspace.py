"""cuDNN convolution workspaces (transient allocations) with cudnn.benchmark=False.

Workspaces are allocated through the caching allocator, so they count in
max_memory_allocated. For a grid of YOLOv9-like convs, in fp32 and in fp16 (autocast with an
fp16 input and fp32 weights), N in {1, 8}, H=W in {160, 80, 40} (640 for the 3-channel stem),
contiguous input and channel-slice input (x[:, C:] of a 2C-channel tensor, like chunk(2,1)[1]),
it records with torch.cuda.memory._record_memory_history / _snapshot the allocation events of
  * forward: everything allocated and freed inside the conv call (workspace, contiguous copy);
  * backward: the conv's own backward only, delimited by marker allocations (37 bytes when the
    output gradient is ready, 41 bytes when the input gradient reaches the producer);
    grad input / grad weight / workspaces / contiguous copies / fp16->fp32 grad casts.
plus in_bytes, w_bytes, out_bytes and the peaks over the pre-phase level.
Each config runs twice; rows hold the warm (second) run, and the cold run's transients when
they differ.

Rerun on a GPU machine:  python3 calibration/conv_workspace.py --out DIR
(writes DIR/conv_workspace.json)
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn

from memtrace import MARK_BWD_BEGIN, MARK_BWD_END, Src, compact, mark, trace_entries, trace_mark, trace_reset  # noqa: E402,F401

DEV = torch.device("cuda:0")





def transients(ev, begin=None, end=None):
    """Sizes allocated and freed inside [begin marker, end marker] (whole list if None)."""
    i0, i1 = 0, len(ev)
    if begin is not None:
        for i, e in enumerate(ev):
            if e[0] == "m" and e[1] == begin:
                i0 = i + 1
    if end is not None:
        for i, e in enumerate(ev):
            if i >= i0 and e[0] == "m" and e[1] == end:
                i1 = i
                break
    seg = ev[i0:i1]
    allocs = [(s, i) for a, s, i in seg if a == "a"]
    freed = {i for a, s, i in seg if a == "f"}
    return [s for s, i in allocs if i in freed], [s for s, i in allocs if i not in freed]






class Sink(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y):
        ctx.meta = (y.shape, y.dtype)
        return torch.zeros((), device=DEV)

    @staticmethod
    def backward(ctx, g):
        gy = torch.ones(ctx.meta[0], dtype=ctx.meta[1], device=DEV)
        mark(MARK_BWD_BEGIN)
        return gy


def alloc():
    torch.cuda.synchronize(DEV)
    return torch.cuda.memory_allocated(DEV)


def peak():
    torch.cuda.synchronize(DEV)
    return torch.cuda.max_memory_allocated(DEV)


def cycle(conv, getx, amp):
    conv.weight.grad = None
    if conv.bias is not None:
        conv.bias.grad = None
    x = getx()
    trace_reset()
    m0 = len(trace_entries())  # robust even if disabling history does not clear it
    base = alloc()
    torch.cuda.reset_peak_memory_stats(DEV)
    t0 = time.time()
    if amp:
        with torch.autocast("cuda", dtype=torch.float16):
            y = conv(x)
    else:
        y = conv(x)
    r = {"fwd_after": alloc() - base, "fwd_peak": peak() - base}
    fe = compact(trace_entries()[m0:])
    out_shape, out_dtype = list(y.shape), y.dtype
    loss = Sink.apply(y)
    del y, x
    trace_reset()
    m1 = len(trace_entries())
    torch.cuda.reset_peak_memory_stats(DEV)
    pre = alloc()
    loss.backward()
    r["bwd_after"] = alloc() - pre
    r["bwd_peak"] = peak() - pre
    be = compact(trace_entries()[m1:])
    r["secs"] = round(time.time() - t0, 4)
    del loss
    r["fwd_events"] = fe
    r["bwd_events"] = be
    r["fwd_transients"], r["fwd_persist"] = transients(fe)
    r["bwd_transients"], r["bwd_persist"] = transients(be, MARK_BWD_BEGIN, MARK_BWD_END)
    r["out_shape"], r["out_dtype"] = out_shape, str(out_dtype).replace("torch.", "")
    conv.weight.grad = None
    if conv.bias is not None:
        conv.bias.grad = None
    return r


def measure(name, cin, cout, k, s, bias, n, h, amp, layout, in_grad=True, x_f32=False):
    torch.cuda.empty_cache()
    conv = nn.Conv2d(cin, cout, k, s, k // 2, bias=bias).to(DEV)
    xdt = torch.float32 if (not amp or x_f32) else torch.float16
    c_leaf = cin if layout == "contig" else 2 * cin
    leafx = torch.randn(n, c_leaf, h, h, device=DEV, dtype=xdt).requires_grad_(in_grad)

    def getx():
        x = Src.apply(leafx) if in_grad else leafx
        return x if layout == "contig" else x[:, cin:]

    cold = cycle(conv, getx, amp)
    torch.cuda.empty_cache()
    warm = cycle(conv, getx, amp)
    es = 2 if amp else 4
    ho = (h + 2 * (k // 2) - k) // s + 1
    row = {
        "config": {"name": name, "cin": cin, "cout": cout, "k": k, "s": s, "bias": bias, "n": n, "h": h,
                   "dtype": "fp16_autocast" if amp else "fp32", "layout": layout, "in_grad": in_grad,
                   "x_dtype": str(xdt).replace("torch.", "")},
        "in_bytes": n * cin * h * h * es,
        "x_bytes_given": n * cin * h * h * (4 if xdt == torch.float32 else 2),
        "w_bytes": cout * cin * k * k * es,
        "w_bytes_fp32": cout * cin * k * k * 4,
        "b_bytes": (cout * es) if bias else 0,
        "out_bytes": n * cout * ho * ho * es,
    }
    row.update({k_: v for k_, v in warm.items()})
    for key in ("fwd_transients", "bwd_transients", "fwd_persist", "bwd_persist"):
        if cold[key] != warm[key]:
            row["cold_" + key] = cold[key]
    if cold["fwd_peak"] != warm["fwd_peak"] or cold["bwd_peak"] != warm["bwd_peak"]:
        row["cold_peaks"] = [cold["fwd_peak"], cold["bwd_peak"]]
    del conv, leafx
    torch.cuda.empty_cache()
    return row


CONVS = [
    ("3x64_k3s2", 3, 64, 3, 2, False, [640]),
    ("64x128_k3s2", 64, 128, 3, 2, False, [160, 80, 40]),
    ("32x32_k3s1", 32, 32, 3, 1, False, [160, 80, 40]),
    ("64x64_k3s1", 64, 64, 3, 1, False, [160, 80, 40]),
    ("256x256_k3s1", 256, 256, 3, 1, False, [160, 80, 40]),
    ("128x128_k1", 128, 128, 1, 1, False, [160, 80, 40]),
    ("512x256_k1", 512, 256, 1, 1, False, [160, 80, 40]),
    ("256x144_k1_bias", 256, 144, 1, 1, True, [160, 80, 40]),
]


def short(row):
    c = row["config"]
    return "%-16s n=%d h=%3d %-13s %-6s ig=%d in=%d w=%d out=%d | fwd_tr=%s bwd_tr=%s | pk %d/%d" % (
        c["name"], c["n"], c["h"], c["dtype"], c["layout"], c["in_grad"], row["in_bytes"], row["w_bytes"],
        row["out_bytes"], row["fwd_transients"], row["bwd_transients"], row["fwd_peak"], row["bwd_peak"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true", help="N=8, H=80 only")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.backends.cudnn.benchmark = False
    torch.cuda.set_device(DEV)
    torch.manual_seed(0)
    res = {"env": {"torch": torch.__version__, "cuda": torch.version.cuda,
                   "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(DEV),
                   "cudnn.benchmark": torch.backends.cudnn.benchmark,
                   "cudnn.deterministic": torch.backends.cudnn.deterministic,
                   "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32},
           "rows": []}
    t0 = time.time()
    for name, cin, cout, k, s, bias, hs in CONVS:
        for n in (1, 8):
            for amp in (False, True):
                for h in hs:
                    if a.quick and (n != 8 or h not in (80, 640)):
                        continue
                    variants = [dict(layout="contig"), dict(layout="chunk")]
                    if cin == 3:
                        variants += [dict(layout="contig", in_grad=False)]
                        if amp:
                            variants += [dict(layout="contig", in_grad=False, x_f32=True)]
                    for v in variants:
                        try:
                            row = measure(name, cin, cout, k, s, bias, n, h, amp, **v)
                            print(short(row), flush=True)
                        except Exception as e:
                            row = {"config": dict(name=name, n=n, h=h, amp=amp, **v), "error": repr(e)}
                            print("ERROR", row, flush=True)
                        res["rows"].append(row)
                        if len(res["rows"]) % 10 == 0:  # partial results survive a timeout
                            with open(os.path.join(a.out, "conv_workspace.json"), "w") as f:
                                json.dump(res, f, separators=(",", ":"))
    res["elapsed_s"] = round(time.time() - t0, 1)
    try:
        torch.cuda.memory._record_memory_history(enabled=None)
    except Exception:
        pass
    with open(os.path.join(a.out, "conv_workspace.json"), "w") as f:
        json.dump(res, f, separators=(",", ":"))
    print("wrote", os.path.join(a.out, "conv_workspace.json"), "in", res["elapsed_s"], "s")


if __name__ == "__main__":
    sys.exit(main())
