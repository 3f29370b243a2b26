"""The largest batch of a real YOLOv9 training loop under a capped caching allocator.

The ground truth's "max_batch" kind (../shared/groundtruth/README.md, "Max batch under a
limit") for train steps: the largest batch whose whole sequence runs without
torch.OutOfMemoryError in a fresh process whose caching allocator is capped right after CUDA
init, before any allocation, by torch.cuda.set_per_process_memory_fraction(f). max_batch.py
measured it for model steps; this script measures it for the official training loop.

Each trial is one train_run.py child (the official train_dual.py, train.py for GELAN, with the
repository's own code from --yolo; see train_run.py) run with --fraction f and --train-only:
the setup and then --iters train iterations at batch B (a fresh pinned batch each, COCO-like
per-image box counts, the previous pred alive into the next forward, GradScaler's skips as they
come), nothing else. A trial that raises torch.OutOfMemoryError records the event it ran out
in. The search starts at a guess (onnxmem's answer, so that the boundary is found in two or
three trials): up while the trial runs, down while it runs out, until B runs and B+1 does
not. The configs are searched concurrently, each trial its own capped process.

Every trial is a line of results/train_max_batch.jsonl: train_run.py's record (its events
with the box counts, which steps GradScaler skipped, allocated and reserved after each
event), with "fraction", "total_memory" and "oom" (null, or the event it ran out in).
TestTrainMaxBatchMeasured replays each trial's events under int(f x total_memory) and asks
whether onnxmem runs out too, and where.

Configs: cfg:amp|fp32:fraction:guess, comma-separated; amp.ddpN (fp32.ddpN) runs DDP over N GPUs
(train_run.py's mode; the batch is the total, and the search steps by N). Rerun on a GPU machine, from the
repository root, with the official code at third_party/yolov9 (see train_run.py):
    python3 calibration/train_max_batch.py --out calibration/results
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

DEFAULT = "yolov9-s:amp:0.05:16,yolov9-c:amp:0.08:10,yolov9-s:fp32:0.08:14,gelan-c:amp:0.06:13"


def trial(cfg, prec, frac, batch, a, tag):
    """Runs one capped child; returns its record (oom null when it ran through).

    prec may carry train_run.py's DDP mode (amp.ddp2: amp, ddp2): the trial then runs under
    torch.distributed.run over the mode's GPUs, every rank capped; the record is rank 0's, or
    the first rank's that ran out (the others are stopped), with "oom_rank"."""
    tmp = os.path.join(a.out, ".train_max_batch_%s.json" % tag)
    prec, _, mode = prec.partition(".")
    spec = "%s:%d:%s" % (cfg, batch, prec) + (":" + mode if mode else "")
    launch = [sys.executable]
    world = 0
    if mode:
        sys.path.insert(0, HERE)
        import train_run
        world = train_run.world_of(mode)
        launch += ["-m", "torch.distributed.run", "--nproc_per_node", str(world), "--master_port", str(29600 + batch % 300)]
    cmd = launch + [os.path.join(HERE, "train_run.py"), "--child", spec,
                    "--child-out", tmp, "--yolo", a.yolo, "--iters1", str(a.iters), "--iters2", "0",
                    "--val-batches", "0", "--train-only", "--fraction", str(frac)]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    recs = []
    for rank, path in enumerate([tmp] + ["%s.rank%d" % (tmp, k) for k in range(1, world)]):
        if os.path.exists(path):
            with open(path) as f:
                recs.append((rank, json.loads(f.read())))
            os.remove(path)
    if not recs or r.returncode != 0 and not any(x["measured"]["oom"] for _, x in recs):
        raise RuntimeError("%s batch %d: rc %d\n%s" % (cfg, batch, r.returncode, (r.stdout + r.stderr)[-3000:]))
    oomed = [(k, x) for k, x in recs if x["measured"]["oom"]]
    rank, rec = oomed[0] if oomed else recs[0]
    if mode:
        rec["measured"]["oom_rank"] = rank if oomed else None
    m = rec["measured"]
    print("%s %s f=%.3f batch %d: %s, peak %.0f MiB, reserved %.0f MiB, %.0fs" % (
        cfg, prec, frac, batch, "OOM in event %d" % m["oom"]["event"] if m["oom"] else "ran",
        m["peak"] / 2**20, m["peak_reserved"] / 2**20, time.time() - t0), flush=True)
    return rec


def search(spec, a, lock, out):
    cfg, prec, frac, guess = spec.split(":")
    frac, b = float(frac), int(guess)
    step = 1  # a DDP search steps by its GPUs: the batch is their multiple
    if "." in prec:
        sys.path.insert(0, HERE)
        import train_run
        step = max(train_run.world_of(prec.partition(".")[2]), 1)
        b = max(step, b // step * step)
    seen = {}
    for n in range(a.max_trials):
        rec = trial(cfg, prec, frac, b, a, "%s_%s_%d" % (cfg, prec, b))
        ok = rec["measured"]["oom"] is None
        seen[b] = ok
        with lock:
            with open(out, "a") as f:
                f.write(json.dumps(rec) + "\n")
        if ok and seen.get(b + step) is False or not ok and seen.get(b - step) is True:
            print("%s %s f=%.3f: max batch %d" % (cfg, prec, frac, b if ok else b - step), flush=True)
            return
        b = b + step if ok else b - step
        if b < step:
            return
    print("%s %s f=%.3f: no boundary in %d trials" % (cfg, prec, frac, a.max_trials), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--configs", default=DEFAULT)
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--yolo", default=os.path.join(REPO, "third_party", "yolov9"))
    p.add_argument("--iters", type=int, default=10, help="train iterations a trial runs")
    p.add_argument("--max-trials", type=int, default=6)
    p.add_argument("--timeout", type=int, default=300)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    out = os.path.join(a.out, "train_max_batch.jsonl")
    lock = threading.Lock()
    errors = []

    def run(spec):
        try:
            search(spec, a, lock, out)
        except Exception as e:  # noqa: BLE001 (reported, and the exit code says so)
            errors.append(str(e))
            print("ERROR %s" % e, flush=True)

    threads = [threading.Thread(target=run, args=(s,)) for s in a.configs.split(",")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
