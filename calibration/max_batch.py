"""Max batch of a YOLOv9 model step under a capped caching allocator.

The ground truth's "max_batch" kind (../shared/groundtruth/README.md, "Max batch under a
limit"): the largest batch B whose whole scenario sequence runs without
torch.OutOfMemoryError in a fresh process whose caching allocator is capped, right after
CUDA init and before any allocation, by torch.cuda.set_per_process_memory_fraction(f);
capacity_bytes = int(f * total_memory). Confirmed: B passes twice, B+1 fails twice.

The scenario is yolov9_segments.py's, imported from it (its modules, its Model, its
scenario(): empty_cache, x = randn(B, 3, S, S), a warm-up step, then the measured step with
reset peaks): each trial is a fresh process (python3 max_batch.py --trial ...) that
  1. initialises CUDA and caps the allocator (nothing allocated yet),
  2. builds the model (torch.manual_seed(0), Model(TABLES[cfg]).to(cuda).train()),
  3. runs yolov9_segments.scenario(), with cudnn.benchmark = False,
and prints one JSON line: ok, with the measured step's allocated/requested/reserved peaks
(and the warm-up's), or oom, with the phase it failed in (build, warmup, measured) and the
allocator's "Tried to allocate" size in bytes (from an out-of-memory observer, the same
number the message prints rounded). The observer also counts the OOMs that did not reach
Python (cuDNN tries its next engine when a workspace cannot be had); num_ooms and
num_alloc_retries of memory_stats() are recorded too.

The parent (no torch, no CUDA) searches each config from a starting guess: exponential steps
(guess/10, doubling) until the other outcome, then bisection, then the confirmation: B and
B+1 again, each in a trial that runs with no other process on the GPU ("solo"). The search
trials of different configs run concurrently, each capped, with the sum of the running
trials' fractions held under --budget (a share of total_memory; each process's CUDA context,
about 0.5 GiB, comes on top of its cap). So each boundary has one concurrent and one solo
result on each side, and the peaks at B of the two runs are compared: the cap is the
process's own allocator's (reserved bytes of that process), so concurrency should change
nothing as long as the GPU itself never runs short (the observer records the device's free
memory at every OOM for that check). Last, B runs once more without a cap ("uncapped"), to
show whether the cap changed the step's peaks (cache released and retried, other cuDNN
engines).

Configs: cfg:img:amp|fp32:K:fraction:guess[:step], comma-separated. step is model_step (the
default, as above), eval_step (eval_step.py's child without its profile pass: the float32 model,
its half copy, the cuBLAS workspace, empty_cache, a warm-up forward and the measured one, at
img x img) or train_step (train_step.py's child: the official code's model, EMA, SGD,
GradScaler and loss, steps until the optimizer has state, the measured step; 16 boxes an image,
K as its k=). For those two a trial's OOM phase is "step" (their children do not say which
part ran out). The eval_step and train_step searches were written on 2026-12-05 when no device
was lent any more, and have not run yet; the planned run (predicted max batch 40, 26, 73, 77,
17 and 7 on the H200):
    python3 calibration/max_batch.py --out calibration/results --json max_batch_steps.json --timeout 120 \
      --configs yolov9-c:640:fp32:0:0.03:40:eval_step,yolov9-e:640:fp32:0:0.05:26:eval_step,yolov9-s:640:fp32:0:0.015:73:eval_step,gelan-c:640:fp32:0:0.04:77:eval_step,yolov9-s:640:amp:0:0.05:17:train_step,yolov9-c:640:amp:0:0.06:7:train_step

Rerun on a GPU machine, from the repository root (results/max_batch.json and the log):
    python3 calibration/max_batch.py --out calibration/results | tee calibration/results/max_batch.log
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

DEFAULT_CONFIGS = ",".join([
    "yolov9-s:640:fp32:0:0.10:18",
    "yolov9-s:640:amp:0:0.05:18",
    "yolov9-s:640:amp:0:0.12:46",
    "yolov9-s:640:amp:2:0.05:33",
    "yolov9-s:640:fp32:2:0.05:14",
    "yolov9-c:640:fp32:0:0.25:17",
    "yolov9-c:640:amp:0:0.07:9",
    "yolov9-c:640:amp:0:0.17:23",
    "yolov9-c:640:fp32:2:0.17:21",
    "yolov9-c:640:amp:2:0.10:26",
])


# ----------------------------------------------------------------------------- one trial (child)
def other_step(step_kind, cfg, batch, img, prec, k):
    """Runs one eval_step.py or train_step.py scenario in this process (CUDA already capped) and
    returns its figures as trial() reports a model step's."""
    import tempfile
    fd, tmp = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        if step_kind == "eval_step":
            import eval_step
            eval_step.PROFILE = False
            eval_step.child("%s:%d:%d:%d" % (cfg, batch, img, img), tmp, None)
            with open(tmp) as fh:
                return json.load(fh)["result"]
        import train_step
        spec = "%s:%d:%s:::16:img=%d" % (cfg, batch, prec, img) + (":k=%d" % k if k > 1 else "")
        ns = argparse.Namespace(yolo=os.path.join(os.path.dirname(HERE), "third_party", "yolov9"))
        train_step.child(spec, tmp, ns)
        with open(tmp) as fh:
            m = json.load(fh)["record"]["measured"]
        return {"m0": m["m_init"], "peak": m["peak"], "peak_req": m["peak_req"], "peak_reserved": m["peak_reserved"],
                "warm_steps": m["warm_steps"], "reserved_after": m["reserved_after"]}
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def trial(spec):
    """cfg:batch:img:prec:k:fraction[:step] (fraction 'none': no cap). Prints one JSON line."""
    f = spec.split(":")
    step_kind = f[6] if len(f) > 6 else "model_step"
    cfg, batch, img, prec, k, frac = f[:6]
    batch, img, k, amp = int(batch), int(img), int(k), prec == "amp"
    frac = None if frac == "none" else float(frac)
    t0 = time.time()
    import torch
    torch.cuda.init()
    if frac is not None:
        torch.cuda.set_per_process_memory_fraction(frac, 0)
    sys.path.insert(0, HERE)
    import yolov9_segments as ys

    total = torch.cuda.get_device_properties(0).total_memory
    free0, total_info = torch.cuda.mem_get_info(0)
    out = {"step": step_kind, "cfg": cfg, "batch": batch, "img": img, "amp": amp, "segments": k, "fraction": frac,
           "capacity_bytes": int(frac * total) if frac is not None else None,
           "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
           "gpu": torch.cuda.get_device_name(0), "total_memory": total, "mem_get_info_total": total_info,
           "device_free_at_start": free0, "pid": os.getpid()}
    phase = ["build"]
    ooms = []  # every OOM the allocator reported, also those cuDNN caught

    def observer(device, alloc, allowed, device_free):
        ooms.append({"phase": phase[0], "tried": int(alloc), "allowed": int(allowed), "device_free": int(device_free)})

    if hasattr(torch._C, "_cuda_attach_out_of_memory_observer"):
        torch._C._cuda_attach_out_of_memory_observer(observer)

    step = ys.step
    calls = [0]

    def counted_step(*args, **kw):
        phase[0] = "warmup" if calls[0] == 0 else "measured"
        calls[0] += 1
        r = step(*args, **kw)
        if calls[0] == 1:  # the warm-up's figures, before scenario() resets the peaks
            st = torch.cuda.memory_stats()
            out["warmup"] = {"peak": st["allocated_bytes.all.peak"], "peak_req": st["requested_bytes.all.peak"],
                             "peak_reserved": st["reserved_bytes.all.peak"]}
        return r

    ys.step = counted_step
    torch.backends.cudnn.benchmark = False
    try:
        if step_kind != "model_step":
            phase[0] = "step"
            res = other_step(step_kind, cfg, batch, img, prec, k)
        else:
            torch.manual_seed(0)
            model = ys.Model(ys.TABLES[cfg]).to(ys.DEV).train()
            res, _ = ys.scenario(model, cfg, batch, img, amp, k, False)
        out["status"] = "ok"
        out["result"] = res
    except Exception as e:  # noqa: BLE001 - classified below
        msg = str(e)
        oom = isinstance(e, getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)) or "out of memory" in msg.lower()
        out["status"] = "oom" if oom else "error"
        out["phase"] = phase[0]
        out["exception"] = type(e).__name__
        out["message"] = msg[:700]
        m = re.search(r"Tried to allocate ([0-9.]+) (B|KiB|MiB|GiB|TiB)", msg)
        out["tried_message"] = m.group(1) + " " + m.group(2) if m else None
        out["tried"] = ooms[-1]["tried"] if ooms else None
    st = torch.cuda.memory_stats()
    out["num_ooms"] = st.get("num_ooms", 0)
    out["num_alloc_retries"] = st.get("num_alloc_retries", 0)
    out["reserved_at_end"] = st.get("reserved_bytes.all.current", 0)
    out["ooms_observed"] = ooms[:20]
    out["n_ooms_observed"] = len(ooms)
    out["device_free_at_end"] = torch.cuda.mem_get_info(0)[0]
    out["wall_s"] = round(time.time() - t0, 2)
    print("TRIAL " + json.dumps(out), flush=True)


