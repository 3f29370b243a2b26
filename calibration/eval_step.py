"""Eval steps of YOLOv9, layer by layer: the ground truth's eval_step on yolov9_segments.py's models.

The ground truth's "eval_step" (../shared/groundtruth/README.md) is validation as train_dual.py
runs it. This script runs it on the models of yolov9_segments.py (imported from it: its modules,
its layer tables, its Model and its layer loop forward_once), with the detection head's eval-mode
forward added here as the official code has it (github.com/WongKinYiu/yolov9 at 5b1ea9a):
models/yolo.py DualDDetect.forward / DDetect.forward (make_anchors at a new shape, the cat of the
maps, DFL, dist2bbox, * strides, sigmoid of the class scores, cat; returns (y, [d1, d2])),
models/common.py DFL (softmax over the 16 bins of the transposed view, a 1x1 conv with the fixed
weights arange(16)), utils/tal/anchor_generator.py make_anchors and dist2bbox, and
DetectionModel._apply (to() and half() also convert the head's stride, anchors and strides).

Each scenario runs in a fresh process:
  1. torch.manual_seed(0); the fp32 model (train mode) on the GPU, the head's stride [8, 16, 32];
  2. half = copy.deepcopy(model).eval().half(), the validation copy;
  3. a matmul, which creates the cuBLAS workspace (it stays allocated);
  4. torch.cuda.empty_cache(); a warm-up: x = randn(B, 3, H, W) in float16 on the GPU, the half
     model's forward under torch.no_grad(), the outputs and x dropped (the head now keeps the
     anchors and strides of this shape, as after the first validation batch);
  5. the measured step: a new x, reset_peak_memory_stats, m0, the forward under no_grad (traced
     allocation by allocation with torch.cuda.memory._record_memory_history when asked), then
     after_fwd and the peaks (allocated_bytes.all.peak, requested_bytes.all.peak,
     reserved_bytes.all.peak);
  6. a profile pass, the same forward again with hooks on every top-level layer: before it,
     memory_allocated() and a reset of the peaks; after it, memory_allocated(), the allocated and
     requested peaks within the layer; and inside the head, the same at each stage of the decode
     ("marks").

The trace of a scenario is [a|f, address, requested bytes, where, inner] per event: where is the
innermost frame in this file or yolov9_segments.py ("file:line function"), inner the innermost
Python frame of all (torch's own code: "conv.py:549 _conv_forward").

The parent (no CUDA) runs the scenarios concurrently, each in its own process (the caching
allocator is per process, so concurrency changes none of its figures), at most --jobs at a time
with the sum of their estimated memory under --budget GiB, and writes --out/eval_step.json (and
eval_traces.jsonl.gz). Scenarios: cfg:batch:height:width[:t], comma-separated (t: trace it).

Rerun on a GPU machine, from the repository root (about a minute):
    python3 calibration/eval_step.py --out calibration/results | tee calibration/results/eval_step.log
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OWN = ("eval_step.py", "yolov9_segments.py")

DEFAULT = ",".join([
    "yolov9-t:8:640:640:t", "yolov9-t:32:640:640:t", "yolov9-t:64:640:640:t", "yolov9-t:128:640:640:t",
    "yolov9-t:64:384:640:t",
    "yolov9-s:32:640:640:t", "yolov9-s:128:640:640:t",
    "yolov9-c:32:640:640:t", "yolov9-c:128:640:640:t",
    "yolov9-e:8:640:640:t", "yolov9-e:32:640:640:t", "yolov9-e:64:640:640:t", "yolov9-e:128:640:640:t",
    "yolov9-e:64:384:640:t",
])

# GiB per image at 640x640, for the parent's memory budget (reserved bytes, with a margin).
PER_IMAGE_GIB = {"yolov9-t": 0.03, "yolov9-s": 0.035, "yolov9-c": 0.11, "yolov9-e": 0.28, "yolov9-m": 0.08, "gelan-c": 0.1}


# PROFILE runs a third forward with per-layer hooks after the measured one; max_batch.py turns it off.
PROFILE = True


def parse(spec):
    f = spec.split(":")
    cfg, batch, h, w = f[0], int(f[1]), int(f[2]), int(f[3])
    return cfg, batch, h, w, len(f) > 4 and f[4] == "t"


# ----------------------------------------------------------------------------- child: one scenario
def child(spec, out_path, trace_path):
    import copy

    import torch
    sys.path.insert(0, HERE)
    import yolov9_segments as ys

    cfg, batch, h, w, trace = parse(spec)
    t0 = time.time()
    torch.backends.cudnn.benchmark = False
    prof = Profiler(torch)

    # -- the eval-mode modules of the official code, on the harness's classes
    def make_anchors(feats, strides, grid_cell_offset=0.5):
        """Generate anchors from features (utils/tal/anchor_generator.py)."""
        anchor_points, stride_tensor = [], []
        assert feats is not None
        dtype, device = feats[0].dtype, feats[0].device
        for i, stride in enumerate(strides):
            _, _, h, w = feats[i].shape
            sx = torch.arange(end=w, device=device, dtype=dtype) + grid_cell_offset  # shift x
            sy = torch.arange(end=h, device=device, dtype=dtype) + grid_cell_offset  # shift y
            sy, sx = torch.meshgrid(sy, sx, indexing='ij')
            anchor_points.append(torch.stack((sx, sy), -1).view(-1, 2))
            stride_tensor.append(torch.full((h * w, 1), stride, dtype=dtype, device=device))
        return torch.cat(anchor_points), torch.cat(stride_tensor)

    def dist2bbox(distance, anchor_points, xywh=True, dim=-1):
        """Transform distance(ltrb) to box(xywh or xyxy) (utils/tal/anchor_generator.py)."""
        lt, rb = torch.split(distance, 2, dim)
        x1y1 = anchor_points - lt
        prof.mark("dist2bbox x1y1")
        x2y2 = anchor_points + rb
        prof.mark("dist2bbox x2y2")
        if xywh:
            c_xy = (x1y1 + x2y2) / 2
            prof.mark("dist2bbox c_xy")
            wh = x2y2 - x1y1
            prof.mark("dist2bbox wh")
            return torch.cat((c_xy, wh), dim)  # xywh bbox
        return torch.cat((x1y1, x2y2), dim)  # xyxy bbox

    class DFL(ys.DFL):
        """models/common.py DFL; the softmax is bound to a name only to mark it (a view follows the conv, so
        the softmax output dies at the same point as the official temporary)."""

        def forward(self, x):
            b, c, a = x.shape  # batch, channels, anchors
            s = x.view(b, 4, self.c1, a).transpose(2, 1).softmax(1)
            prof.mark("dfl softmax")
            return self.conv(s).view(b, 4, a)

    class DualDDetect(ys.DualDDetect):
        dynamic = False  # force grid reconstruction
        export = False  # export mode
        shape = None
        anchors = torch.empty(0)  # init
        strides = torch.empty(0)  # init

        def forward(self, x):
            shape = x[0].shape  # BCHW
            d1 = []
            d2 = []
            for i in range(self.nl):
                d1.append(torch.cat((self.cv2[i](x[i]), self.cv3[i](x[i])), 1))
                d2.append(torch.cat((self.cv4[i](x[self.nl + i]), self.cv5[i](x[self.nl + i])), 1))
            if self.training:
                return [d1, d2]
            elif self.dynamic or self.shape != shape:
                self.anchors, self.strides = (d1.transpose(0, 1) for d1 in make_anchors(d1, self.stride, 0.5))
                self.shape = shape
            prof.mark("maps")
            box, cls = torch.cat([di.view(shape[0], self.no, -1) for di in d1], 2).split((self.reg_max * 4, self.nc), 1)
            prof.mark("cat 1")
            dbox = dist2bbox(self.dfl(box), self.anchors.unsqueeze(0), xywh=True, dim=1) * self.strides
            prof.mark("dbox 1")
            box2, cls2 = torch.cat([di.view(shape[0], self.no, -1) for di in d2], 2).split((self.reg_max * 4, self.nc), 1)
            prof.mark("cat 2")
            dbox2 = dist2bbox(self.dfl2(box2), self.anchors.unsqueeze(0), xywh=True, dim=1) * self.strides
            prof.mark("dbox 2")
            y = [torch.cat((dbox, cls.sigmoid()), 1), torch.cat((dbox2, cls2.sigmoid()), 1)]
            prof.mark("y")
            return y if self.export else (y, [d1, d2])

    class DDetect(ys.DDetect):
        dynamic = False
        export = False
        shape = None
        anchors = torch.empty(0)
        strides = torch.empty(0)

        def forward(self, x):
            shape = x[0].shape  # BCHW
            for i in range(self.nl):
                x[i] = torch.cat((self.cv2[i](x[i]), self.cv3[i](x[i])), 1)
            if self.training:
                return x
            elif self.dynamic or self.shape != shape:
                self.anchors, self.strides = (x.transpose(0, 1) for x in make_anchors(x, self.stride, 0.5))
                self.shape = shape
            prof.mark("maps")
            box, cls = torch.cat([xi.view(shape[0], self.no, -1) for xi in x], 2).split((self.reg_max * 4, self.nc), 1)
            prof.mark("cat 1")
            dbox = dist2bbox(self.dfl(box), self.anchors.unsqueeze(0), xywh=True, dim=1) * self.strides
            prof.mark("dbox 1")
            y = torch.cat((dbox, cls.sigmoid()), 1)
            prof.mark("y")
            return y if self.export else (y, x)

    class DetectionModel(ys.Model):
        def _apply(self, fn, *args, **kw):
            # Apply to(), cpu(), cuda(), half() to model tensors that are not parameters or registered buffers
            self = super()._apply(fn, *args, **kw)
            m = self.model[-1]  # Detect()
            m.stride = fn(m.stride)
            m.anchors = fn(m.anchors)
            m.strides = fn(m.strides)
            return self

    torch.manual_seed(0)
    model = ys.Model(ys.TABLES[cfg])
    head = model.model[-1]
    head.__class__ = DualDDetect if isinstance(head, ys.DualDDetect) else DDetect
    head.nc, head.reg_max = 80, 16
    head.no = head.nc + head.reg_max * 4
    head.stride = torch.tensor([8.0, 16.0, 32.0])  # what DetectionModel's build computes (256 / map sizes)
    for m in model.modules():
        if type(m) is ys.DFL:
            m.__class__ = DFL
            m.c1 = 16
            m.conv.weight.data[:] = torch.arange(16, dtype=torch.float).view(1, 16, 1, 1)
    model.__class__ = DetectionModel
    out = {"cfg": cfg, "batch": batch, "img_h": h, "img_w": w, "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(0)}
    stages = {}
    model = model.to(ys.DEV).train()
    stages["model"] = torch.cuda.memory_allocated()
    half = copy.deepcopy(model).eval().half()
    stages["half_copy"] = torch.cuda.memory_allocated()
    a = torch.ones(8, 8, device=ys.DEV)
    b = a @ a
    torch.cuda.synchronize()
    del a, b
    stages["cublas"] = torch.cuda.memory_allocated()
    torch.cuda.empty_cache()
    stages["empty_cache"] = torch.cuda.memory_allocated()
    stages["reserved_after_empty_cache"] = torch.cuda.memory_reserved()
    out["params"] = sum(p.numel() for p in model.parameters())
    out["param_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    out["buffer_bytes"] = sum(t.numel() * t.element_size() for t in model.buffers())
    out["half_param_bytes"] = sum(p.numel() * p.element_size() for p in half.parameters())

    # warm-up
    x = torch.randn(batch, 3, h, w, device=ys.DEV, dtype=torch.float16)
    with torch.no_grad():
        o = ys.forward_once(half, x)
    torch.cuda.synchronize()
    stages["warmup_after_fwd"] = torch.cuda.memory_allocated()
    stages["warmup_peak"] = torch.cuda.max_memory_allocated()
    del o, x
    stages["after_warmup"] = torch.cuda.memory_allocated()
    out["stages"] = stages

    # measured step
    x = torch.randn(batch, 3, h, w, device=ys.DEV, dtype=torch.float16)
    torch.cuda.synchronize()
    if trace:
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=2000000)
    torch.cuda.reset_peak_memory_stats()
    m0 = torch.cuda.memory_allocated()
    with torch.no_grad():
        o = ys.forward_once(half, x)
    torch.cuda.synchronize()
    after_fwd = torch.cuda.memory_allocated()
    st = torch.cuda.memory_stats()
    out["result"] = {"m0": m0, "after_fwd": after_fwd, "peak": st["allocated_bytes.all.peak"],
                     "peak_req": st["requested_bytes.all.peak"], "peak_reserved": st["reserved_bytes.all.peak"],
                     "reserved_after": torch.cuda.memory_reserved(), "num_alloc_retries": st.get("num_alloc_retries", 0),
                     "num_ooms": st.get("num_ooms", 0)}
    events = None
    if trace:
        events = trace_events(torch.cuda.memory._snapshot()["device_traces"][0])
        torch.cuda.memory._record_memory_history(enabled=None)
    y, maps = o
    ys_ = y if isinstance(y, (list, tuple)) else [y]
    out["outputs"] = {"y": [[list(t.shape), str(t.dtype)] for t in ys_],
                      "maps": [[list(t.shape), str(t.dtype)] for t in ys.flatten(maps)]}
    del o, y, ys_, maps

    if not PROFILE:  # max_batch.py's trials: the ground truth's sequence ends with the measured forward
        del x
        with open(out_path, "w") as fh:
            json.dump(out, fh)
        return

    # profile pass
    hooks = []
    for m in half.model:
        hooks.append(m.register_forward_pre_hook(prof.pre))
        hooks.append(m.register_forward_hook(prof.post))
    prof.on = True
    prof.start = torch.cuda.memory_allocated()
    with torch.no_grad():
        o = ys.forward_once(half, x)
    torch.cuda.synchronize()
    prof.on = False
    out["profile"] = {"m0": prof.start, "after_fwd": torch.cuda.memory_allocated(), "layers": prof.layers,
                      "head_marks": prof.marks}
    del o
    for hk in hooks:
        hk.remove()
    del x
    out["wall_s"] = round(time.time() - t0, 2)
    with open(out_path, "w") as fh:
        json.dump(out, fh)
    if events is not None:
        with open(trace_path, "w") as fh:
            json.dump({"cfg": cfg, "batch": batch, "img_h": h, "img_w": w, "result": out["result"], "events": events}, fh)
    r = out["result"]
    print("%s b%d %dx%d: m0 %.1f after_fwd %.1f peak %.1f peak_req %.1f reserved %.1f MiB (%.1f s)" % (
        cfg, batch, h, w, r["m0"] / 2**20, r["after_fwd"] / 2**20, r["peak"] / 2**20, r["peak_req"] / 2**20,
        r["peak_reserved"] / 2**20, out["wall_s"]), flush=True)


class Profiler:
    """Forward hooks on the top-level layers and marks inside the head (profile pass only)."""

    def __init__(self, torch):
        self.torch = torch
        self.on = False
        self.start = 0
        self.layers = []
        self.marks = []
        self.cur = None

    def _peaks(self):
        st = self.torch.cuda.memory_stats()
        self.torch.cuda.reset_peak_memory_stats()
        return st["allocated_bytes.all.peak"], st["requested_bytes.all.peak"]

    def pre(self, m, args):
        if not self.on:
            return
        self._peaks()
        self.cur = {"i": m.i, "before": self.torch.cuda.memory_allocated(), "peak": 0, "peak_req": 0}

    def mark(self, name):
        if not self.on or self.cur is None:
            return
        p, r = self._peaks()
        self.cur["peak"], self.cur["peak_req"] = max(self.cur["peak"], p), max(self.cur["peak_req"], r)
        st = self.torch.cuda.memory_stats()
        self.marks.append({"layer": self.cur["i"], "name": name, "alloc": st["allocated_bytes.all.current"],
                           "req": st["requested_bytes.all.current"], "peak": p, "peak_req": r})

    def post(self, m, args, output):
        if not self.on or self.cur is None:
            return
        p, r = self._peaks()
        st = self.torch.cuda.memory_stats()
        c = self.cur
        c["peak"], c["peak_req"] = max(c["peak"], p), max(c["peak_req"], r)
        c["after"] = st["allocated_bytes.all.current"]
        c["after_req"] = st["requested_bytes.all.current"]
        c["reserved"] = st["reserved_bytes.all.current"]
        self.layers.append(c)
        self.cur = None


def frame(fr):
    return "%s:%d %s" % (os.path.basename(fr.get("filename", "")), fr.get("line", 0), fr.get("name", ""))


def trace_events(entries):
    out = []
    for e in entries:
        act = e.get("action")
        if act not in ("alloc", "free_completed"):
            continue
        frames = e.get("frames") or []
        own = next((frame(fr) for fr in frames if os.path.basename(fr.get("filename", "")) in OWN), "")
        inner = frame(frames[0]) if frames else ""
        out.append(["a" if act == "alloc" else "f", e["addr"], e["size"], own, inner])
    return out


# ----------------------------------------------------------------------------- parent
def run_pool(jobs, budget, max_jobs, done):
    """jobs: [(key, est_gib, argv, log_path)]. Runs each argv in its own process, largest estimate
    first, at most max_jobs at a time with the sum of the running estimates within budget (one runs
    alone whatever its estimate); done(job, returncode, seconds) after each."""
    pending = sorted(jobs, key=lambda j: -j[1])
    running = []
    while pending or running:
        i = 0
        while i < len(pending) and len(running) < max_jobs:
            j = pending[i]
            used = sum(r[0][1] for r in running)
            if not running or used + j[1] <= budget:
                fh = open(j[3], "w")
                running.append((j, subprocess.Popen(j[2], stdout=fh, stderr=subprocess.STDOUT), time.time(), fh))
                pending.pop(i)
            else:
                i += 1
        time.sleep(0.2)
        for r in list(running):
            if r[1].poll() is not None:
                r[3].close()
                running.remove(r)
                done(r[0], r[1].returncode, time.time() - r[2])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="calibration/results")
    ap.add_argument("--scenarios", default=DEFAULT)
    ap.add_argument("--json", default="eval_step.json")
    ap.add_argument("--traces", default="eval_traces.jsonl.gz", help="traced scenarios, one JSON line each, under --out")
    ap.add_argument("--groundtruth", default=os.path.join(HERE, "..", "..", "shared", "groundtruth", "calibration.jsonl"))
    ap.add_argument("--jobs", type=int, default=4, help="scenarios running at once")
    ap.add_argument("--budget", type=float, default=42.0, help="GiB: the running scenarios' estimated memory")
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
            if d.get("kind") == "eval_step":
                gt[(d["cfg"], d["batch"], d["img"], d["img"])] = d["measured"]
    tmp = tempfile.mkdtemp(prefix="eval_step_")
    specs = a.scenarios.split(",")
    jobs = []
    for n, spec in enumerate(specs):
        cfg, batch, h, w, _ = parse(spec)
        est = 1.0 + PER_IMAGE_GIB.get(cfg, 0.3) * batch * h * w / 640.0 / 640.0
        base = os.path.join(tmp, "%02d" % n)
        argv = ["timeout", str(int(a.timeout)), sys.executable, os.path.abspath(__file__), "--child", spec,
                "--child-out", base + ".json", "--child-trace", base + ".trace.json"]
        jobs.append(((n, spec, base), est, argv, base + ".log"))
    results = {}
    t0 = time.time()
    out_path = os.path.join(a.out, a.json)
    trace_tmp = os.path.join(a.out, a.traces + ".part")
    trace_fh = open(trace_tmp, "w")

    def write():
        scen = [results[n] for n in sorted(results)]
        meta = next((s for s in scen if "torch" in s), {})
        with open(out_path, "w") as fh:
            json.dump({"torch": meta.get("torch"), "cudnn": meta.get("cudnn"), "gpu": meta.get("gpu"), "fresh": True,
                       "step": "eval_step: fp32 model + deepcopy(model).eval().half() + cuBLAS workspace resident; "
                               "empty_cache; warm-up; forward of the half copy under no_grad at fp16 randn(B,3,H,W)",
                       "scenarios": scen}, fh, indent=1)

    def done(job, rc, secs):
        n, spec, base = job[0]
        log = open(job[3]).read() if os.path.exists(job[3]) else ""
        if rc == 0 and os.path.exists(base + ".json"):
            d = json.load(open(base + ".json"))
            g = gt.get((d["cfg"], d["batch"], d["img_h"], d["img_w"]))
            if g:
                d["groundtruth"] = g
            results[n] = d
            if os.path.exists(base + ".trace.json"):
                trace_fh.write(open(base + ".trace.json").read().strip() + "\n")
                trace_fh.flush()
            r = d["result"]
            gts = ""
            if g:
                gts = "  (ground truth peak %.1f peak_req %.1f: %+.2f%%)" % (g["peak"] / 2**20, g["peak_req"] / 2**20,
                                                                             100.0 * (r["peak"] - g["peak"]) / g["peak"])
            print("[%6.1f s] %-24s ok in %5.1f s: m0 %8.1f  after_fwd %8.1f  peak %9.1f  peak_req %9.1f  reserved %9.1f MiB%s" % (
                time.time() - t0, spec, secs, r["m0"] / 2**20, r["after_fwd"] / 2**20, r["peak"] / 2**20,
                r["peak_req"] / 2**20, r["peak_reserved"] / 2**20, gts), flush=True)
        else:
            results[n] = {"spec": spec, "error": "exit %d" % rc, "log": log[-4000:]}
            print("[%6.1f s] %-24s FAILED (exit %d) in %.1f s:\n%s" % (time.time() - t0, spec, rc, secs, log[-4000:]), flush=True)
        write()

    run_pool(jobs, a.budget, a.jobs, done)
    trace_fh.close()
    with open(trace_tmp, "rb") as src, gzip.open(os.path.join(a.out, a.traces), "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(trace_tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    # the per-layer profile of each scenario, in MiB
    for n in sorted(results):
        d = results[n]
        if "profile" not in d:
            continue
        print("\n%s b%d %dx%d: layer  before  after  peak  peak_req (MiB; m0 %.1f)" % (
            d["cfg"], d["batch"], d["img_h"], d["img_w"], d["profile"]["m0"] / 2**20))
        for l in d["profile"]["layers"]:
            print("  %2d %9.1f %9.1f %9.1f %9.1f" % (l["i"], l["before"] / 2**20, l["after"] / 2**20, l["peak"] / 2**20,
                                                    l["peak_req"] / 2**20))
        for mk in d["profile"]["head_marks"]:
            print("     head %-16s alloc %9.1f  peak since last %9.1f  req peak %9.1f" % (
                mk["name"], mk["alloc"] / 2**20, mk["peak"] / 2**20, mk["peak_req"] / 2**20))
    print("done in %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    main()
