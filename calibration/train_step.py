"""One train step of the official YOLOv9 code measured as the ground truth's kind "train_step", in a
fresh process, with the allocator's whole history recorded.

../shared/groundtruth/README.md ("train_step") describes the step: the model, its EMA, SGD (Nesterov,
momentum 0.937, smart_optimizer's three groups), GradScaler(enabled=amp) and the dual loss
(utils/loss_tal_dual.py) resident; a pinned uint8 batch .to(cuda).float() / 255; the forward and the
loss under autocast when amp; scaler.scale(loss).backward(), unscale_, clip_grad_norm_(10),
scaler.step, update, zero_grad(), ema.update. Steps run until one has created the optimizer's state
(warm_steps); the next is measured after reset_peak_memory_stats(). Every image holds
boxes_per_img boxes.

Each config runs in a process of its own, so its first step is a fresh process's: the ground
truth's first train scenario of yolov9-s (batch 1, fp32) was one, and its reserved peak is the
figure this script exists to explain. The allocator's history is recorded from just after CUDA
init (torch.cuda.memory._record_memory_history, context None) and written as the ground truth's
traces are: [action, address, size] with action a (alloc), f (free_completed), sa (segment_alloc),
sf (segment_free), from the model's creation to the measured step's end, with "marks": the
event index where each step starts.

Configs: cfg:batch:amp|fp32[:optimizer[:ema 1|0[:boxes]]] (default SGD, EMA, 16 boxes), comma-separated, each
optionally followed by key=value parts, the ground truth's scenario fields: img=S or img=HxW (default 640),
k=K (checkpoint segments: the layer loop cut as checkpoint_sequential cuts it, the first K-1 chunks under
checkpoint(use_reentrant=False), as yolov9_segments.py runs a model step's), nc=N (Model(cfg, nc=N); each box's
class taken modulo N), dtype=bf16 (autocast to bfloat16; GradScaler stays enabled, as train_dual.py leaves it),
prev=1 (prev_pred_alive: the previous step's pred referenced until the next forward returns, as the loop's
rebinding keeps it). Uses the official code at --yolo (see train_run.py); --jobs runs that many configs at
once, each still a process of its own. Rerun on a GPU machine, from the repository root:
    python3 calibration/train_step.py --out calibration/results
which writes results/train_step.jsonl (one line a config: predict's format, kind train_step) and
results/train_step_traces.jsonl.gz.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT = ("yolov9-s:1:fp32,yolov9-c:1:fp32,yolov9-c:2:fp32,yolov9-s:1:amp,yolov9-t:8:amp,yolov9-t:16:fp32,yolov9-m:4:amp,"
           "yolov9-m:2:fp32,yolov9-e:2:amp,yolov9-e:4:fp32,gelan-c:8:amp,gelan-c:4:fp32,yolov9-c:8:amp,yolov9-s:32:amp")
BOXES = 16


def child(spec, out, a):
    sys.path.insert(0, HERE)
    import train_run

    parts = [p for p in spec.split(":") if "=" not in p]
    kv = dict(p.split("=", 1) for p in spec.split(":") if "=" in p)
    unknown = set(kv) - {"img", "k", "nc", "dtype", "prev"}
    if unknown:
        raise SystemExit(f"{spec}: unknown fields {sorted(unknown)}")
    img_h = img_w = 640
    if "img" in kv:
        img_h, _, img_w = kv["img"].partition("x")
        img_h = int(img_h)
        img_w = int(img_w) if img_w else img_h
    K = int(kv.get("k", 0))
    nc = int(kv.get("nc", 80))
    bf16 = kv.get("dtype", "fp16") == "bf16"
    prev_alive = kv.get("prev", "0") == "1"
    cfg, B, amp = parts[0], int(parts[1]), parts[2] == "amp"
    opt_name = parts[3] if len(parts) > 3 and parts[3] else "SGD"
    use_ema = parts[4] != "0" if len(parts) > 4 and parts[4] else True
    boxes = int(parts[5]) if len(parts) > 5 and parts[5] else BOXES
    train_run.install_stubs()
    sys.path.insert(0, os.path.abspath(a.yolo))
    try:
        import yaml
    except ImportError:
        sys.path.append(os.path.join(REPO, "third_party", "pylib"))
        import yaml
    import numpy as np
    import torch
    import torch.cuda.amp as tca
    if not hasattr(tca, "autocast"):
        tca.autocast = lambda enabled=True, **k: torch.amp.autocast("cuda", enabled=enabled, **k)
    if not hasattr(tca, "GradScaler"):
        tca.GradScaler = lambda **k: torch.amp.GradScaler("cuda", **k)
    from models.yolo import Model
    if cfg.startswith("gelan"):  # a single head: train.py's loss
        from utils.loss_tal import ComputeLoss
    else:
        from utils.loss_tal_dual import ComputeLoss
    from utils.torch_utils import ModelEMA, smart_optimizer

    with open(os.path.join(a.yolo, "data/hyps/hyp.scratch-high.yaml")) as f:
        hyp = yaml.safe_load(f)
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)
    dev = torch.device("cuda:0")
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=4000000)
    model = Model(os.path.join(a.yolo, "models/detect", cfg + ".yaml"), ch=3, nc=nc).to(dev)
    model.hyp = hyp
    model.nc = nc
    if K > 1:
        import yolov9_segments
        model._forward_once = lambda x, *args, **kw: yolov9_segments.forward_segments(model, x, K)
    dtype = torch.bfloat16 if bf16 else torch.float16
    ema = ModelEMA(model) if use_ema else None
    optimizer = smart_optimizer(model, opt_name, hyp["lr0"], hyp["momentum"], hyp["weight_decay"])
    scaler = torch.cuda.amp.GradScaler(enabled=amp)
    compute_loss = ComputeLoss(model)
    torch.cuda.synchronize()
    m_init = torch.cuda.memory_allocated()
    rng = np.random.default_rng(0)
    gen = torch.Generator().manual_seed(0)
    marks = []
    prev = [None]

    def step():
        marks.append(len(torch.cuda.memory._snapshot()["device_traces"][0]))
        imgs = train_run.make_images(torch, gen, B, img_h, img_w)
        targets = train_run.make_targets(torch, rng, [boxes] * B)
        targets[:, 1] %= nc
        imgs = imgs.to(dev, non_blocking=True).float() / 255
        with torch.amp.autocast("cuda", enabled=amp, dtype=dtype):
            pred = model(imgs)
            prev[0] = None  # the loop's rebinding: the old pred goes once the new one exists
            loss, loss_items = compute_loss(pred, targets.to(dev))
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        if ema is not None:
            ema.update(model)
        if prev_alive:
            prev[0] = pred
        del pred, loss, loss_items, imgs
        torch.cuda.synchronize()

    warm = 0
    while not optimizer.state:
        step()
        warm += 1
        if warm > 20:
            raise RuntimeError("the optimizer made no state in 20 steps")
    step1_peak = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    st = torch.cuda.memory_stats()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    names = {"alloc": "a", "free_completed": "f", "segment_alloc": "sa", "segment_free": "sf"}
    events = [[names[e["action"]], e["addr"], e["size"]] for e in snap["device_traces"][0] if e["action"] in names]
    rec = {"kind": "train_step", "cfg": cfg, "model": None, "batch": B, "img": max(img_h, img_w), "amp": amp, "segments": K,
           "boxes_per_img": boxes, "optimizer": opt_name, "ema": use_ema,
           "trainer": "train" if cfg.startswith("gelan") else "train_dual",
           "measured": {"m_init": m_init, "peak": st["allocated_bytes.all.peak"], "peak_req": st["requested_bytes.all.peak"],
                        "peak_reserved": st["reserved_bytes.all.peak"], "step1_peak": step1_peak, "warm_steps": warm,
                        "after_step2": torch.cuda.memory_allocated(), "reserved_after": torch.cuda.memory_reserved(),
                        # what the process holds on the card beyond the caching allocator: the CUDA
                        # context with the kernels loaded so far (cudaMemGetInfo less reserved)
                        "outside_allocator": (lambda fi: fi[1] - fi[0])(torch.cuda.mem_get_info()) - torch.cuda.memory_reserved()}}
    if img_h != img_w:
        rec["img_h"], rec["img_w"] = img_h, img_w
    if nc != 80:
        rec["nc"] = nc
    if bf16:
        rec["amp_dtype"] = "bfloat16"
    if prev_alive:
        rec["prev_pred_alive"] = True
    with open(out, "w") as f:
        json.dump({"record": rec, "trace": {"spec": spec, "marks": marks, "events": events}}, f)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--configs", default=DEFAULT)
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--yolo", default=os.path.join(REPO, "third_party", "yolov9"))
    p.add_argument("--name", default="train_step", help="writes NAME.jsonl and NAME_traces.jsonl.gz")
    p.add_argument("--jobs", type=int, default=1, help="configs running at once, each a process of its own")
    p.add_argument("--child", default=None)
    p.add_argument("--child-out", default=None)
    a = p.parse_args()
    if a.child:
        child(a.child, a.child_out, a)
        return
    from concurrent.futures import ThreadPoolExecutor

    def run(i_spec):
        i, spec = i_spec
        tmp = os.path.join(a.out, ".%s.%d.json" % (a.name, i))
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", spec, "--child-out", tmp,
                            "--yolo", a.yolo], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            print(spec, "failed:", r.stderr[-3000:], flush=True)
            return None
        with open(tmp) as f:
            d = json.load(f)
        os.remove(tmp)
        m = d["record"]["measured"]
        print(spec, {k: m[k] for k in ("m_init", "peak", "peak_reserved", "warm_steps")}, flush=True)
        return d

    with ThreadPoolExecutor(max(1, a.jobs)) as ex:
        done = [d for d in ex.map(run, enumerate(a.configs.split(","))) if d is not None]
    recs = [d["record"] for d in done]
    traces = [d["trace"] for d in done]
    with open(os.path.join(a.out, a.name + ".jsonl"), "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    with gzip.open(os.path.join(a.out, a.name + "_traces.jsonl.gz"), "wt") as f:
        for t in traces:
            f.write(json.dumps(t) + "\n")


if __name__ == "__main__":
    main()