# ----------------------------------------------------------------------------- search (parent)
def search(guess):
    """Generator: yields (batch, mode), mode in concurrent | solo | uncapped; is sent each
    trial's outcome dict; returns when B (ok twice, never oom) and B+1 (oom twice, never ok)
    are confirmed, or batch 1 fails, or the results disagree at the boundary."""
    res = {}  # batch -> list of statuses
    step = max(1, round(guess / 10))
    while True:
        fails = [b for b, r in res.items() if "oom" in r]
        hi = min(fails) if fails else None
        oks = [b for b, r in res.items() if all(s == "ok" for s in r) and (hi is None or b < hi)]
        lo = max(oks) if oks else 0
        if hi is None:
            b, mode = (lo + step if lo else guess), "concurrent"
            if lo:
                step *= 2
        elif lo == 0:
            if hi == 1:
                return
            b, mode = max(1, hi - step), "concurrent"
            step *= 2
        elif hi - lo > 1:
            b, mode = (lo + hi) // 2, "concurrent"
        elif "ok" in res[hi]:  # B+1 passed once and failed once: report, do not loop
            return
        elif len(res[lo]) < 2:
            b, mode = lo, "solo"
        elif len(res[hi]) < 2:
            b, mode = hi, "solo"
        else:
            break
        r = yield b, mode
        if r["status"] == "error":
            return
        res.setdefault(b, []).append(r["status"])
    yield lo, "uncapped"


