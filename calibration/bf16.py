"""Model steps under autocast to bfloat16 against float16: yolov9_segments.py's model step.

Hidden scenarios carry amp_dtype "bfloat16": torch.autocast('cuda', torch.bfloat16) in place of
torch.float16. This script runs yolov9_segments.py's model step (imported from it: its Model,
its scenario() with the autocast dtype as its dtype argument: empty_cache, x = randn(B, 3, S, S),
a warm-up step, then the measured step with reset peaks) for the same scenarios in both types,
each in a fresh process, and puts the figures side by side: m0, after_fwd, fwd_peak, peak,
peak_req, peak_reserved and after_bwd.

after_fwd is what the forward keeps (activations saved for the backward, the cast weights and
the outputs): when it is equal to the byte, bf16 makes tensors of the same sizes as fp16. The
peaks also hold the transients, the cuDNN workspaces among them (allocated and freed inside one
convolution call): a difference there with after_fwd equal is a transient's. The scenarios
flagged t are traced (allocation by allocation, yolov9_segments.py's format) in both types, so
the two can be compared event by event.

The parent (no CUDA) runs the processes concurrently, at most --jobs at a time with the sum of
their estimated memory under --budget GiB (each process's caching allocator is its own, so
concurrency changes none of its figures), and writes --out/bf16.json and bf16_traces.jsonl.gz.
Scenarios: cfg:batch:img:amp|bf16:K[:t], comma-separated.

Rerun on a GPU machine, from the repository root (under two minutes):
    python3 calibration/bf16.py --out calibration/results | tee calibration/results/bf16.log
"""
import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from eval_step import run_pool  # noqa: E402  (no torch at import)

DEFAULT = ",".join("%s:%d:640:%s:%d:%s" % (cfg, b, prec, k, "t" if b == 8 else "")
                   for cfg in ("yolov9-s", "yolov9-c") for b in (1, 8, 32, 64) for k in (0, 2) for prec in ("amp", "bf16"))
# GiB per image at 640 (the ground truth's reserved peaks of AMP model steps, with a margin), by (cfg, K).
PER_IMAGE_GIB = {("yolov9-s", 0): 0.40, ("yolov9-s", 2): 0.22, ("yolov9-c", 0): 1.10, ("yolov9-c", 2): 0.58}
FIELDS = ("m0", "after_fwd", "fwd_peak", "peak", "peak_req", "peak_reserved", "after_bwd")


