"""Eval steps of the official YOLOv9 code, allocation by allocation (issue 35).

eval_step.py measures the ground truth's eval_step on yolov9_segments.py's re-implemented
modules; the ground truth itself ran the official models/yolo.py and models/common.py
(github.com/WongKinYiu/yolov9 at 5b1ea9a, at --yolo), whose validation of yolov9-e reads
about 9.5% above onnxmem from batch 32 on. This script runs the same sequence on the
official modules, each scenario in a fresh process:
  1. torch.manual_seed(0); Model(models/detect/<cfg>.yaml, ch=3, nc=80) on the GPU, train mode;
  2. half = copy.deepcopy(model).eval().half();
  3. a matmul, which creates the cuBLAS workspace;
  4. torch.cuda.empty_cache(); a warm-up: x = randn(B, 3, H, W) float16, half(x) under
     torch.no_grad(), outputs and x dropped;
  5. the measured step: a new x, reset_peak_memory_stats, the forward under no_grad, with
     the allocator's history recorded (Python frames): every alloc and free, its size and the
     innermost frames in the official code ("file:line function") and in torch.
Writes DIR/eval_official.json (one record a scenario: m0, after_fwd, the peaks, and the
allocations live at the peak with their frames) and DIR/eval_official_traces.jsonl.gz.

Scenarios: cfg:batch:height:width, comma-separated; --jobs runs that many at once, each its own
process (order the large ones apart so that the card holds every concurrent one); --name names the
results. Rerun on a GPU machine, from the repository root, with the official code at
third_party/yolov9:
    python3 calibration/eval_official.py --out DIR

--harness before_step empties the cache again between the warm-up and the measured forward, as the
ground truth's harness does (onnxmem's EmptyCacheStep; the default, before_warmup, empties it before
the warm-up only); --trace-warmup records the allocator's history from the model's build on, so that
the trace holds the residents' setup, the warm-up and the measured forward ("resident_events" and
"warmup_events" count the events before the warm-up and before the measured forward).

--maxbatch cfg:img:cap:lo:hi runs max_batch.py's eval_step search on the official modules
instead: each trial a fresh process capped at cap bytes (set_per_process_memory_fraction right
after CUDA init, before any allocation) running the sequence above; bisection between lo and
hi, the answer confirmed (B runs again, B+1 fails again). Writes DIR/eval_official_maxbatch.json.
"""
import argparse
import concurrent.futures
import copy
import gzip
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT = ("yolov9-e:8:640:640,yolov9-e:16:640:640,yolov9-e:32:640:640,yolov9-e:48:640:640,"
           "yolov9-e:64:640:640,yolov9-t:32:640:640,yolov9-t:64:640:640,yolov9-c:32:640:640")


def frames_of(e, yolo):
    fr = e.get("frames") or []
    own = ""
    for f in fr:
        fn = f.get("filename", "")
        if fn.startswith(yolo):
            own = "%s:%d %s" % (os.path.relpath(fn, yolo), f.get("line", 0), f.get("name", ""))
            break
    inner = "%s:%d %s" % (os.path.basename(fr[0].get("filename", "")), fr[0].get("line", 0), fr[0].get("name", "")) if fr else ""
    return own, inner