class Config:
    def __init__(self, spec):
        f = spec.split(":")
        cfg, img, prec, k, frac, guess = f[:6]
        self.step = f[6] if len(f) > 6 else "model_step"
        if self.step not in ("model_step", "eval_step", "train_step"):
            raise SystemExit("%s: step %r: want model_step, eval_step or train_step" % (spec, self.step))
        self.cfg, self.img, self.amp, self.k = cfg, int(img), prec == "amp", int(k)
        self.prec, self.fraction, self.guess = prec, float(frac), int(guess)
        self.name = "%s %s %d %s k%d f%.3f" % (self.step, cfg, self.img, prec, self.k, self.fraction)
        self.gen = search(self.guess)
        self.trials = []  # outcome dicts, in order
        self.pending = None  # (batch, mode) waiting to run
        self.done = False

    def advance(self, outcome=None):
        try:
            self.pending = self.gen.send(outcome) if outcome is not None else next(self.gen)
        except StopIteration:
            self.pending, self.done = None, True

    def claim(self, mode):
        return self.fraction * (1.3 if mode == "uncapped" else 1.0)


def run_all(configs, budget, timeout, log, on_trial=lambda: None):
    """Runs the trials: concurrent (and uncapped) ones while their fractions fit the budget,
    solo ones one at a time with nothing else on the GPU, once no other trial waits."""
    for c in configs:
        c.advance()
    running = []  # (config, batch, mode, Popen, t0)
    while True:
        waiting = [c for c in configs if c.pending is not None and all(r[0] is not c for r in running)]
        if not waiting and not running:
            break
        started = False
        if not any(r[2] == "solo" for r in running):
            for c in waiting:
                b, mode = c.pending
                if mode == "solo":
                    continue
                used = sum(r[0].claim(r[2]) for r in running)
                if running and used + c.claim(mode) > budget:
                    continue
                running.append((c, b, mode, launch(c, b, mode), time.time()))
                started = True
            busy = any(c.pending and c.pending[1] != "solo" for c in configs)
            if not running and not busy:
                solo = [c for c in waiting if c.pending[1] == "solo"]
                if solo:
                    c = solo[0]
                    b, mode = c.pending
                    running.append((c, b, mode, launch(c, b, mode), time.time()))
                    started = True
        if started:
            continue
        time.sleep(0.2)
        for r in list(running):
            c, b, mode, p, t0 = r
            if p.poll() is None and time.time() - t0 < timeout:
                continue
            if p.poll() is None:
                p.kill()
            stdout, stderr = p.communicate()
            outcome = None
            for line in stdout.splitlines():
                if line.startswith("TRIAL "):
                    outcome = json.loads(line[6:])
            if outcome is None:
                outcome = {"batch": b, "status": "error", "message": (stderr or "")[-700:], "returncode": p.returncode}
            outcome["mode"] = mode
            outcome["concurrent_with"] = [x[0].name + " b%d" % x[1] for x in running if x is not r]
            running.remove(r)
            c.trials.append(outcome)
            log_trial(c, outcome, log)
            c.advance(outcome)
            on_trial()
            if c.done:
                log("%s: done after %d trials" % (c.name, len(c.trials)))


