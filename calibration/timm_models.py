"""Training-mode exports and measured model steps of timm's networks (issue 38).

torchvision_more.py's procedure, for timm's own modules: each network is built by
timm.create_model(name, pretrained=False) (random weights, timm's defaults: no drop path),
exported in training mode (torch.onnx.export(..., training=TrainingMode.TRAINING,
do_constant_folding=False, dynamo=False, opset 17, input "images" with a dynamic batch) at its
default_cfg's input size, its initializers stripped of their data (torchvision_more.strip_model),
and measured in the same fresh process:
  - model: param_bytes, buffer_bytes, alloc_after_load;
  - model_step at the default input size, at each --batches, fp32 then AMP (fp16 autocast): the
    model in train mode, zero_grad(set_to_none=True), x = randn(B,3,H,W) resident, the forward
    (under autocast with amp), loss = out.sum() outside autocast (the sum of every output's sum),
    backward, del out; the same step twice, the second measured after reset_peak_memory_stats:
    m0, after_fwd, peak, peak_req, peak_reserved; torch.cuda.empty_cache() before each scenario.
With TIMM_TRACE=B:amp|fp32 the measured step of that scenario is traced (the allocator's
actions, sizes and innermost timm or torch frame), kept in DIR/timm_traces.jsonl.gz.
With TIMM_TRACE_FROM=init too (needs --fresh), the trace starts when CUDA does (before the model's load, so
the warm-up step and every segment_alloc are in it) and keeps the events' whole addresses.
With TIMM_SDPA=efficient every forward runs under
torch.nn.attention.sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION): scaled_dot_product_attention on
its memory-efficient kernel in float16 too, as on a card without flash attention (below sm 8.0).
Networks run --jobs at a time, each in its own process (the caching allocator is per process);
a network that fails to build, export or run is recorded with its error.
With --fresh every scenario runs in a fresh process of its own (nothing exported; the models'
exports must exist), as a user's single run would: the reserved peak of a step then carries no
segment of an earlier scenario.
Usage: python3 calibration/timm_models.py --out DIR [--models a,b] [--batches 1,8,32] [--jobs 6]
       [--no-export] [--fresh [--precisions fp32,amp]] [--jsonl NAME]
Writes DIR/timm_models.jsonl (the ground truth's line format, "img_h"/"img_w" for a non-square
input) and DIR/timm/MODEL-train.onnx.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))

# Outside torchvision's list, across the families issue 38 names.
MODELS = ["cspdarknet53", "cspresnet50", "darknet53", "repvgg_a2", "hrnet_w18_small", "dla34",
          "ghostnet_100", "rexnet_100", "nf_resnet50", "poolformer_s12", "convmixer_768_32",
          "mixer_b16_224", "mobilevit_s", "levit_128s", "deit_tiny_patch16_224", "xcit_tiny_12_p16_224",
          "coat_lite_tiny", "efficientformer_l1", "edgenext_small", "fastvit_t8", "tiny_vit_5m_224",
          "resnest26d", "selecsls42b", "cs3darknet_m"]

CHILD = r'''
import contextlib, io, json, os, sys, traceback
sys.path.insert(0, %(here)r)
import torch, timm
from torchvision_more import strip_model
name, out_dir, batches = sys.argv[1], sys.argv[2], [int(b) for b in sys.argv[3].split(",")]
amps = [a == "amp" for a in sys.argv[4].split(",")]
export = sys.argv[5] == "export"
rec = []
try:
    model = timm.create_model(name, pretrained=False)
    model.train()
    c, h, w = model.default_cfg["input_size"]
    x = torch.randn(2, c, h, w)  # a train-mode batch norm over 1x1 maps needs two images
    with torch.no_grad():
        o = model(x)  # on the CPU, as before the export (a module may make its caches here)
    export_error = None
    try:
        if export:
            n = len(o) if isinstance(o, (tuple, list)) else 1
            outs = ["output"] if n == 1 else ["output%%d" %% i for i in range(n)]
            axes = {"images": {0: "batch"}}
            axes.update({k: {0: "batch"} for k in outs})
            buf = io.BytesIO()
            path = os.path.join(out_dir, "timm", name + "-train.onnx")
            torch.onnx.export(model, (x,), buf, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                              dynamo=False, opset_version=17, input_names=["images"], output_names=outs, dynamic_axes=axes)
            with open(path, "wb") as f:
                f.write(strip_model(buf.getvalue()))
    except Exception as e:
        export_error = repr(e)[:500]
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    torch.cuda.init()
    # Only a child that runs the traced scenario records (a fresh process runs one).
    whole = os.environ.get("TIMM_TRACE_FROM") == "init" and os.environ.get("TIMM_TRACE") in [
        "%%d:%%s" %% (B, "amp" if amp else "fp32") for amp in amps for B in batches]
    if whole:  # the traced scenario's history from CUDA's start: the load, the warm-up step, its segments
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=4000000)
    model = model.to(dev)
    pb = sum(p.numel() * p.element_size() for p in model.parameters())
    bb = sum(b.numel() * b.element_size() for b in model.buffers())
    common = {"cfg": name, "model": "timm/%%s-train.onnx" %% name}
    if h != w:
        common.update(img_h=h, img_w=w)
    m = {"kind": "model", **common, "param_bytes": pb, "buffer_bytes": bb, "alloc_after_load": torch.cuda.memory_allocated()}
    if export_error:
        m["export_error"] = export_error
    rec.append(m)
    efficient = os.environ.get("TIMM_SDPA") == "efficient"
    def step(x, amp):
        model.zero_grad(set_to_none=True)
        kernel = contextlib.nullcontext()
        if efficient:
            from torch.nn.attention import sdpa_kernel, SDPBackend
            kernel = sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION)
        with kernel, torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            o = model(x)
        outs = tuple(o) if isinstance(o, (tuple, list)) else (o,)
        loss = None
        for t in outs:
            s = t.float().sum() if t.dtype != torch.float32 else t.sum()
            loss = s if loss is None else loss + s
        fwd = torch.cuda.memory_allocated()
        loss.backward()
        del o, outs, t, s, loss
        return fwd
    for amp in amps:
        for B in [b for b in batches if b > 0]:
            traced = os.environ.get("TIMM_TRACE") == "%%d:%%s" %% (B, "amp" if amp else "fp32")
            try:
                torch.cuda.empty_cache()
                x = torch.randn(B, c, h, w, device=dev)
                step(x, amp)
                model.zero_grad(set_to_none=True)
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                if traced and not whole:
                    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=2000000)
                m0 = torch.cuda.memory_allocated()
                fwd = step(x, amp)
                torch.cuda.synchronize()
                st = torch.cuda.memory_stats()
                if traced:
                    ev = []
                    for e in torch.cuda.memory._snapshot()["device_traces"][0]:
                        fr = [f for f in (e.get("frames") or []) if "timm" in f["filename"] or "/torch/" in f["filename"]]
                        where = "%%s:%%d:%%s" %% (os.path.basename(fr[0]["filename"]), fr[0]["line"], fr[0]["name"]) if fr else ""
                        ev.append([e["action"], e["size"], e["addr"] if whole else e["addr"] %% 100000007, where])
                    torch.cuda.memory._record_memory_history(enabled=None)
                    rec.append({"kind": "trace", "cfg": name, "batch": B, "amp": amp, "events": ev})
                rec.append({"kind": "model_step", **common, "batch": B, "img": max(h, w), "amp": amp, "segments": 0,
                            "measured": {"m0": m0, "after_fwd": fwd, "peak": st["allocated_bytes.all.peak"],
                                         "peak_req": st["requested_bytes.all.peak"], "peak_reserved": st["reserved_bytes.all.peak"]}})
                del x
            except torch.OutOfMemoryError:
                if traced or whole:
                    torch.cuda.memory._record_memory_history(enabled=None)
                rec.append({"kind": "model_step", **common, "batch": B, "amp": amp, "measured": {"oom": True}})
                torch.cuda.empty_cache()
except Exception as e:
    rec.append({"kind": "error", "cfg": name, "error": traceback.format_exc()[-800:]})
print(json.dumps(rec))
'''


def one(name, out, batches, timeout, amps="fp32,amp", export=True):
    try:
        p = subprocess.run([sys.executable, "-c", CHILD % {"here": HERE}, name, out, batches, amps,
                            "export" if export else "measure"],
                           capture_output=True, text=True, timeout=timeout)
        return json.loads(p.stdout.strip().splitlines()[-1])
    except Exception as e:  # noqa
        err = repr(e)[:300]
        if "p" in locals():
            err += " " + (p.stdout + p.stderr)[-800:]
        return [{"kind": "error", "cfg": name, "error": err}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--timeout", type=int, default=400)
    ap.add_argument("--jsonl", default="timm_models.jsonl")
    ap.add_argument("--export-only", action="store_true", help="export the networks, measure nothing; tar them into DIR/timm.tgz")
    ap.add_argument("--precisions", default="fp32,amp", help="with --fresh, the precisions measured: fp32, amp or fp32,amp")
    ap.add_argument("--no-export", action="store_true", help="measure only; the exports exist")
    ap.add_argument("--fresh", action="store_true",
                    help="each scenario in its own fresh process (nothing exported)")
    a = ap.parse_args()
    if not set(a.precisions.split(",")) <= {"fp32", "amp"}:
        ap.error("--precisions: fp32, amp or fp32,amp, not %r" % a.precisions)
    if a.precisions != "fp32,amp" and not a.fresh:
        ap.error("--precisions needs --fresh")
    if os.environ.get("TIMM_TRACE_FROM") == "init" and not a.fresh:
        ap.error("TIMM_TRACE_FROM=init traces a fresh process from CUDA's start: it needs --fresh")
    if os.environ.get("TIMM_TRACE_FROM") == "init" and not os.environ.get("TIMM_TRACE"):
        ap.error("TIMM_TRACE_FROM=init needs TIMM_TRACE=B:amp|fp32, the scenario to trace")
    if a.fresh and a.export_only:
        ap.error("--fresh measures exports that exist; --export-only makes them: run them one after the other")
    os.makedirs(os.path.join(a.out, "timm"), exist_ok=True)
    names = a.models.split(",")
    if a.export_only:
        a.batches = "0"  # no scenario: the child exports and stops at its first step
    # Each finished process's lines go at once to DIR/JSONL.partial (appended, in the order they
    # finish; with --fresh a model line per process), so that a call cut short keeps what it
    # measured; DIR/JSONL gets them in the networks' order.
    lock = threading.Lock()
    partial = open(os.path.join(a.out, a.jsonl + ".partial"), "a")  # a rerun keeps what a cut-short run kept

    def keep(got):
        with lock:
            for r in got:
                if r["kind"] != "trace":
                    partial.write(json.dumps(r) + "\n")
            partial.flush()
        return got
    if a.fresh:
        # One process per (network, precision, batch), in the order the shared process would run them.
        jobs = [(n, b, amp) for n in names for amp in a.precisions.split(",") for b in a.batches.split(",")]

        def fresh(j):
            got = one(j[0], a.out, j[1], a.timeout, j[2], export=False)
            if j[1] == "1" and any("more than 1 value per channel" in r.get("error", "") for r in got):
                # A train-mode batch norm over 1x1 maps refuses one image: two, in a fresh process.
                got = one(j[0], a.out, "2", a.timeout, j[2], export=False)
            return keep(got)
        with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
            got = list(pool.map(fresh, jobs))
        results = []
        for name in names:
            lines = [r for (n, _, _), g in zip(jobs, got) if n == name for r in g]
            model = [r for r in lines if r["kind"] == "model"][:1]  # one model line, from the first process that wrote one
            results.append(model + [r for r in lines if r["kind"] != "model"])
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
            results = list(pool.map(lambda n: keep(one(n, a.out, a.batches, a.timeout, export=not a.no_export)), names))
    partial.close()
    traces = [r for got in results for r in got if r["kind"] == "trace"]
    results = [[r for r in got if r["kind"] != "trace"] for got in results]
    if traces:
        import gzip
        with gzip.open(os.path.join(a.out, a.jsonl.replace(".jsonl", "_traces.jsonl.gz")), "wt") as f:
            for t in traces:
                f.write(json.dumps(t) + "\n")
    with open(os.path.join(a.out, a.jsonl), "w") as f:
        for name, got in zip(names, results):
            print(name, "measured", len([r for r in got if r["kind"] == "model_step"]), "steps",
                  "; ".join(r.get("error", r.get("export_error", ""))[-160:] for r in got if r["kind"] in ("error", "model") and (r.get("error") or r.get("export_error"))),
                  flush=True)
            for r in got:
                f.write(json.dumps(r) + "\n")
    if a.export_only:
        subprocess.run(["tar", "czf", os.path.join(a.out, "timm.tgz"), "-C", a.out, "timm"], check=True)


if __name__ == "__main__":
    main()