def child(spec, yolo, out_path, cap=0, harness="before_warmup", trace_warmup=False):
    sys.path.insert(0, HERE)
    import train_run
    train_run.install_stubs()
    sys.path.insert(0, yolo)
    import torch
    from models.yolo import Model

    cfg, b, h, w = spec.split(":")
    b, h, w = int(b), int(h), int(w)
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda:0")
    if cap:
        # The ground truth's max-batch harness: the cap right after CUDA
        # init, before any allocation; the whole sequence must run under it.
        torch.cuda.init()
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(cap / total, 0)
        try:
            capped_sequence(torch, Model, yolo, cfg, b, h, w, dev, harness)
            res = {"spec": spec, "cap": cap, "harness": harness, "ok": True, "peak": torch.cuda.max_memory_allocated(),
                   "peak_reserved": torch.cuda.max_memory_reserved(),
                   "num_ooms": torch.cuda.memory_stats()["num_ooms"]}
        except torch.OutOfMemoryError as e:
            res = {"spec": spec, "cap": cap, "harness": harness, "ok": False, "error": str(e).splitlines()[0][:200],
                   "num_ooms": torch.cuda.memory_stats()["num_ooms"]}
        with open(out_path, "w") as f:
            json.dump(res, f)
        return
    def traced():
        return sum(1 for e in torch.cuda.memory._snapshot()["device_traces"][0] if e["action"] in ("alloc", "free_completed"))

    if trace_warmup:
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=2000000)
    model, half = resident(torch, Model, yolo, cfg, dev)
    resident_events = traced() if trace_warmup else 0

    def segments():
        return sorted([[sg["total_size"], sg["allocated_size"], sg["segment_type"]] for sg in torch.cuda.memory_snapshot()],
                      key=lambda v: -v[0])

    stages = {"resident": [torch.cuda.memory_allocated(), torch.cuda.memory_reserved()]}
    x = torch.randn(b, 3, h, w, device=dev, dtype=torch.float16)
    with torch.no_grad():
        o = half(x)
    torch.cuda.synchronize()
    stages["warmup_peak"] = [torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()]
    del o, x
    stages["after_warmup"] = [torch.cuda.memory_allocated(), torch.cuda.memory_reserved()]
    seg_warm = segments()
    if harness == "before_step":
        torch.cuda.empty_cache()
        stages["after_empty"] = [torch.cuda.memory_allocated(), torch.cuda.memory_reserved()]
    x = torch.randn(b, 3, h, w, device=dev, dtype=torch.float16)
    torch.cuda.synchronize()
    warm_events = 0
    if trace_warmup:
        warm_events = traced()
    else:
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=2000000)
    torch.cuda.reset_peak_memory_stats()
    m0 = torch.cuda.memory_allocated()
    with torch.no_grad():
        o = half(x)
    torch.cuda.synchronize()
    after = torch.cuda.memory_allocated()
    st = torch.cuda.memory_stats()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    ev = []
    for e in snap["device_traces"][0]:
        if e["action"] not in ("alloc", "free_completed"):
            continue
        own, inner = frames_of(e, yolo)
        ev.append(["a" if e["action"] == "alloc" else "f", e["addr"], e["size"], own, inner])
    # The live set at the allocated peak.
    live, cur, best, at = {}, m0, m0, None
    for i, (act, addr, size, own, inner) in enumerate(ev):
        if i < warm_events:
            continue
        if act == "a":
            live[addr] = (size, own, inner, i)
            cur += size
        else:
            live.pop(addr, None)
            cur -= size
        if cur > best:
            best, at = cur, dict(live)
    top = sorted((v for v in (at or {}).values()), key=lambda v: -v[0])[:40]
    out = {"cfg": cfg, "batch": b, "img_h": h, "img_w": w, "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(0),
           "m0": m0, "after_fwd": after, "peak": st["allocated_bytes.all.peak"],
           "peak_req": st["requested_bytes.all.peak"], "peak_reserved": st["reserved_bytes.all.peak"],
           "trace_peak": best, "live_at_peak": top, "events": len(ev),
           "stages": stages, "segments_after_warmup": seg_warm, "segments_after": segments(),
           "harness": harness, "resident_events": resident_events, "warmup_events": warm_events}
    with open(out_path, "w") as f:
        json.dump({"result": out, "events": ev}, f)
    print("%s b%d %dx%d: m0 %.1f peak %.1f reserved %.1f MiB" % (cfg, b, h, w, m0 / 2**20, out["peak"] / 2**20,
                                                                  out["peak_reserved"] / 2**20), flush=True)


def resident(torch, Model, yolo, cfg, dev):
    """Steps 1 to 3 and the empty_cache of 4: the model, its half copy and
    the cuBLAS workspace, resident."""
    torch.manual_seed(0)
    model = Model(os.path.join(yolo, "models/detect", cfg + ".yaml"), ch=3, nc=80).to(dev).train()
    half = copy.deepcopy(model).eval().half()
    a = torch.ones(8, 8, device=dev)
    (a @ a).sum().item()
    del a
    torch.cuda.empty_cache()
    return model, half


def capped_sequence(torch, Model, yolo, cfg, b, h, w, dev, harness):
    """The eval step's sequence, as child runs it, without the trace."""
    model, half = resident(torch, Model, yolo, cfg, dev)
    for k in range(2):  # the warm-up, then the measured forward
        if k == 1 and harness == "before_step":
            torch.cuda.empty_cache()
        x = torch.randn(b, 3, h, w, device=dev, dtype=torch.float16)
        with torch.no_grad():
            o = half(x)
        torch.cuda.synchronize()
        del o, x