def launch(c, b, mode):
    frac = "none" if mode == "uncapped" else repr(c.fraction)
    spec = "%s:%d:%d:%s:%d:%s:%s" % (c.cfg, b, c.img, c.prec, c.k, frac, c.step)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--trial", spec], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def gib(x):
    return "-" if x is None else "%.3f" % (x / 2**30)


def log_trial(c, o, log):
    s = "%-30s b%-3d %-10s %-5s %5.1fs" % (c.name, o["batch"], o["mode"], o["status"], o.get("wall_s", 0))
    if o["status"] == "ok":
        r = o["result"]
        s += " peak %s peak_req %s reserved %s GiB" % (gib(r["peak"]), gib(r["peak_req"]), gib(r["peak_reserved"]))
        if o.get("warmup"):
            s += " (warm-up reserved %s)" % gib(o["warmup"]["peak_reserved"])
    elif o["status"] == "oom":
        s += " in %s, tried %s (%s)" % (o["phase"], o.get("tried"), o.get("tried_message"))
    else:
        s += " " + o.get("message", "")[-300:].replace("\n", " | ")
    if o.get("n_ooms_observed") and o["status"] == "ok":
        s += " [%d OOMs caught inside]" % o["n_ooms_observed"]
    s += " retries %s, %d running beside" % (o.get("num_alloc_retries"), len(o.get("concurrent_with", [])))
    log(s)


