"""Whole short YOLOv9 training runs, event by event: the ground truth's kind "train_run".

../shared/groundtruth/README.md, section "Whole training runs (kind: train_run)", describes the
events. This script follows the official train_dual.py (train.py for GELAN) of
github.com/WongKinYiu/yolov9 at commit 5b1ea9a wherever it touches the GPU, with that repository's
own code (models/yolo.py Model, utils/torch_utils.py smart_optimizer and ModelEMA,
utils/loss_tal_dual.py or utils/loss_tal.py ComputeLoss, val_dual.py or val.py run), imported from
a copy of it at --yolo (default third_party/yolov9, git-ignored; make it with
    git --git-dir=<mirror of WongKinYiu/yolov9> archive 5b1ea9a | tar -x -C third_party/yolov9).
Only the data is fake: seeded random uint8 images and boxes.

One run, in a fresh process per config:
  init_seeds(0, deterministic=True) (as train_dual: opt.seed + 1 + RANK = 0), cudnn.benchmark
  False, CUDA init, reset_peak_memory_stats; then the events:
  - setup: Model(cfg, ch=3, nc=80).to(cuda), smart_optimizer SGD (lr0 0.01, momentum 0.937,
    weight_decay 0.0005 * B * accumulate / 64 with accumulate = round(64 / B)), LambdaLR (linear),
    ModelEMA, model.half().float(), model.nc/hyp/class_weights/names, GradScaler(enabled=amp),
    EarlyStopping, ComputeLoss, and epoch 0's mloss = zeros(3) and optimizer.zero_grad().
    hyp is data/hyps/hyp.scratch-high.yaml with anchor_t 5.0 and label_smoothing 0.0; at this
    commit train_dual.py has the box/cls/obj gain scaling commented out, so the gains stay as in
    the yaml (box 7.5, cls 0.5, dfl 1.5).
  - train (one per iteration): a new pinned uint8 batch (B,3,640,640) and CPU targets (n,6)
    [image, class, x, y, w, h] (normalized xywh), then train_dual.py's loop body: the warmup's lr
    and momentum interpolation (CPU only), imgs.to(device, non_blocking=True).float() / 255, the
    forward and loss under torch.cuda.amp.autocast(amp), scaler.scale(loss).backward(), and, the
    optimizer stepping every iteration (accumulate 1), unscale_, clip_grad_norm_(10), step,
    update, zero_grad, ema.update; mloss update and the GPU_mem string. The first train event of
    epoch 1 also holds the epoch start (model.train(), mloss = zeros(3), optimizer.zero_grad()).
  - val (one per validation batch) after epoch 0's iterations: scheduler.step(),
    ema.update_attr(...), then validate.run(...) exactly as train_dual.py calls it (plots=False
    there) on a fake dataloader of rectangular pinned batches. Memory is read when run() asks for
    the next batch; the first val event holds run()'s preamble, the last ends after run() returns.
  - ckpt: fitness, the early stopper, the checkpoint dict (deepcopy(de_parallel(model)).half(),
    deepcopy(ema.ema).half(), optimizer.state_dict(), ...), torch.save to last.pt and (as
    best_fitness == fi) best.pt in a temporary folder, del ckpt.
  - train: epoch 1's iterations.
Per event: memory_allocated() and memory_reserved() at its end, and its peaks (allocated,
reserved, requested; reset_peak_memory_stats at each event start); for train events whether the
optimizer step ran (GradScaler's scale went down: skipped) and the scale after update(). The
whole-run peaks are the running max of the event peaks (the events cover the run back to back).

Modules the repository imports but this run never uses (cv2, pandas, seaborn, matplotlib, PIL,
IPython, requests, psutil, pkg_resources, tqdm) are stubbed when they are missing; yaml falls
back to third_party/pylib when missing. env lists what was stubbed.

DDP (issues 36 and 37): a config cfg:batch:prec:ddpN (ddp: N = 1; ddpN-syncbn with --sync-bn)
is started as
    python -m torch.distributed.run --nproc_per_node N train_run.py --child ...
so that train_dual.py's DDP path runs with world size N, as the official code runs it, batch
the total (--batch) and each rank batch // N (validation at 2 × that, on rank 0): dist.init_process_group("nccl") after set_device, torch_distributed_zero_first's
barriers where train() has them (check_dataset, the train dataloader), SyncBatchNorm conversion
after the EMA, model.half().float(), smart_DDP (DDP(model, device_ids=[0], output_device=0,
static_graph=True)), loss *= WORLD_SIZE under autocast, and the early-stopping
broadcast_object_list at each epoch end; only rank 0 keeps the EMA, runs model.half().float(),
validates and saves (the other ranks' val and ckpt events hold no work but that broadcast).
Every rank writes its record (in train_run_ddp.jsonl, rank 0 first), with gpus, rank and
sync_bn; the ranks draw the same fake data (one seed). Only world size 1 has run (one GPU). Every record also holds driver_used_after per event and "driver": what
torch.cuda.mem_get_info says is used on the card (context, NCCL, the allocator's segments)
after CUDA init and after init_process_group.

Rerun on a GPU machine, from the repository root (about 2-3 minutes):
    python3 calibration/train_run.py --out calibration/results
which appends one JSON line per config to --out/train_run.jsonl.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

DEFAULT = "yolov9-s:16:amp,yolov9-c:8:amp,yolov9-s:16:fp32,yolov9-t:32:amp,gelan-c:8:amp"

STUBBABLE = {"cv2", "IPython", "pandas", "seaborn", "matplotlib", "PIL", "requests", "psutil",
             "pkg_resources", "tqdm"}
STUBBED = []


def parse(spec):
    """cfg:batch:amp|fp32[:ddpN[-syncbn]]: the mode says whether the run is DDP over N GPUs (ddp: N = 1), with
    SyncBatchNorm; batch is the total, train_dual.py's --batch."""
    cfg, batch, prec, *mode = spec.split(":")
    mode = mode[0] if mode else ""
    m = re.fullmatch(r"ddp(\d*)(-syncbn)?", mode)
    if mode and not m:
        raise SystemExit(f"train_run.py: {spec}: mode {mode!r}: want ddp, ddpN, ddp-syncbn or ddpN-syncbn")
    return cfg, int(batch), prec == "amp", mode