def max_batch(spec, yolo, out, harness):
    """The largest batch whose eval sequence runs under cap bytes, by
    bisection between lo (runs) and hi (does not), each trial a fresh
    process; spec is cfg:img:cap:lo:hi."""
    cfg, img, cap, lo, hi = spec.split(":")
    cap, lo, hi = int(cap), int(lo), int(hi)
    trials = []

    def ok(b):
        tmp = os.path.join(out, "eval_official_tmp.json")
        subprocess.run([sys.executable, __file__, "--yolo", yolo, "--out", out, "--child", "%s:%d:%s:%s" % (cfg, b, img, img),
                        "--child-out", tmp, "--cap", str(cap), "--harness", harness], capture_output=True, text=True, timeout=600)
        with open(tmp) as f:
            r = json.load(f)
        os.remove(tmp)
        trials.append(r)
        sys.stderr.write("%s b%d cap %d: %s\n" % (cfg, b, cap, "ok" if r["ok"] else "oom"))
        return r["ok"]

    if not ok(lo) or ok(hi):
        return {"spec": spec, "trials": trials, "error": "the bounds do not bracket the max batch"}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    ok(lo)  # confirmed: lo runs again, lo+1 fails again
    ok(lo + 1)
    return {"spec": spec, "cfg": cfg, "img": int(img), "capacity_bytes": cap, "harness": harness, "max_batch": lo, "trials": trials}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--yolo", default=os.path.join(REPO, "third_party", "yolov9"))
    ap.add_argument("--scenarios", default=DEFAULT)
    ap.add_argument("--child")
    ap.add_argument("--child-out")
    ap.add_argument("--cap", type=int, default=0, help="the child's allocator cap in bytes")
    ap.add_argument("--maxbatch", help="cfg:img:cap:lo:hi,... max batch searches instead of the scenarios")
    ap.add_argument("--jobs", type=int, default=1, help="scenarios run at once, each its own process")
    ap.add_argument("--name", default="eval_official", help="the results' file name: NAME.json and NAME_traces.jsonl.gz"
                    " (with --maxbatch NAME.json; default eval_official_maxbatch)")
    ap.add_argument("--harness", default="before_warmup", choices=["before_warmup", "before_step"],
                    help="where the cache is emptied: before the warm-up only, or also before the measured forward")
    ap.add_argument("--trace-warmup", action="store_true", help="record the warm-up's allocations too")
    a = ap.parse_args()
    yolo = os.path.abspath(a.yolo)
    if a.child:
        child(a.child, yolo, a.child_out, a.cap, a.harness, a.trace_warmup)
        return
    if a.maxbatch:
        res = [max_batch(s, yolo, a.out, a.harness) for s in a.maxbatch.split(",")]
        name = a.name if a.name != "eval_official" else "eval_official_maxbatch"
        with open(os.path.join(a.out, name + ".json"), "w") as f:
            json.dump(res, f, indent=1)
        return
    specs = a.scenarios.split(",")

    def run(spec):
        tmp = os.path.join(a.out, "eval_official_tmp_%s.json" % spec.replace(":", "_"))
        p = subprocess.run([sys.executable, __file__, "--yolo", yolo, "--out", a.out, "--child", spec, "--child-out", tmp,
                            "--harness", a.harness] + (["--trace-warmup"] if a.trace_warmup else []),
                           capture_output=True, text=True, timeout=600)
        sys.stderr.write(p.stdout + p.stderr[-3000:])
        if p.returncode != 0 or not os.path.exists(tmp):
            return {"spec": spec, "rc": p.returncode, "stderr": p.stderr[-3000:]}, None
        with open(tmp) as f:
            d = json.load(f)
        os.remove(tmp)
        return d["result"], {"spec": spec, "events": d["events"]}

    # Each scenario is its own process (the caching allocator is per process,
    # so running --jobs of them at once changes none of their figures, as long
    # as the card holds them all: order large ones apart).
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        done = list(pool.map(run, specs))
    with gzip.open(os.path.join(a.out, a.name + "_traces.jsonl.gz"), "wt") as tr:
        for _, trace in done:
            if trace:
                tr.write(json.dumps(trace) + "\n")
    with open(os.path.join(a.out, a.name + ".json"), "w") as f:
        json.dump([r for r, _ in done], f, indent=1)

if __name__ == "__main__":
    main()