def summarize(c):
    caps = [t for t in c.trials if t["mode"] != "uncapped"]
    trials = [[t["batch"], t["status"]] for t in caps]
    line = {"kind": "max_batch", "step": c.step, "cfg": c.cfg, "img": c.img, "amp": c.amp, "segments": c.k,
            "fraction": c.fraction, "capacity_bytes": next((t["capacity_bytes"] for t in caps if t.get("capacity_bytes")), None),
            "guess": c.guess, "trials": trials}
    by = {}
    for t in caps:
        by.setdefault(t["batch"], []).append(t)
    fails = [b for b, ts in by.items() if any(t["status"] == "oom" for t in ts)]
    hi = min(fails) if fails else None
    oks = [b for b, ts in by.items() if all(t["status"] == "ok" for t in ts) and (hi is None or b < hi)]
    lo = max(oks) if oks else 0
    confirmed = (hi == lo + 1 and len(by.get(lo, [])) >= 2 and len(by[hi]) >= 2 and
                 all(t["status"] == "oom" for t in by[hi])) if hi else False
    meas = {"max_batch": lo, "fails_at": hi, "confirmed": confirmed}
    if lo:
        ok_runs = by[lo]
        ref = next((t for t in ok_runs if t["mode"] == "solo"), ok_runs[-1])
        r = ref["result"]
        meas.update({"peak": r["peak"], "peak_req": r["peak_req"], "peak_reserved": r["peak_reserved"],
                     "m0": r["m0"], "fwd_peak": r.get("fwd_peak"), "after_bwd": r.get("after_bwd"),
                     "warmup": ref.get("warmup"), "ooms_caught_inside": ref.get("n_ooms_observed"),
                     "num_alloc_retries": ref.get("num_alloc_retries"),
                     "peaks_same_in_all_runs": len({(t["result"]["peak"], t["result"]["peak_req"], t["result"]["peak_reserved"])
                                                    for t in ok_runs}) == 1})
    if hi:
        f = [t for t in by[hi] if t["status"] == "oom"]
        ref = next((t for t in f if t["mode"] == "solo"), f[-1])
        meas["oom_at_fail"] = {"phase": ref["phase"], "tried": ref.get("tried"), "message": ref.get("message")}
        meas["oom_at_fail_same_in_all_runs"] = len({(t["phase"], t.get("tried")) for t in f}) == 1
    unc = [t for t in c.trials if t["mode"] == "uncapped" and t["status"] == "ok"]
    if unc:
        r = unc[-1]["result"]
        meas["uncapped_at_max"] = {"peak": r["peak"], "peak_req": r["peak_req"], "peak_reserved": r["peak_reserved"],
                                   "warmup": unc[-1].get("warmup")}
    line["measured"] = meas
    both = [b for b, ts in by.items() if {t["mode"] for t in ts} == {"solo", "concurrent"}]
    line["concurrency"] = {
        "batches_run_solo_and_concurrent": sorted(both),
        "solo_and_concurrent_agree": all(len({t["status"] for t in by[b]}) == 1 for b in both) and all(
            len({(t["result"]["peak"], t["result"]["peak_req"], t["result"]["peak_reserved"]) for t in by[b]}) == 1
            for b in both if by[b][0]["status"] == "ok"),
        "min_device_free_at_oom": min((o["device_free"] for t in caps for o in t.get("ooms_observed", [])), default=None),
    }
    line["trial_details"] = c.trials
    return line


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trial", help="internal: run one trial cfg:batch:img:prec:k:fraction and print its JSON")
    ap.add_argument("--out", default="calibration/results")
    ap.add_argument("--json", default="max_batch.json")
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help="cfg:img:amp|fp32:K:fraction:guess[:step],...")
    ap.add_argument("--budget", type=float, default=0.75,
                    help="sum of the fractions of the trials that may run at once (share of total_memory)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per trial")
    a = ap.parse_args()
    if a.trial:
        trial(a.trial)
        return
    t_start = time.time()

    def log(s):
        print("[%6.1fs] %s" % (time.time() - t_start, s), flush=True)

    configs = [Config(s) for s in a.configs.split(",")]
    log("%d configs, budget %.2f of total_memory" % (len(configs), a.budget))
    os.makedirs(a.out, exist_ok=True)

    def write():  # after every trial, so that a run cut short leaves what it found
        first = next((t for c in configs for t in c.trials if "torch" in t), {})
        res = {"torch": first.get("torch"), "cudnn": first.get("cudnn"), "gpu": first.get("gpu"),
               "total_memory": first.get("total_memory"), "budget": a.budget,
               "scenarios": [summarize(c) for c in configs]}
        with open(os.path.join(a.out, a.json), "w") as fh:
            json.dump(res, fh, indent=1)
        return res

    run_all(configs, a.budget, a.timeout, log, write)
    results = write()
    log("summary (GiB):")
    for s in results["scenarios"]:
        m = s["measured"]
        log("%-10s %-9s %-4s k%d f%.3f cap %s: max_batch %s (fails at %s, confirmed %s) peak %s peak_req %s reserved %s; "
            "at B+1 OOM in %s tried %s; %d trials; agree %s" % (
                s["step"], s["cfg"], "amp" if s["amp"] else "fp32", s["segments"], s["fraction"], gib(s["capacity_bytes"]),
                m["max_batch"], m["fails_at"], m["confirmed"], gib(m.get("peak")), gib(m.get("peak_req")),
                gib(m.get("peak_reserved")), m.get("oom_at_fail", {}).get("phase"), m.get("oom_at_fail", {}).get("tried"),
                len(s["trials"]), s["concurrency"]["solo_and_concurrent_agree"]))
    log("wrote %s" % os.path.join(a.out, a.json))


if __name__ == "__main__":
    main()
