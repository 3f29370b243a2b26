"""What a portrait validation forward of YOLOv9 allocates that a landscape one does not.

The validation forward as train_dual.py runs it through val_dual.run (github.com/WongKinYiu/yolov9
at 5b1ea9a, imported from --yolo, default third_party/yolov9): the EMA copy of the model
(deepcopy(model).eval(), requires_grad off) .half(), under torch.inference_mode(); the batch
uint8 pinned -> .to(cuda, non_blocking=True) -> .half() -> /= 255 in place -> model(im), which
returns ((y1, y2), [d1, d2]). init_seeds(0, deterministic=True) as train_dual, cudnn.benchmark
False, random weights (Model(cfg, ch=3, nc=80)).

Per model and input shape (N, 3, H, W):
  cold      the first forward at that shape (the head makes its anchors; cuDNN picks its plans):
            its transient peak above the level before it;
  fwd       after that warm-up: empty_cache, reset_peak_memory_stats, m0 = memory_allocated(),
            a fresh batch's forward; peak = max_memory_allocated() - m0 (the forward's
            transient peak, the input's uint8 and half copies included), after = allocated - m0
            with the outputs and the half input alive, after_del once they are dropped;
  trace     the same forward under torch.cuda.memory._record_memory_history (Python and C++
            stacks), with 1-byte-odd markers (7001 + 2 i bytes) at the start of top-level layer
            i: the 15 largest allocations (size, layer, lifetime in events, alive at the peak or
            at the end, Python frames in the yolov9 repo / torch.nn, innermost C++ frames), the
            allocations alive at the peak summed by Python frame and by layer, and the
            segment_alloc (cudaMalloc) events;
  layers    hooks on every top-level layer of model.model: allocated before/after and the peak
            within the layer (peaks reset before each layer);
  convs     hooks on every nn.Conv2d: the transient of the conv call (peak above the level
            before it less its output), i.e. its cuDNN workspace or a contiguous copy of its
            input, with the input's shape and contiguity;
  nms       (--nms) the rest of val_dual's batch body on the GPU: non_max_suppression of
            preds[1] (conf 0.001, iou 0.7, multi_label, max_det 300) with the outputs alive;
  probe     (--probe) single fp16 convs (the head's 64->64 3x3 groups=4 conv, a 128->128 3x3, the
            1x1 384->192 and 192->192 of RepNCSPELAN4) at N 16 and 32 over portrait, landscape and
            square maps, cudnn.deterministic True and False: the transient of a warm call.

Rerun on a GPU machine, from the repository root (about a minute):
    python3 calibration/eval_portrait.py --nms --probe --out calibration/results
"""
import argparse
import json
import os
import sys
import time
from copy import deepcopy

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MiB = 2 ** 20

SHAPES = "32x640x448,32x448x640,32x480x640,32x640x480,32x640x640,16x640x448"