def world_of(mode):
    """The GPUs of a mode: 0 without DDP."""
    if not mode:
        return 0
    n = re.fullmatch(r"ddp(\d*)(-syncbn)?", mode).group(1)
    return int(n) if n else 1


# ----------------------------------------------------------------------------- stubs
def install_stubs():
    import importlib.abc
    import importlib.machinery
    import re
    import types

    class _Dummy:
        def __init__(self, *a, **k):
            pass

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _Dummy()

        def __call__(self, *a, **k):
            return _Dummy()

        def __iter__(self):
            return iter(())

        def __getitem__(self, k):
            return _Dummy()

        def __bool__(self):
            return False

        def __mro_entries__(self, bases):
            return (object,)

    class _tqdm:
        def __init__(self, iterable=None, *a, **k):
            self.iterable = iterable

        def __iter__(self):
            for x in self.iterable:
                yield x

        def __len__(self):
            return len(self.iterable)

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return lambda *a, **k: None

    def parse_version(v):
        return tuple(int(x) for x in re.findall(r"\d+", str(v).split("+")[0])[:3])

    class StubModule(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _Dummy()

    class Loader(importlib.abc.Loader):
        def create_module(self, spec):
            m = StubModule(spec.name)
            m.__path__ = []
            return m

        def exec_module(self, m):
            top = m.__name__.split(".")[0]
            if top == "tqdm":
                m.tqdm = _tqdm
            if top == "pkg_resources":
                m.parse_version = parse_version

                class VersionConflict(Exception):
                    pass

                class DistributionNotFound(Exception):
                    pass

                m.VersionConflict, m.DistributionNotFound = VersionConflict, DistributionNotFound
            STUBBED.append(m.__name__)

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname.split(".")[0] in STUBBABLE:
                return importlib.machinery.ModuleSpec(fullname, Loader(), is_package=True)
            return None

    sys.meta_path.append(Finder())  # last: only for what the real finders do not find


# ----------------------------------------------------------------------------- fake data
def box_counts(rng, n):
    """Long-tailed per-image box counts like COCO's: 3% empty, else 1 + NegBin(r=1.5, mean 6.3), cap 60."""
    import numpy as np
    c = 1 + rng.negative_binomial(1.5, 1.5 / (1.5 + 6.3), n)
    c[rng.random(n) < 0.03] = 0
    return np.minimum(c, 60).astype(int)


def make_targets(torch, rng, counts):
    import numpy as np
    rows = []
    for i, k in enumerate(counts):
        for _ in range(int(k)):
            w, h = rng.uniform(0.02, 0.5, 2)
            x = rng.uniform(w / 2, 1 - w / 2)
            y = rng.uniform(h / 2, 1 - h / 2)
            rows.append([i, int(rng.integers(0, 80)), x, y, w, h])
    a = np.array(rows, dtype=np.float32).reshape(-1, 6)
    return torch.from_numpy(a)


def make_images(torch, gen, n, h, w):
    return torch.randint(0, 256, (n, 3, h, w), dtype=torch.uint8, generator=gen).pin_memory()


# ----------------------------------------------------------------------------- child: one config
def child(spec, out_path, a):
    import tempfile
    import shutil
    from copy import deepcopy
    from datetime import datetime
    from pathlib import Path

    cfg, B, amp, mode = parse(spec)
    # torch.distributed.run's environment, as train_dual.py reads it at import
    LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))
    RANK = int(os.getenv("RANK", -1))
    WORLD_SIZE = int(os.getenv("WORLD_SIZE", 1))
    if bool(mode) != (RANK != -1) or mode and world_of(mode) != WORLD_SIZE:
        raise SystemExit(f"train_run.py: {spec}: a ddp run must be started by torch.distributed.run with its GPUs, and only it")
    if B % max(WORLD_SIZE, 1):
        raise SystemExit(f"train_run.py: {spec}: batch {B} is no multiple of the {WORLD_SIZE} GPUs")
    Bt, B = B, B // WORLD_SIZE  # the total (--batch) and each rank's: batch_size // WORLD_SIZE
    syncbn = mode.endswith("-syncbn")
    if RANK > 0:
        out_path += f".rank{RANK}"  # each rank's record; the parent gathers them
    trainer = "train" if cfg.startswith("gelan") else "train_dual"
    yolo = os.path.abspath(a.yolo)
    install_stubs()
    sys.path.insert(0, yolo)
    try:
        import yaml
        yaml_src = yaml.__file__
    except ImportError:
        sys.path.append(os.path.join(REPO, "third_party", "pylib"))
        import yaml
        yaml_src = yaml.__file__

    import numpy as np
    import torch
    import torch.nn as nn  # noqa: F401
    from torch.optim import lr_scheduler

    shims = []
    import torch.cuda.amp as tca  # the repository's torch.cuda.amp calls, in case this torch dropped them
    if not hasattr(tca, "autocast"):
        tca.autocast = lambda enabled=True, **k: torch.amp.autocast("cuda", enabled=enabled, **k)
        shims.append("torch.cuda.amp.autocast")
    if not hasattr(tca, "GradScaler"):
        tca.GradScaler = lambda **k: torch.amp.GradScaler("cuda", **k)
        shims.append("torch.cuda.amp.GradScaler")

    from models.yolo import Model
    from utils.callbacks import Callbacks
    from utils.general import init_seeds, labels_to_class_weights
    from utils.metrics import fitness
    from utils.torch_utils import EarlyStopping, ModelEMA, de_parallel, smart_DDP, smart_optimizer, torch_distributed_zero_first
    import torch.distributed as dist
    if trainer == "train_dual":
        import val_dual as validate
        from utils.loss_tal_dual import ComputeLoss
    else:
        import val as validate
        from utils.loss_tal import ComputeLoss

    with open(os.path.join(yolo, "data/hyps/hyp.scratch-high.yaml"), errors="ignore") as f:
        hyp = yaml.safe_load(f)
    hyp["anchor_t"] = 5.0
    with open(os.path.join(yolo, "data/coco.yaml"), errors="ignore") as f:
        data_dict = yaml.safe_load(f)
    root = "../datasets/coco"
    data_dict.update(path=root, train=f"{root}/train2017.txt", val=f"{root}/val2017.txt", nc=len(data_dict["names"]))
    nc = int(data_dict["nc"])
    names = data_dict["names"]
    epochs = 500  # the official README's training command
    cfg_path = os.path.join(yolo, "models/detect", cfg + ".yaml")

    # -- deterministic mode as train_dual (opt.seed + 1 + RANK = 0), before CUDA init
    init_seeds(0, deterministic=True)
    torch.backends.cudnn.benchmark = False
    device = torch.device("cuda:0")
    torch.cuda.init()
    torch.cuda.set_device(device)
    driver = {}  # bytes the driver says are used on the card (context, NCCL, the allocator's segments)

    def driver_used():
        free, total = torch.cuda.mem_get_info()
        return total - free

    driver["after_cuda_init"] = driver_used()
    if RANK != -1:  # train_dual.py main(): set_device(LOCAL_RANK), then the process group
        device = torch.device("cuda", LOCAL_RANK)
        torch.cuda.set_device(LOCAL_RANK)
        dist.init_process_group(backend="nccl" if dist.is_nccl_available() else "gloo")
        driver["after_init_process_group"] = driver_used()
    if a.fraction:  # train_max_batch.py: the allocator capped before any allocation
        torch.cuda.set_per_process_memory_fraction(a.fraction, device)
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.memory_allocated() == 0
    if a.trace:  # the allocator's history, dumped as a memory snapshot when the run ends
        torch.cuda.memory._record_memory_history(enabled="all", context="all" if a.stacks else None,
                                                 stacks="python", max_entries=2000000)

    rng = np.random.default_rng(20240521)  # the fake data's own generator (the global RNGs stay as seeded)
    gen = torch.Generator().manual_seed(1234)
    ds_counts = box_counts(rng, 2000)
    ds_labels = [make_targets(torch, rng, [k]).numpy()[:, 1:] for k in ds_counts]  # dataset.labels: (k, 5) class xywh

    ev, meas = [], {k: [] for k in ("allocated_after", "reserved_after", "event_peak", "event_peak_reserved",
                                    "event_peak_req", "optimizer_stepped", "scale", "val_dets", "event_s",
                                    "driver_used_after")}
    state = {"t0": 0.0, "peak": 0, "peak_reserved": 0, "peak_req": 0}

    def start(kind, info):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        ev.append({kind: info})
        state["t0"] = time.time()

    def end(stepped=None, scale=None, dets=None):
        torch.cuda.synchronize()
        st = torch.cuda.memory_stats()
        meas["allocated_after"].append(torch.cuda.memory_allocated())
        meas["reserved_after"].append(torch.cuda.memory_reserved())
        meas["event_peak"].append(st["allocated_bytes.all.peak"])
        meas["event_peak_reserved"].append(st["reserved_bytes.all.peak"])
        meas["event_peak_req"].append(st["requested_bytes.all.peak"])
        meas["optimizer_stepped"].append(stepped)
        meas["scale"].append(scale)
        meas["val_dets"].append(dets)
        meas["event_s"].append(round(time.time() - state["t0"], 3))
        meas["driver_used_after"].append(driver_used())
        state["peak"] = max(state["peak"], st["allocated_bytes.all.peak"])
        state["peak_reserved"] = max(state["peak_reserved"], st["reserved_bytes.all.peak"])
        state["peak_req"] = max(state["peak_req"], st["requested_bytes.all.peak"])
        k = list(ev[-1])[0]
        print(f"  {len(ev) - 1:3d} {k:6s} alloc {meas['allocated_after'][-1] / 2**20:9.1f} MiB"
              f"  res {meas['reserved_after'][-1] / 2**20:9.1f}  peak {meas['event_peak'][-1] / 2**20:9.1f}"
              f"  peak_res {meas['event_peak_reserved'][-1] / 2**20:9.1f}  step {stepped} scale {scale}"
              f"  {meas['event_s'][-1]:.2f}s", flush=True)

    # ------------------------------------------------------------------ setup
    start("setup", {})
    with torch_distributed_zero_first(LOCAL_RANK):  # train(): check_dataset under it (a barrier on rank 0 after)
        pass
    if RANK != -1:  # NCCL's communicator exists once the first collective ran
        driver["after_first_collective"] = driver_used()
    model = Model(cfg_path, ch=3, nc=nc, anchors=hyp.get("anchors")).to(device)  # create
    gs = max(int(model.stride.max()), 32)
    imgsz = 640
    nbs = 64
    accumulate = max(round(nbs / Bt), 1)
    hyp["weight_decay"] *= Bt * accumulate / nbs
    optimizer = smart_optimizer(model, "SGD", hyp["lr0"], hyp["momentum"], hyp["weight_decay"])
    lf = lambda x: (1 - x / epochs) * (1.0 - hyp["lrf"]) + hyp["lrf"]  # noqa: E731 linear
    scheduler = lr_scheduler.LambdaLR(optimizer, lr_lambda=lf)
    ema = ModelEMA(model) if RANK in {-1, 0} else None
    best_fitness, start_epoch = 0.0, 0
    if syncbn:  # --sync-bn, after the EMA
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model).to(device)
    with torch_distributed_zero_first(LOCAL_RANK):  # create_dataloader's dataset under it (rank=LOCAL_RANK)
        pass
    if RANK in {-1, 0}:
        model.half().float()  # pre-reduce anchor precision
    if RANK != -1:
        model = smart_DDP(model)
    hyp["label_smoothing"] = 0.0
    model.nc = nc
    model.hyp = hyp
    model.class_weights = labels_to_class_weights(ds_labels, nc).to(device) * nc
    model.names = names
    nb = -(-118287 // Bt)  # COCO train2017 batches per epoch (for the warmup's lr only)
    nw = max(round(hyp["warmup_epochs"] * nb), 100)
    scheduler.last_epoch = start_epoch - 1
    scaler = torch.cuda.amp.GradScaler(enabled=amp)
    stopper = EarlyStopping(patience=100)
    compute_loss = ComputeLoss(model)
    callbacks = Callbacks()
    dets = []
    callbacks.register_action("on_val_batch_end", "count",
                              lambda batch_i, im, targets, paths, shapes, preds: dets.append(sum(int(p.shape[0]) for p in preds)))
    save_dir = Path(tempfile.mkdtemp(prefix="train_run_"))
    w = save_dir / "weights"
    w.mkdir(parents=True, exist_ok=True)
    last, best = w / "last.pt", w / "best.pt"
    opt = dict(weights="", cfg=cfg_path, data="data/coco.yaml", hyp=hyp.copy(), epochs=epochs, batch_size=B,
               imgsz=imgsz, optimizer="SGD", seed=0, close_mosaic=15, save_period=-1, patience=100)
    model.train()
    mloss = torch.zeros(3, device=device)
    optimizer.zero_grad()
    end()

    n_saves, results, oom = 0, [], None
    try:
        ni = -1
        for epoch in range(2):
            n_iter = a.iters1 if epoch == 0 else a.iters2
            for i in range(n_iter):
                ni += 1  # iterations since the start, all stepping (accumulate 1, as early in a COCO-sized run)
                counts = box_counts(rng, B)
                start("train", {"boxes_per_img": [int(c) for c in counts]})
                if epoch > 0 and i == 0:  # epoch start
                    model.train()
                    mloss = torch.zeros(3, device=device)
                    optimizer.zero_grad()
                imgs = make_images(torch, gen, B, imgsz, imgsz)
                targets = make_targets(torch, rng, counts)
                imgs = imgs.to(device, non_blocking=True).float() / 255
                if ni <= nw:  # warmup (CPU only)
                    xi = [0, nw]
                    for j, x in enumerate(optimizer.param_groups):
                        x["lr"] = np.interp(ni, xi, [hyp["warmup_bias_lr"] if j == 0 else 0.0, x["initial_lr"] * lf(epoch)])
                        if "momentum" in x:
                            x["momentum"] = np.interp(ni, xi, [hyp["warmup_momentum"], hyp["momentum"]])
                with torch.cuda.amp.autocast(amp):
                    pred = model(imgs)
                    loss, loss_items = compute_loss(pred, targets.to(device))
                    if RANK != -1:
                        loss *= WORLD_SIZE  # gradient averaged between devices in DDP mode
                scaler.scale(loss).backward()
                s0 = scaler.get_scale()
                n_state0 = len(optimizer.state)
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
                if ema:
                    ema.update(model)
                s1 = scaler.get_scale()
                stepped = (s1 >= s0) if amp else True
                if n_state0 == 0:  # before the first real step the optimizer has no state
                    stepped = stepped and len(optimizer.state) > 0
                if RANK in {-1, 0}:
                    mloss = (mloss * i + loss_items) / (i + 1)
                    mem = f"{torch.cuda.memory_reserved() / 1E9:.3g}G"  # noqa: F841 (train_dual's GPU_mem)
                end(stepped=bool(stepped), scale=float(s1))

            if epoch > 0 or a.train_only:
                break

            # ------------------------------------------------------------------ val
            shapes_hw = [(2 * B, 480, 640), (2 * B, 384, 640), (2 * B, 640, 448), (B, 512, 640)][:a.val_batches]
            if a.val_batches < 4:
                shapes_hw[-1] = (B, 512, 640)
            batches, infos = [], []
            for n, h, wd in shapes_hw:
                counts = box_counts(rng, n)
                im = make_images(torch, gen, n, h, wd)
                t = make_targets(torch, rng, counts)
                paths = [f"../datasets/coco/images/val2017/fake{len(batches)}_{k:03d}.jpg" for k in range(n)]
                h0, w0 = (h - 32, wd) if h < wd else (h, wd - 32)
                pad = (0.0, 16.0) if h < wd else (16.0, 0.0)
                shp = [((h0, w0), ((1.0, 1.0), pad)) for _ in range(n)]
                batches.append((im, t, paths, shp))
                infos.append({"batch": n, "img_h": h, "img_w": wd, "boxes_per_img": [int(c) for c in counts]})

            if RANK > 0:
                # The other ranks validate nothing and save nothing: they
                # wait at the epoch end's broadcast. Their val and ckpt
                # events mark the same places and hold no work.
                scheduler.step()
                for info in infos:
                    start("val", info)
                    end()
                del batches
                start("ckpt", {})
                broadcast_list = [None]
                dist.broadcast_object_list(broadcast_list, 0)
                end()
                continue

            class ValLoader:
                """The val dataloader: len() and iteration; memory is read when run() asks for the next batch."""
                num_workers = 0

                def __len__(self):
                    return len(batches)

                def __iter__(self):
                    for k, b in enumerate(batches):
                        if k > 0:
                            end(dets=dets[k - 1] if len(dets) >= k else None)
                            start("val", infos[k])
                        yield b

            val_loader = ValLoader()
            start("val", infos[0])
            lr = [x["lr"] for x in optimizer.param_groups]
            scheduler.step()
            ema.update_attr(model, include=["yaml", "nc", "hyp", "names", "stride", "class_weights"])
            final_epoch = (epoch + 1 == epochs) or stopper.possible_stop
            results, maps, _ = validate.run(data_dict,
                                            batch_size=Bt // max(WORLD_SIZE, 1) * 2,
                                            imgsz=imgsz,
                                            half=amp,
                                            model=ema.ema,
                                            single_cls=False,
                                            dataloader=val_loader,
                                            save_dir=save_dir,
                                            plots=False,
                                            callbacks=callbacks,
                                            compute_loss=compute_loss)
            end(dets=dets[-1] if len(dets) == len(batches) else None)
            del batches

            # ------------------------------------------------------------------ ckpt
            start("ckpt", {})
            fi = fitness(np.array(results).reshape(1, -1))
            stop = stopper(epoch=epoch, fitness=fi)  # noqa: F841
            if fi > best_fitness:
                best_fitness = fi
            log_vals = list(mloss) + list(results) + lr  # noqa: F841 (lives on, as in train())
            ckpt = {
                "epoch": epoch,
                "best_fitness": best_fitness,
                "model": deepcopy(de_parallel(model)).half(),
                "ema": deepcopy(ema.ema).half(),
                "updates": ema.updates,
                "optimizer": optimizer.state_dict(),
                "opt": opt,
                "git": None,
                "date": datetime.now().isoformat()}
            torch.save(ckpt, last)
            n_saves = 1
            if best_fitness == fi:
                torch.save(ckpt, best)
                n_saves += 1
            del ckpt
            if RANK != -1:  # train_dual's early-stopping broadcast, every epoch end
                broadcast_list = [False if RANK == 0 else None]
                dist.broadcast_object_list(broadcast_list, 0)
            end()

    except torch.OutOfMemoryError as e:  # under --fraction: the event it ran out in
        oom = {"event": len(ev) - 1, "message": str(e).splitlines()[0][:300]}
        print(f"  OOM in event {oom['event']}: {oom['message']}", flush=True)
    shutil.rmtree(save_dir, ignore_errors=True)
    if a.trace:
        torch.cuda.memory._dump_snapshot(a.trace)
        torch.cuda.memory._record_memory_history(enabled=None)
    st = torch.cuda.memory_stats()
    rec = {"kind": "train_run", "cfg": cfg, "batch": Bt, "img": 640, "amp": amp, "optimizer": "SGD", "ema": True,
           "segments": 0, "trainer": trainer, **({"gpus": WORLD_SIZE, "rank": RANK, "sync_bn": syncbn} if mode else {}), "model": f"yolov9/{cfg}-train.onnx", "events": ev,
           "measured": {"peak": state["peak"], "peak_reserved": state["peak_reserved"], "peak_req": state["peak_req"],
                        **meas, "ckpt_saves": n_saves, "num_alloc_retries": st.get("num_alloc_retries", 0),
                        "num_ooms": st.get("num_ooms", 0), "val_results": [float(x) for x in results],
                        "fraction": a.fraction, "total_memory": torch.cuda.get_device_properties(0).total_memory,
                        "oom": oom, "driver": driver},
           "env": {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                   "gpu": torch.cuda.get_device_name(0), "python": sys.version.split()[0],
                   "deterministic": torch.are_deterministic_algorithms_enabled(),
                   "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
                   "yolov9": "WongKinYiu/yolov9@5b1ea9a", "stubbed": sorted(set(STUBBED)), "shims": shims, "yaml": yaml_src,
                   "iters": [a.iters1, a.iters2]}}
    with open(out_path, "w") as f:
        f.write(json.dumps(rec) + "\n")
    if RANK != -1 and oom and WORLD_SIZE > 1:
        # The other ranks wait in a collective for this one: exit at once
        # so that torch.distributed.run stops them (a capped search).
        sys.stdout.flush()
        os._exit(3)
    if RANK != -1:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- parent
def main():
    p = argparse.ArgumentParser()
    p.add_argument("--configs", default=DEFAULT, help="cfg:batch:amp|fp32, comma-separated")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--yolo", default=os.path.join(REPO, "third_party", "yolov9"))
    p.add_argument("--iters1", type=int, default=20, help="train iterations of epoch 0")
    p.add_argument("--iters2", type=int, default=5, help="train iterations of epoch 1")
    p.add_argument("--val-batches", type=int, default=4)
    p.add_argument("--timeout", type=int, default=300)
    p.add_argument("--child", default=None)
    p.add_argument("--child-out", default=None)
    p.add_argument("--fraction", type=float, default=0, help="set_per_process_memory_fraction right after CUDA init (every rank)")
    p.add_argument("--train-only", action="store_true", help="epoch 0's train iterations only (no val, ckpt, epoch 1)")
    p.add_argument("--trace", default=None, help="child: dump a memory snapshot of the whole run to this file")
    p.add_argument("--stacks", action="store_true", help="child: with --trace, record each allocation's Python frames")
    p.add_argument("--local-rank", "--local_rank", type=int, default=-1, help="torch.distributed.launch's; run reads LOCAL_RANK")
    a = p.parse_args()
    if a.child:
        child(a.child, a.child_out, a)
        return
    os.makedirs(a.out, exist_ok=True)
    for k, spec in enumerate(a.configs.split(",")):
        mode = parse(spec)[3]
        world = world_of(mode)
        # DDP over N GPUs as train_dual.py runs under
        #   python -m torch.distributed.run --nproc_per_node N train_dual.py ...
        # each rank writing its own record (rank 0's tmp, the others' tmp.rankR).
        out = os.path.join(a.out, "train_run_ddp.jsonl" if mode else "train_run.jsonl")
        tmp = os.path.join(a.out, f".train_run_{spec.replace(':', '_')}.json")
        t0 = time.time()
        print(f"== {spec}", flush=True)
        launch = [sys.executable]
        if mode:
            launch += ["-m", "torch.distributed.run", "--nproc_per_node", str(world), "--master_port", str(29500 + k)]
        cmd = launch + [os.path.abspath(__file__), "--child", spec, "--child-out", tmp, "--yolo", a.yolo,
                        "--iters1", str(a.iters1), "--iters2", str(a.iters2), "--val-batches", str(a.val_batches)]
        if a.trace:
            cmd += ["--trace", a.trace + "." + spec.replace(":", "_") + ".pickle"] + (["--stacks"] if a.stacks else [])
        if a.train_only:
            cmd += ["--train-only"]
        if a.fraction:
            cmd += ["--fraction", str(a.fraction)]
        os.makedirs(os.path.join(a.out, "train_run_logs"), exist_ok=True)
        log = os.path.join(a.out, "train_run_logs", spec.replace(":", "_") + ".log")
        with open(log, "w") as lf:
            try:
                r = subprocess.run(cmd, timeout=a.timeout, stdout=lf, stderr=subprocess.STDOUT)
                rc = r.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        with open(log) as lf:
            lines = lf.read().splitlines()
        keep = [x for x in lines if x.startswith("  ") and " alloc " in x]
        print("\n".join(keep if rc == 0 else keep + lines[-25:]), flush=True)
        print(f"== {spec}: rc {rc}, {time.time() - t0:.1f}s", flush=True)
        for path in [tmp] + [f"{tmp}.rank{r}" for r in range(1, world)]:
            if os.path.exists(path):
                with open(path) as f, open(out, "a") as g:
                    g.write(f.read())
                os.remove(path)


if __name__ == "__main__":
    main()