def child(spec, out_path, trace_path):
    import torch
    import yolov9_segments as ys

    own_where = ys.where

    def where(e):
        """yolov9_segments.py's frame, and the innermost Python frame when it is torch's ("conv.py:549 _conv_forward")."""
        frames = e.get("frames") or []
        own = own_where(e)
        if frames and os.path.basename(frames[0].get("filename", "")) != ys.HERE:
            fr = frames[0]
            return "%s | %s:%d %s" % (own, os.path.basename(fr.get("filename", "")), fr.get("line", 0), fr.get("name", ""))
        return own

    ys.where = where  # events() looks it up in its module: the traces' where, with the innermost frame added
    t0 = time.time()
    cfg, batch, img, prec, k, tr = (spec.split(":") + [""])[:6]
    batch, img, k = int(batch), int(img), int(k)
    dtype = {"amp": torch.float16, "bf16": torch.bfloat16}[prec]
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    model = ys.Model(ys.TABLES[cfg]).to(ys.DEV).train()
    res, ev = ys.scenario(model, cfg, batch, img, True, k, tr == "t", dtype=dtype)
    out = {"cfg": cfg, "batch": batch, "img": img, "amp": True, "amp_dtype": str(dtype).replace("torch.", ""),
           "segments": k, "result": res, "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
           "gpu": torch.cuda.get_device_name(0), "wall_s": round(time.time() - t0, 2)}
    with open(out_path, "w") as fh:
        json.dump(out, fh)
    if ev is not None:
        with open(trace_path, "w") as fh:
            json.dump({"cfg": cfg, "batch": batch, "img": img, "amp_dtype": out["amp_dtype"], "segments": k,
                       "result": res, "events": ev}, fh)
    print("%s b%d %d %s k%d: %s" % (cfg, batch, img, prec, k, " ".join("%s %.1f" % (f, res[f] / 2**20) for f in FIELDS)),
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="calibration/results")
    ap.add_argument("--scenarios", default=DEFAULT)
    ap.add_argument("--json", default="bf16.json")
    ap.add_argument("--traces", default="bf16_traces.jsonl.gz")
    ap.add_argument("--groundtruth", default=os.path.join(HERE, "..", "..", "shared", "groundtruth", "calibration.jsonl"))
    ap.add_argument("--jobs", type=int, default=5)
    ap.add_argument("--budget", type=float, default=80.0, help="GiB: the running scenarios' estimated memory")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds for one scenario")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    ap.add_argument("--child-trace", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.child_out, a.child_trace)
        return
    os.makedirs(a.out, exist_ok=True)
    gt = {}
    if os.path.exists(a.groundtruth):
        for line in open(a.groundtruth):
            d = json.loads(line)
            if d.get("kind") == "model_step" and d.get("amp"):
                gt[(d["cfg"], d["batch"], d["img"], d["segments"])] = d["measured"]
    tmp = tempfile.mkdtemp(prefix="bf16_")
    jobs = []
    for n, spec in enumerate(a.scenarios.split(",")):
        cfg, batch, img, prec, k = spec.split(":")[:5]
        est = 1.0 + PER_IMAGE_GIB.get((cfg, int(k)), 1.2) * int(batch) * (int(img) / 640.0) ** 2
        base = os.path.join(tmp, "%02d" % n)
        argv = ["timeout", str(int(a.timeout)), sys.executable, os.path.abspath(__file__), "--child", spec,
                "--child-out", base + ".json", "--child-trace", base + ".trace.json"]
        jobs.append(((n, spec, base), est, argv, base + ".log"))
    results = {}
    t0 = time.time()
    trace_tmp = os.path.join(a.out, a.traces + ".part")
    trace_fh = open(trace_tmp, "w")

    def pairs():
        by = {}
        for d in results.values():
            if "result" in d:
                by.setdefault((d["cfg"], d["batch"], d["img"], d["segments"]), {})[d["amp_dtype"]] = d["result"]
        out = []
        for key in sorted(by):
            p = by[key]
            if "float16" in p and "bfloat16" in p:
                out.append({"cfg": key[0], "batch": key[1], "img": key[2], "segments": key[3], "float16": p["float16"],
                            "bfloat16": p["bfloat16"],
                            "bf16_minus_fp16": {f: p["bfloat16"][f] - p["float16"][f] for f in FIELDS},
                            "groundtruth_fp16": gt.get(key, {})})
        return out

    def write():
        scen = [results[n] for n in sorted(results)]
        meta = next((s for s in scen if "torch" in s), {})
        with open(os.path.join(a.out, a.json), "w") as fh:
            json.dump({"torch": meta.get("torch"), "cudnn": meta.get("cudnn"), "gpu": meta.get("gpu"), "fresh": True,
                       "step": "yolov9_segments.py model step, autocast float16 (amp) or bfloat16",
                       "scenarios": scen, "pairs": pairs()}, fh, indent=1)

    def done(job, rc, secs):
        n, spec, base = job[0]
        log = open(job[3]).read() if os.path.exists(job[3]) else ""
        if rc == 0 and os.path.exists(base + ".json"):
            d = json.load(open(base + ".json"))
            results[n] = d
            if os.path.exists(base + ".trace.json"):
                trace_fh.write(open(base + ".trace.json").read().strip() + "\n")
                trace_fh.flush()
            r = d["result"]
            print("[%6.1f s] %-26s ok in %5.1f s: %s" % (time.time() - t0, spec, secs,
                                                     " ".join("%s %.1f" % (f, r[f] / 2**20) for f in FIELDS)), flush=True)
        else:
            results[n] = {"spec": spec, "error": "exit %d" % rc, "log": log[-4000:]}
            print("[%6.1f s] %-26s FAILED (exit %d) in %.1f s:\n%s" % (time.time() - t0, spec, rc, secs, log[-4000:]), flush=True)
        write()

    run_pool(jobs, a.budget, a.jobs, done)
    trace_fh.close()
    with open(trace_tmp, "rb") as src, gzip.open(os.path.join(a.out, a.traces), "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(trace_tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    write()
    mib = 2.0 ** 20
    print("\nbf16 against fp16 (MiB; diff = bf16 - fp16 in bytes)")
    print("%-9s %5s %2s  %-13s %10s %10s %10s %10s  %s" % ("cfg", "batch", "k", "field", "fp16", "bf16", "diff B", "gt fp16", ""))
    for p in pairs():
        for f in ("after_fwd", "fwd_peak", "peak", "peak_req", "peak_reserved", "after_bwd"):
            g = p["groundtruth_fp16"].get(f)
            print("%-9s %5d %2d  %-13s %10.1f %10.1f %+10d %10s" % (
                p["cfg"], p["batch"], p["segments"], f, p["float16"][f] / mib, p["bfloat16"][f] / mib,
                p["bf16_minus_fp16"][f], "%.1f" % (g / mib) if g is not None else "-"))
    print("done in %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    main()