def rnd(n):
    return (n + 511) // 512 * 512


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="yolov9-s,yolov9-c")
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--trace-shapes", default=SHAPES, help="shapes to trace (subset of --shapes)")
    ap.add_argument("--layer-shapes", default=SHAPES)
    ap.add_argument("--stacks", default="all", help="all (Python and C++) or python")
    ap.add_argument("--nms", action="store_true")
    ap.add_argument("--probe", action="store_true", help="single-conv workspaces of the head's grouped conv and a 1x1 conv")
    ap.add_argument("--yolo", default=os.path.join(REPO, "third_party", "yolov9"))
    ap.add_argument("--out", default=os.environ.get("OUT", os.path.join(HERE, "results")))
    a = ap.parse_args()

    sys.path.insert(0, HERE)
    import train_run
    train_run.install_stubs()
    yolo = os.path.abspath(a.yolo)
    sys.path.insert(0, yolo)
    try:
        import yaml  # noqa: F401
    except ImportError:
        sys.path.append(os.path.join(REPO, "third_party", "pylib"))

    import torch
    import torch.nn as nn
    from models.yolo import Model
    from utils.general import init_seeds, non_max_suppression

    init_seeds(0, deterministic=True)
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda:0")
    torch.cuda.init()
    torch.cuda.set_device(dev)

    def parse_shape(s):
        n, h, w = (int(x) for x in s.split("x"))
        return (n, 3, h, w)

    shapes = [parse_shape(s) for s in a.shapes.split(",")]
    trace_shapes = {parse_shape(s) for s in a.trace_shapes.split(",") if s}
    layer_shapes = {parse_shape(s) for s in a.layer_shapes.split(",") if s}
    gen = torch.Generator().manual_seed(1234)

    def batch(shape):
        return torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen).pin_memory()

    def forward(model, cpu):
        """val_dual's preprocessing and inference; returns (outputs, half input)."""
        im = cpu.to(dev, non_blocking=True)
        im = im.half()
        im /= 255
        out = model(im)
        return out, im

    def sync_reset():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()

    def out_bytes(o):
        if isinstance(o, torch.Tensor):
            return rnd(o.untyped_storage().nbytes()) if o.is_cuda else 0
        if isinstance(o, (list, tuple)):
            return sum(out_bytes(x) for x in o)
        return 0

    def keep_frame(f):
        fn = f.get("filename", "")
        return fn.endswith(".py") and ("/yolov9/" in fn or "/torch/nn/" in fn or fn.endswith("eval_portrait.py"))

    def pyframes(frames):
        return [f"{os.path.basename(f['filename'])}:{f['line']} {f['name']}" for f in frames if keep_frame(f)][:5]

    SKIP_CXX = ("c10::cuda::CUDACachingAllocator", "torch::unwind", "torch::CapturedTraceback", "c10::Gather",
                "c10::cuda::CUDACachingAllocator::Native", "std::", "torch::gather", "c10::detail", "c10::impl",
                "c10::Dispatcher", "c10::KernelFunction", "c10::BoxedKernel", "torch::autograd::VariableType",
                "c10::cuda::Device", "at::_ops::", "torch::ADInplaceOrView", "wrap_kernel_functor")

    def cxxframes(frames):
        out = []
        for f in frames:
            fn, name = f.get("filename", ""), f.get("name", "")
            if fn.endswith(".py"):
                continue
            if any(s in name for s in SKIP_CXX) or name in ("", "??"):
                continue
            nm = name if len(name) < 160 else name[:160] + "..."
            out.append(nm)
            if len(out) >= 8:
                break
        return out

    def inner_py(frames):
        for f in frames:
            if f.get("filename", "").endswith(".py"):
                return f"{os.path.basename(f['filename'])}:{f['line']} {f['name']}"
        return None

    def analyse(entries, n_layers, layer_types):
        """Allocation events of one traced forward."""
        live, recs, segs = {}, [], []
        cur = 0
        peak, peak_i = 0, -1
        layer = None
        marker_addrs = set()
        for i, e in enumerate(entries):
            act, addr, size = e.get("action"), e.get("addr"), e.get("size", 0)
            if act == "alloc":
                if size % 2 == 1 and 7001 <= size < 7001 + 2 * n_layers:
                    layer = (size - 7001) // 2
                    marker_addrs.add(addr)
                    continue
                r = {"size": size, "layer": layer, "i": i, "free_i": None, "frames": e.get("frames", [])}
                live[addr] = r
                recs.append(r)
                cur += rnd(size)
                if cur > peak:
                    peak, peak_i = cur, i
            elif act in ("free_requested", "free_completed"):
                if addr in marker_addrs:
                    if act == "free_completed":
                        marker_addrs.discard(addr)
                    continue
                r = live.pop(addr, None)
                if r is not None:
                    r["free_i"] = i
                    cur -= rnd(r["size"])
            elif act in ("segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom"):
                segs.append({"action": act, "size": size, "layer": layer,
                             "py": pyframes(e.get("frames", []))[:2]})

        def alive_at(r, i):
            return r["i"] <= i and (r["free_i"] is None or r["free_i"] > i)

        def row(r):
            d = {"MiB": round(r["size"] / MiB, 3), "bytes": r["size"], "layer": r["layer"],
                 "layer_type": layer_types[r["layer"]] if r["layer"] is not None else None,
                 "lifetime_events": (r["free_i"] - r["i"]) if r["free_i"] is not None else None,
                 "alive_at_end": r["free_i"] is None, "alive_at_peak": alive_at(r, peak_i),
                 "inner_py": inner_py(r["frames"]), "py": pyframes(r["frames"]), "cxx": cxxframes(r["frames"])}
            return d

        top = sorted(recs, key=lambda r: -r["size"])[:15]
        at_peak = [r for r in recs if alive_at(r, peak_i)]
        by_frame, by_layer = {}, {}
        for r in at_peak:
            k = (pyframes(r["frames"]) or [inner_py(r["frames"]) or "?"])[0]
            by_frame[k] = by_frame.get(k, 0) + rnd(r["size"])
            kl = str(r["layer"])
            by_layer[kl] = by_layer.get(kl, 0) + rnd(r["size"])
        peak_rec = next((r for r in recs if r["i"] == peak_i), None)
        # transient allocations (freed within the forward) inside conv calls: workspaces or copies
        conv_transients = []
        for r in recs:
            if r["free_i"] is None:
                continue
            ip = inner_py(r["frames"]) or ""
            if "_conv_forward" in ip and r["size"] >= MiB:
                conv_transients.append(r)
        return {
            "n_allocs": len(recs),
            "peak_above_start_MiB": round(peak / MiB, 3),
            "peak_event": row(peak_rec) if peak_rec else None,
            "top15": [row(r) for r in top],
            "alive_at_peak_by_frame_MiB": {k: round(v / MiB, 3) for k, v in sorted(by_frame.items(), key=lambda kv: -kv[1])},
            "alive_at_peak_by_layer_MiB": {k: round(v / MiB, 3) for k, v in sorted(by_layer.items(), key=lambda kv: -kv[1])},
            "alive_at_peak": [row(r) for r in sorted(at_peak, key=lambda r: -r["size"])[:40]],
            "conv_transients_ge_1MiB": [row(r) for r in sorted(conv_transients, key=lambda r: -r["size"])[:30]],
            "conv_transients_total_count": len(conv_transients),
            "segments": segs,
        }

    res = {"env": {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                   "gpu": torch.cuda.get_device_name(0), "deterministic": torch.are_deterministic_algorithms_enabled(),
                   "cudnn.deterministic": torch.backends.cudnn.deterministic, "cudnn.benchmark": torch.backends.cudnn.benchmark,
                   "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32, "stacks": a.stacks,
                   "stubbed": sorted(set(train_run.STUBBED)), "yolov9": "WongKinYiu/yolov9@5b1ea9a"},
           "models": {}}
    t_start = time.time()

    for cfg in a.models.split(","):
        t0 = time.time()
        sync_reset()
        torch.manual_seed(0)
        model = Model(os.path.join(yolo, "models/detect", cfg + ".yaml"), ch=3, nc=80).to(dev)
        ema = deepcopy(model).eval()
        for p in ema.parameters():
            p.requires_grad_(False)
        del model
        ema.half()
        layers = list(ema.model)
        layer_types = [type(m).__name__ for m in layers]
        sync_reset()
        mres = {"weights_MiB": round(torch.cuda.memory_allocated() / MiB, 3), "layer_types": layer_types, "shapes": {}}
        print(f"== {cfg}: ema half {mres['weights_MiB']} MiB, {len(layers)} layers, build {time.time() - t0:.1f}s", flush=True)

        for shape in shapes:
            key = "x".join(str(s) for s in shape)
            sres = {}
            t1 = time.time()
            with torch.inference_mode():
                # cold: first forward at this shape
                cpu = batch(shape)
                sync_reset()
                m0 = torch.cuda.memory_allocated()
                out, im = forward(ema, cpu)
                torch.cuda.synchronize()
                sres["cold"] = {"peak_MiB": round((torch.cuda.max_memory_allocated() - m0) / MiB, 3),
                                "after_MiB": round((torch.cuda.memory_allocated() - m0) / MiB, 3)}
                del out, im

                # fwd: the warm measured forward
                cpu = batch(shape)
                sync_reset()
                m0 = torch.cuda.memory_allocated()
                req0 = torch.cuda.memory_stats()["requested_bytes.all.current"]
                out, im = forward(ema, cpu)
                torch.cuda.synchronize()
                st = torch.cuda.memory_stats()
                sres["fwd"] = {"before_MiB": round(m0 / MiB, 3),
                               "peak_MiB": round((st["allocated_bytes.all.peak"] - m0) / MiB, 3),
                               "peak_req_MiB": round((st["requested_bytes.all.peak"] - req0) / MiB, 3),
                               "after_MiB": round((torch.cuda.memory_allocated() - m0) / MiB, 3),
                               "reserved_peak_MiB": round(st["reserved_bytes.all.peak"] / MiB, 3),
                               "out_MiB": round(out_bytes(out) / MiB, 3), "im_half_MiB": round(out_bytes(im) / MiB, 3),
                               "input_uint8_MiB": round(rnd(cpu.numel()) / MiB, 3)}

                # nms: the rest of the batch body, outputs alive
                if a.nms:
                    preds = out[0][1]
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    m1 = torch.cuda.memory_allocated()
                    dets = non_max_suppression(preds, 0.001, 0.7, labels=[], multi_label=True, agnostic=False, max_det=300)
                    torch.cuda.synchronize()
                    sres["nms"] = {"peak_above_fwd_after_MiB": round((torch.cuda.max_memory_allocated() - m1) / MiB, 3),
                                   "peak_above_fwd_before_MiB": round((torch.cuda.max_memory_allocated() - m0) / MiB, 3),
                                   "dets": sum(int(d.shape[0]) for d in dets)}
                    del dets, preds
                del out, im
                torch.cuda.synchronize()
                sres["fwd"]["after_del_MiB"] = round((torch.cuda.memory_allocated() - m0) / MiB, 3)

                # trace
                if shape in trace_shapes:
                    cpu = batch(shape)
                    hs = []
                    for i, m in enumerate(layers):
                        def pre(mod, inp, i=i):
                            t = torch.empty(7001 + 2 * i, dtype=torch.uint8, device=dev)
                            del t
                        hs.append(m.register_forward_pre_hook(pre))
                    sync_reset()
                    m0 = torch.cuda.memory_allocated()
                    torch.cuda.memory._record_memory_history(enabled=None)
                    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks=a.stacks, max_entries=200000)
                    out, im = forward(ema, cpu)
                    torch.cuda.synchronize()
                    tp = torch.cuda.max_memory_allocated() - m0
                    snap = torch.cuda.memory._snapshot()
                    torch.cuda.memory._record_memory_history(enabled=None)
                    for h in hs:
                        h.remove()
                    entries = snap["device_traces"][0] if snap["device_traces"] else []
                    sres["trace"] = analyse(entries, len(layers), layer_types)
                    sres["trace"]["max_memory_allocated_peak_MiB"] = round(tp / MiB, 3)
                    if cfg == a.models.split(",")[0] and shape == shapes[0] and entries:
                        e0 = next((e for e in entries if e.get("action") == "alloc"), None)
                        if e0:
                            sres["trace"]["first_alloc_raw_frames"] = e0.get("frames", [])[:40]
                    del snap, entries, out, im

                # layers and convs
                if shape in layer_shapes:
                    cpu = batch(shape)
                    rows, hs = [], []
                    for i, m in enumerate(layers):
                        def pre(mod, inp, i=i):
                            torch.cuda.synchronize()
                            rows.append({"i": i, "type": layer_types[i], "before": torch.cuda.memory_allocated()})
                            torch.cuda.reset_peak_memory_stats()

                        def post(mod, inp, outp, i=i):
                            torch.cuda.synchronize()
                            r = rows[-1]
                            r["after"] = torch.cuda.memory_allocated()
                            r["peak"] = torch.cuda.max_memory_allocated()
                            r["out_bytes"] = out_bytes(outp)
                        hs.append(m.register_forward_pre_hook(pre))
                        hs.append(m.register_forward_hook(post))
                    sync_reset()
                    m0 = torch.cuda.memory_allocated()
                    out, im = forward(ema, cpu)
                    torch.cuda.synchronize()
                    for h in hs:
                        h.remove()
                    sres["layers"] = [{"i": r["i"], "type": r["type"],
                                       "before_MiB": round((r["before"] - m0) / MiB, 3),
                                       "after_MiB": round((r["after"] - m0) / MiB, 3),
                                       "peak_MiB": round((r["peak"] - m0) / MiB, 3),
                                       "transient_MiB": round((r["peak"] - r["before"]) / MiB, 3),
                                       "out_MiB": round(r["out_bytes"] / MiB, 3)} for r in rows]
                    del out, im

                    cpu = batch(shape)
                    crow, hs = {}, []
                    for name, m in ema.named_modules():
                        if isinstance(m, nn.Conv2d):
                            def pre(mod, inp, name=name):
                                x = inp[0]
                                crow[name] = {"in": list(x.shape), "in_contig": bool(x.is_contiguous()),
                                              "before": torch.cuda.memory_allocated(),
                                              "k": list(mod.kernel_size), "s": list(mod.stride), "g": mod.groups,
                                              "cin": mod.in_channels, "cout": mod.out_channels}
                                torch.cuda.reset_peak_memory_stats()

                            def post(mod, inp, outp, name=name):
                                r = crow[name]
                                r["transient"] = torch.cuda.max_memory_allocated() - r["before"] - out_bytes(outp)
                                r["out"] = list(outp.shape)
                            hs.append(m.register_forward_pre_hook(pre))
                            hs.append(m.register_forward_hook(post))
                    sync_reset()
                    out, im = forward(ema, cpu)
                    torch.cuda.synchronize()
                    for h in hs:
                        h.remove()
                    sres["convs"] = {k: {"in": v["in"], "in_contig": v["in_contig"], "cin": v["cin"], "cout": v["cout"],
                                         "k": v["k"][0], "s": v["s"][0], "g": v["g"],
                                         "transient_MiB": round(v["transient"] / MiB, 3)} for k, v in crow.items()}
                    sres["convs_transient_total_MiB"] = round(sum(v["transient"] for v in crow.values()) / MiB, 3)
                    sres["convs_with_transient"] = sum(1 for v in crow.values() if v["transient"] > 0)
                    del out, im
            mres["shapes"][key] = sres
            f = sres["fwd"]
            print(f"  {key:14s} cold {sres['cold']['peak_MiB']:8.1f}  peak {f['peak_MiB']:8.1f}  after {f['after_MiB']:7.1f}"
                  f"  after_del {f['after_del_MiB']:6.1f}  trace_peak {sres.get('trace', {}).get('peak_above_start_MiB', -1):8.1f}"
                  f"  convs_ws_total {sres.get('convs_transient_total_MiB', -1):8.1f}"
                  f"  nms {sres.get('nms', {}).get('peak_above_fwd_before_MiB', -1):8.1f}  {time.time() - t1:.1f}s", flush=True)
        del ema, layers
        res["models"][cfg] = mres
        print(f"   {cfg} done in {time.time() - t0:.1f}s", flush=True)

    if a.probe:
        # single convs, fp16, contiguous, no bias, padding k // 2, under inference_mode, warm (second) call;
        # transient = peak above the level before the call less the output
        probe = []
        hw = [(80, 56), (56, 80), (80, 60), (60, 80), (80, 80), (56, 56), (80, 48), (48, 80), (64, 80), (80, 64),
              (40, 28), (28, 40), (40, 30), (30, 40), (40, 40), (160, 112), (112, 160)]
        convs = [(64, 64, 3, 4), (128, 128, 3, 1), (384, 192, 1, 1), (192, 192, 1, 1)]
        with torch.inference_mode():
            for det in (True, False):
                torch.backends.cudnn.deterministic = det
                for cin, cout, k, g in convs:
                    w = torch.randn(cout, cin // g, k, k, device=dev, dtype=torch.half)
                    for n in (16, 32):
                        for h, wd in hw:
                            x = torch.randn(n, cin, h, wd, device=dev, dtype=torch.half)
                            tr = []
                            for _ in range(2):
                                torch.cuda.synchronize()
                                torch.cuda.reset_peak_memory_stats()
                                b0 = torch.cuda.memory_allocated()
                                y = torch.nn.functional.conv2d(x, w, None, 1, k // 2, 1, g)
                                torch.cuda.synchronize()
                                tr.append(torch.cuda.max_memory_allocated() - b0 - rnd(y.numel() * 2))
                                del y
                            probe.append({"cudnn_deterministic": det, "cin": cin, "cout": cout, "k": k, "g": g, "n": n,
                                          "h": h, "w": wd, "x_MiB": round(x.numel() * 2 / MiB, 3),
                                          "transient_MiB": round(tr[1] / MiB, 3), "cold_transient_MiB": round(tr[0] / MiB, 3)})
                            del x
                    del w
        torch.backends.cudnn.deterministic = True
        res["conv_probe"] = probe
        for p in probe:
            if p["n"] == 32 and p["k"] == 3 and p["g"] == 4:
                print("  probe det=%d %dx%d k%d g%d N%d %dx%d: %.3f MiB" % (p["cudnn_deterministic"], p["cin"], p["cout"], p["k"],
                                                                           p["g"], p["n"], p["h"], p["w"], p["transient_MiB"]))

    res["secs"] = round(time.time() - t_start, 1)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "eval_portrait.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
