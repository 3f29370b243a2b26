"""Whole training runs of the official code on a dataset on disk, iteration by iteration (issue 33).

The official train_dual.py (train.py for GELAN) of github.com/WongKinYiu/yolov9 at commit
5b1ea9a, as people run it, on a synthetic YOLO dataset that this script writes first: JPEG
files of COCO's commonest aspect ratios and label files with COCO-like box counts and sizes
(a long tail of dense images), in the layout its dataloader reads (images/ and labels/ beside
each other, a data yaml). Nothing of the training is re-implemented: the script runs
train_dual.main(opt, callbacks) in a fresh process per run, with the repository's own
dataloader (load_mosaic, random_perspective, mixup with hyp.scratch-high.yaml's
probabilities), loss, optimizer, EMA, validation (val_dual.run on rectangular batches at
twice the batch) and checkpoints. It only listens, through the repository's own Callbacks:

  - on_train_batch_end (after the optimizer step and the GPU_mem string): memory_allocated(),
    memory_reserved() (what GPU_mem prints, /1E9), the peaks since the last record, the batch's
    image size and each image's box count after augmentation (targets[:, 0]);
  - on_val_batch_end: the same for each validation batch, with its rectangular shape;
  - on_model_save (after torch.save of last.pt and best.pt and del ckpt), on_train_end.

torch.load's weights_only default, True since PyTorch 2.6, refuses the checkpoints this commit
writes (strip_optimizer fails at the run's end, after the last epoch, as it does for anyone who
runs this commit on PyTorch 2.6 or later): TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 restores the
default the code was written for, so that the run ends with its final validation of best.pt.

The peaks are reset right after each record, so the windows cover the run back to back and the
run's peaks are their maximum. Under --fraction F, torch.cuda.set_per_process_memory_fraction(F)
caps the caching allocator first (its limit is int(F * total_memory)), and a run that raises
torch.OutOfMemoryError is recorded with the last event it completed and the batch it failed on
(its shape and box counts, as the dataloader yielded it).

The repository is a copy at --yolo (default third_party/yolov9, git-ignored; make it with
    git --git-dir=<mirror of WongKinYiu/yolov9> archive 5b1ea9a | tar -x -C third_party/yolov9).
Modules it imports that a machine lacks (pkg_resources, say) are stubbed, as in train_run.py;
check_online() is taken as False (the machine reaches no network: check_amp then checks on
np.ones, and its allclose test is commented out at this commit anyway), and an empty Arial.ttf
in YOLOV5_CONFIG_DIR spares check_dataset its font download.

Rerun on a GPU machine, from the repository root (about 8 minutes on an H200):
    python3 calibration/train_data.py --out calibration/results/train_data
which writes dataset.json (the dataset's images: size and box count each), runs.jsonl (one line
per run), search.jsonl (one line per search under a limit) and the runs' logs.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# COCO's commonest image sizes (width, height) and their shares among train2017's images,
# rounded: landscape 640x480 dominates, then portrait and 640x427.
SIZES = [((640, 480), 0.34), ((480, 640), 0.12), ((640, 427), 0.16), ((427, 640), 0.07), ((640, 640), 0.05),
         ((500, 375), 0.06), ((375, 500), 0.03), ((640, 360), 0.07), ((612, 612), 0.04), ((640, 512), 0.06)]


def box_count(rng):
    """A COCO-like number of boxes: 1% none, 6% dense (25-90), else geometric of mean about 6."""
    u = rng.random()
    if u < 0.01:
        return 0
    if u < 0.07:
        return int(rng.integers(25, 91))
    return 1 + int(rng.geometric(1 / 6.0)) - 1


def write_dataset(root, spec):
    """Write the JPEGs and label files of a dataset spec (calibration/dataset_spec.py's)."""
    import numpy as np
    import cv2
    rng = np.random.default_rng(spec.get("seed", 0))
    for split in ("train", "val"):
        os.makedirs(os.path.join(root, "images", split), exist_ok=True)
        os.makedirs(os.path.join(root, "labels", split), exist_ok=True)
        for im in spec[split]:
            w, h = im["w"], im["h"]
            small = rng.integers(0, 256, size=(max(h // 16, 1), max(w // 16, 1), 3), dtype=np.uint8)
            img = cv2.resize(small, (w, h), interpolation=cv2.INTER_LINEAR)
            name = os.path.splitext(im["file"])[0]
            cv2.imwrite(os.path.join(root, "images", split, name + ".jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 80])
            with open(os.path.join(root, "labels", split, name + ".txt"), "w") as f:
                f.write("\n".join(im["labels"]) + ("\n" if im["labels"] else ""))
    names = "\n".join(f"  {i}: class{i}" for i in range(80))
    with open(os.path.join(root, "data.yaml"), "w") as f:
        f.write(f"path: {root}\ntrain: images/train\nval: images/val\nnc: 80\nnames:\n{names}\n")
    return spec


def make_dataset(root, n_train, n_val, seed):
    import numpy as np
    import cv2
    rng = np.random.default_rng(seed)
    sizes, weights = zip(*SIZES)
    weights = np.array(weights) / sum(weights)
    out = {"seed": seed, "train": [], "val": []}
    for split, n in (("train", n_train), ("val", n_val)):
        os.makedirs(os.path.join(root, "images", split), exist_ok=True)
        os.makedirs(os.path.join(root, "labels", split), exist_ok=True)
        for i in range(n):
            w, h = sizes[rng.choice(len(sizes), p=weights)]
            # a smooth random picture: small noise, upscaled (small JPEGs, quick to decode)
            small = rng.integers(0, 256, size=(max(h // 16, 1), max(w // 16, 1), 3), dtype=np.uint8)
            img = cv2.resize(small, (w, h), interpolation=cv2.INTER_LINEAR)
            name = f"{split}_{i:05d}"
            cv2.imwrite(os.path.join(root, "images", split, name + ".jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 80])
            k = box_count(rng)
            lines = []
            for _ in range(k):
                # COCO's boxes: many small, a few large (log-uniform sides), inside the image
                bw = float(np.exp(rng.uniform(math.log(0.02), math.log(0.9))))
                bh = float(np.clip(bw * np.exp(rng.normal(0, 0.5)), 0.01, 0.95))
                cx = float(rng.uniform(bw / 2, 1 - bw / 2))
                cy = float(rng.uniform(bh / 2, 1 - bh / 2))
                lines.append(f"{int(rng.integers(0, 80))} {cx:.6f} {cy:.6f} {bw:.6f} {bh:.6f}")
            with open(os.path.join(root, "labels", split, name + ".txt"), "w") as f:
                f.write("\n".join(lines) + ("\n" if lines else ""))
            out[split].append({"file": name + ".jpg", "w": w, "h": h, "boxes": k, "labels": lines})
    names = "\n".join(f"  {i}: class{i}" for i in range(80))
    with open(os.path.join(root, "data.yaml"), "w") as f:
        f.write(f"path: {root}\ntrain: images/train\nval: images/val\nnc: 80\nnames:\n{names}\n")
    return out


# ----------------------------------------------------------------------------- one run (child)
def install_stubs():
    """Stub the modules the repository imports that this machine lacks (train_run.py's way)."""
    import importlib.util
    import types
    for name in ("pkg_resources", "IPython"):  # the optional loggers guard their own imports
        if importlib.util.find_spec(name) is not None:
            continue
        mod = types.ModuleType(name)
        mod.__path__ = []  # a package, for its submodules below
        if name == "pkg_resources":
            mod.parse_version = lambda v: tuple(int(x) if x.isdigit() else x for x in str(v).replace("+", ".").split("."))
            mod.require = lambda *a, **k: None
        sys.modules[name] = mod
        if name == "IPython":  # models/common.py: from IPython.display import display
            mod.get_ipython = lambda: None  # matplotlib asks it for a REPL
            sub = types.ModuleType("IPython.display")
            sub.display = lambda *a, **k: None
            sys.modules["IPython.display"] = sub
            mod.display = sub


def apply_segments_patch(k):
    """Applies docs/checkpointing.md's patch to models/yolo.py, its code read from that file (so
    that what the page tells people to paste is what runs here), and sets model.segments = k on
    every Model the trainer builds, as the page says to."""
    import re
    import textwrap
    import models.yolo as yolo
    page = open(os.path.join(REPO, "docs", "checkpointing.md")).read()
    block = next(b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "def _forward_once" in b)
    imports, _, body = block.partition("\n\n")
    ns = dict(vars(yolo))
    exec(imports, ns)
    exec(textwrap.dedent(body), ns)
    yolo.BaseModel._forward_once = ns["_forward_once"]
    yolo.BaseModel._forward_segments = ns["_forward_segments"]
    init = yolo.Model.__init__

    def init_with_segments(self, *a, **kw):
        init(self, *a, **kw)
        self.segments = k
    yolo.Model.__init__ = init_with_segments


def child(args):
    yolo = os.path.abspath(args.yolo)
    os.chdir(yolo)
    sys.path.insert(0, yolo)
    os.environ.setdefault("YOLOV5_CONFIG_DIR", "/tmp/ultralytics_cfg")
    os.makedirs(os.environ["YOLOV5_CONFIG_DIR"], exist_ok=True)
    for font in ("Arial.ttf", "Arial.Unicode.ttf"):
        open(os.path.join(os.environ["YOLOV5_CONFIG_DIR"], font), "a").close()
    install_stubs()
    import numpy
    if not hasattr(numpy, "trapz"):  # numpy 2 renamed it; val's mAP calls np.trapz at this commit
        numpy.trapz = numpy.trapezoid
    import torch
    import utils.general as general
    general.check_online = lambda: False
    if args.fraction:
        torch.cuda.set_per_process_memory_fraction(args.fraction)
    trainer = __import__(args.trainer)  # train_dual or train
    from utils.callbacks import Callbacks
    if args.segments > 1:
        apply_segments_patch(args.segments)

    events = []
    cb = Callbacks()
    # The batch the loop is on, as the dataloader yields it (CPU tensors: no device memory):
    # a run that runs out of memory says the images and box counts of the batch it failed on.
    pending = {}
    from utils import dataloaders
    iterate = dataloaders.InfiniteDataLoader.__iter__

    def watched(self):
        for batch in iterate(self):
            imgs, targets = batch[0], batch[1]
            pending.update(shape=list(imgs.shape), boxes=torch.bincount(targets[:, 0].long(), minlength=imgs.shape[0]).tolist())
            yield batch
    dataloaders.InfiniteDataLoader.__iter__ = watched

    def record(kind, **extra):
        e = {"kind": kind, "allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
             "peak": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved()}
        e.update(extra)
        events.append(e)
        torch.cuda.reset_peak_memory_stats()

    def counts(targets, n):
        idx = targets[:, 0].long().cpu()
        return torch.bincount(idx, minlength=n).tolist()

    def train_end(model, ni, imgs, targets, paths, mloss):
        record("train", ni=int(ni), shape=list(imgs.shape), boxes=counts(targets, imgs.shape[0]),
               gpu_mem=f"{torch.cuda.memory_reserved() / 1E9:.3g}G")

    def val_end(batch_i, im, targets, paths, shapes, preds):
        record("val", batch=int(batch_i), shape=list(im.shape), boxes=counts(targets, im.shape[0]))

    cb.register_action("on_train_batch_end", callback=train_end)
    cb.register_action("on_val_batch_end", callback=val_end)
    cb.register_action("on_val_start", callback=lambda *a, **k: record("val_start"))
    cb.register_action("on_val_end", callback=lambda *a, **k: record("val_end"))
    cb.register_action("on_model_save", callback=lambda *a, **k: record("ckpt"))
    cb.register_action("on_train_epoch_start", callback=lambda *a, **k: record("epoch_start"))
    cb.register_action("on_train_end", callback=lambda *a, **k: record("train_end"))

    argv = ["--cfg", f"models/detect/{args.cfg}.yaml", "--data", os.path.join(args.data, "data.yaml"),
            "--hyp", "data/hyps/hyp.scratch-high.yaml", "--epochs", str(args.epochs), "--batch-size", str(args.batch),
            "--img", "640", "--workers", str(args.workers), "--noplots", "--exist-ok", "--project", args.project, "--name", args.name,
            "--close-mosaic", str(args.close_mosaic), "--min-items", "0", "--weights", ""]
    sys.argv = [args.trainer + ".py"] + argv
    opt = trainer.parse_opt()
    torch.cuda.reset_peak_memory_stats()
    status, err = "ok", ""
    t0 = time.time()
    try:
        trainer.main(opt, callbacks=cb)
    except torch.OutOfMemoryError as e:
        status, err = "oom", str(e).split("\n")[0][:300]
    except Exception as e:  # recorded with the events so far
        status, err = "error", f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    result = {"cfg": args.cfg, "trainer": args.trainer, "batch": args.batch, "epochs": args.epochs, "img": 640,
              "workers": args.workers, "cpus": os.cpu_count(), "close_mosaic": args.close_mosaic,
              # create_dataloader's nw: min(CPUs per GPU, batch (none at 1), --workers)
              "loader_workers": min(os.cpu_count() // max(torch.cuda.device_count(), 1), args.batch if args.batch > 1 else 0, args.workers),
              "amp": True, "segments": args.segments, "fraction": args.fraction, "status": status, "error": err,
              "capacity_bytes": int(args.fraction * torch.cuda.get_device_properties(0).total_memory) if args.fraction else None,
              "total_memory": torch.cuda.get_device_properties(0).total_memory, "gpu": torch.cuda.get_device_name(0),
              "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "seconds": round(time.time() - t0, 1),
              "peak": max((e["peak"] for e in events), default=0),
              "peak_reserved": max((e["peak_reserved"] for e in events), default=0), "events": events,
              "failed_batch": pending if status != "ok" else None}
    with open(args.result, "w") as f:
        json.dump(result, f)


# ----------------------------------------------------------------------------- driver
def run(args, cfg, batch, fraction, tag, workers=8):
    trainer = "train" if cfg.startswith("gelan") else "train_dual"
    res = os.path.join(args.out, f"run_{tag}.json")
    log = os.path.join(args.out, f"run_{tag}.log")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--yolo", args.yolo, "--data", args.data_dir,
           "--cfg", cfg, "--batch", str(batch), "--epochs", str(args.epochs), "--trainer", trainer,
           "--project", os.path.join(args.work, "runs"), "--name", tag, "--result", res, "--workers", str(workers),
           "--close-mosaic", str(args.close_mosaic)]
    if fraction:
        cmd += ["--fraction", repr(fraction)]
    if args.segments > 1:
        cmd += ["--segments", str(args.segments)]
    t0 = time.time()
    with open(log, "w") as lf:
        # torch.load's weights_only default (True since PyTorch 2.6) refuses the checkpoints this
        # commit writes, in strip_optimizer at the run's end: the variable restores the default
        # that the code was written for.
        env = dict(os.environ, PYTHONUNBUFFERED="1", TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
        p = subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env)
    if os.path.exists(res):
        with open(res) as f:
            r = json.load(f)
    else:
        r = {"cfg": cfg, "batch": batch, "fraction": fraction, "status": "crash", "returncode": p.returncode}
    r["tag"] = tag
    with open(os.path.join(args.out, "runs.jsonl"), "a") as f:
        f.write(json.dumps(r) + "\n")
    print(f"{tag}: {r['status']} in {time.time() - t0:.0f}s, peak reserved {r.get('peak_reserved', 0) / 2**30:.2f} GiB", flush=True)
    return r["status"] == "ok"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--yolo", default=os.path.join(REPO, "third_party", "yolov9"))
    ap.add_argument("--out", default=os.path.join(REPO, "calibration", "results", "train_data"))
    ap.add_argument("--work", default="/tmp/onnxmem_train_data")
    ap.add_argument("--runs", default="yolov9-s:16,gelan-c:8", help="uncapped runs, cfg:batch[:workers]")
    ap.add_argument("--search", default="yolov9-s:8GiB:8:40", help="cfg:limit:lo:hi[,…], the largest batch completing the run under each limit (GiB or MiB)")
    ap.add_argument("--after", default="yolov9-c:16", help="uncapped runs after the search")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--train-images", type=int, default=192)
    ap.add_argument("--val-images", type=int, default=96)
    # child
    ap.add_argument("--data")
    ap.add_argument("--cfg")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--trainer")
    ap.add_argument("--project")
    ap.add_argument("--name")
    ap.add_argument("--result")
    ap.add_argument("--fraction", type=float, default=0.0)
    ap.add_argument("--workers", type=int, default=8, help="train_dual.py's --workers (a run spec's third field)")
    ap.add_argument("--close-mosaic", type=int, default=0, help="train_dual.py's --close-mosaic (a plain DataLoader, a new iterator each epoch, when above 0)")
    ap.add_argument("--dataset", help="write this dataset spec (calibration/dataset_spec.py's) instead of generating one")
    ap.add_argument("--segments", type=int, default=0, help="run docs/checkpointing.md's patch with this many segments")
    args = ap.parse_args()
    if args.child:
        return child(args)

    os.makedirs(args.out, exist_ok=True)
    args.data_dir = os.path.join(args.work, "data")
    if args.dataset:
        with open(args.dataset) as f:
            ds = write_dataset(args.data_dir, json.load(f))
    else:
        ds = make_dataset(args.data_dir, args.train_images, args.val_images, seed=33)
    with open(os.path.join(args.out, "dataset.json"), "w") as f:
        json.dump(ds, f)
    print(f"dataset: {len(ds['train'])} train and {len(ds['val'])} val images", flush=True)

    for spec in filter(None, args.runs.split(",")):
        cfg, batch, *workers = spec.split(":")
        w = int(workers[0]) if workers else 8
        run(args, cfg, int(batch), 0.0, f"{cfg}_b{batch}" + (f"_k{args.segments}" if args.segments > 1 else "") + (f"_w{w}" if w != 8 else ""), w)

    for search in filter(None, args.search.split(",")):
        import torch
        cfg, limit, lo, hi = search.split(":")
        total = torch.cuda.get_device_properties(0).total_memory
        unit = 2**20 if limit.endswith("MiB") else 2**30
        fraction = float(limit.removesuffix("MiB").removesuffix("GiB")) * unit / total
        lo, hi = int(lo), int(hi)  # lo is expected to complete, hi not
        ok = {}
        while hi - lo > 1:
            mid = (lo + hi) // 2
            ok[mid] = run(args, cfg, mid, fraction, f"{cfg}_cap{limit}_b{mid}")
            lo, hi = (mid, hi) if ok[mid] else (lo, mid)
        # Confirm both ends of the boundary.
        for b in (lo, lo + 1):
            if b not in ok:
                ok[b] = run(args, cfg, b, fraction, f"{cfg}_cap{limit}_b{b}")
        with open(os.path.join(args.out, "search.jsonl"), "a") as f:
            f.write(json.dumps({"cfg": cfg, "limit": limit, "fraction": fraction, "capacity_bytes": int(fraction * total),
                                "largest_completing": max([b for b, v in ok.items() if v], default=0), "trials": ok}) + "\n")
        print(f"search {cfg} under {limit}: largest batch completing the run {max([b for b, v in ok.items() if v], default=0)}", flush=True)

    for spec in filter(None, args.after.split(",")):
        cfg, batch = spec.split(":")
        run(args, cfg, int(batch), 0.0, f"{cfg}_b{batch}" + (f"_k{args.segments}" if args.segments > 1 else ""))


if __name__ == "__main__":
    main()
