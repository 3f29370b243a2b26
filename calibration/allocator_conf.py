"""PYTORCH_CUDA_ALLOC_CONF options of PyTorch's CUDA caching allocator, measured.

What it checks:
1. parsing: a list of configuration strings, each given to
   torch.cuda.memory._set_allocator_settings in one process (the parser the
   environment variable goes through), and a few also as the environment
   variable of a fresh process: accepted, or the error raised.
2. replay: seeded random sequences of torch.empty(n, dtype=torch.uint8)
   allocations, frees and empty_cache calls, sizes crossing every boundary of
   the allocator (< 1 MiB, around 1 MiB, 1-10 MiB, around 10 MiB, > 10 MiB,
   above max_split_size, repeats of a few sizes, and 1-2.5 GiB for the
   roundup_power2_divisions list), each configuration in a fresh process with
   PYTORCH_CUDA_ALLOC_CONF set before torch initialises CUDA, some under
   torch.cuda.set_per_process_memory_fraction(f) with a small capacity (with
   --more, also the option per_process_memory_fraction), so that the
   out-of-memory path runs (torch.OutOfMemoryError is caught and recorded).
   A free of the newest tensor takes effect right after the next allocation
   that succeeds (the loop variable holds the tensor until then).
   After every operation it records memory_stats()'s allocated_bytes.all.current,
   reserved_bytes.all.current, requested_bytes.all.current,
   oversize_allocations.current, oversize_segments.current, whether the
   operation raised, and for an allocation its data_ptr.

The sequences and the records go to OUT/allocator_conf.json; Go's
allocator.TestDeviceConf replays each sequence through allocator.Allocator with
the parsed configuration and requires every counter after every step.

Rerun on a GPU machine:  python3 calibration/allocator_conf.py --out DIR   (about 30 s)
With --more, also the configurations and parser probes that were not measured
yet (MORE_RUNS, MORE_PROBES: large_segment_size_mb, per_process_memory_fraction,
max_non_split_rounding_mb on oversize requests, separator edge cases).
"""
import argparse
import concurrent.futures
import json
import os
import random
import subprocess
import sys
import time

MiB = 2 ** 20
KiB = 2 ** 10
GiB = 2 ** 30

# Configurations replayed: name, PYTORCH_CUDA_ALLOC_CONF (None: unset),
# capacity in bytes for set_per_process_memory_fraction (0: none), size mix.
RUNS = [
    ("default", None, 0, "base"),
    ("default-cap", None, 1 * GiB, "base"),
    ("msplit64", "max_split_size_mb:64", 0, "base"),
    ("msplit64-cap", "max_split_size_mb:64", 1 * GiB, "base"),
    ("msplit64-round40-cap", "max_split_size_mb:64,max_non_split_rounding_mb:40", 1 * GiB, "base"),
    ("msplit20-cap", "max_split_size_mb:20", 1 * GiB, "base"),
    ("expandable", "expandable_segments:True", 0, "base"),
    ("expandable-cap", "expandable_segments:True", 1 * GiB, "base"),
    ("expandable-msplit64-cap", "expandable_segments:True,max_split_size_mb:64", 1 * GiB, "base"),
    ("roundup4", "roundup_power2_divisions:4", 0, "base"),
    ("roundup-list", "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", 0, "huge"),
    ("gc06-cap", "garbage_collection_threshold:0.6", 1 * GiB, "base"),
    ("gc06-msplit64-cap", "garbage_collection_threshold:0.6,max_split_size_mb:64", 1 * GiB, "base"),
    ("gc06-expandable-cap", "garbage_collection_threshold:0.6,expandable_segments:True", 1 * GiB, "base"),
]
# With --more: configurations not measured yet (see calibration/README.md).
MORE_RUNS = [
    ("msplit64-oversize", "max_split_size_mb:64", 0, "oversize"),
    ("msplit64-round40-oversize", "max_split_size_mb:64,max_non_split_rounding_mb:40", 0, "oversize"),
    ("large40", "large_segment_size_mb:40", 0, "base"),
    ("large40-cap", "large_segment_size_mb:40", 1 * GiB, "base"),
    ("large40-msplit40-cap", "large_segment_size_mb:40,max_split_size_mb:40", 1 * GiB, "base"),
    ("large40-expandable-cap", "large_segment_size_mb:40,expandable_segments:True", 1 * GiB, "base"),
    # capacity from the option itself: int(f * total memory) (0.00715 of an H200 is about 1 GiB)
    ("fraction-conf", "per_process_memory_fraction:0.00715", -1, "base"),
    ("fraction-conf-gc06", "per_process_memory_fraction:0.00715,garbage_collection_threshold:0.6", -1, "base"),
]
SEEDS = [1, 2]
STEPS = 400

# Strings for the parser probe.
PROBES = [
    "", "max_split_size_mb:64", "max_split_size_mb:21", "max_split_size_mb:20",
    "max_split_size_mb:19", "max_split_size_mb:0", "max_split_size_mb:-1",
    "max_split_size_mb:64MB", "max_split_size_mb:abc", "max_split_size_mb: 64",
    "max_split_size_mb:64,", ",max_split_size_mb:64", "max_split_size_mb",
    "max_split_size_mb:", "max_split_size_mb:64,max_split_size_mb:128",
    "max_split_size_mb=64", "Max_split_size_mb:64", "max_split_size_mb:99999999999999999999",
    "max_split_size_mb:+64", "max_split_size_mb:6.5",
    "max_non_split_rounding_mb:40", "max_non_split_rounding_mb:20", "max_non_split_rounding_mb:19",
    "expandable_segments:True", "expandable_segments:False", "expandable_segments:true",
    "expandable_segments:1", "expandable_segments:TRUE", "expandable_segments",
    "roundup_power2_divisions:4", "roundup_power2_divisions:3", "roundup_power2_divisions:0",
    "roundup_power2_divisions:1", "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
    "roundup_power2_divisions:[1:4]", "roundup_power2_divisions:[>:8]",
    "roundup_power2_divisions:[3:4]", "roundup_power2_divisions:[256:3]",
    "roundup_power2_divisions:[256:0]", "roundup_power2_divisions:[256:1,512:2",
    "roundup_power2_divisions:[256:1;512:2]", "roundup_power2_divisions:[]",
    "roundup_power2_divisions:[65536:2]", "roundup_power2_divisions:[256:1,>:4,1024:2]",
    "garbage_collection_threshold:0.6", "garbage_collection_threshold:1.0",
    "garbage_collection_threshold:0", "garbage_collection_threshold:.5",
    "garbage_collection_threshold:6e-1", "garbage_collection_threshold:0.6x",
    "garbage_collection_threshold:nan", "garbage_collection_threshold:abc",
    "backend:native", "backend:cudaMallocAsync", "backend:foo",
    "release_lock_on_cudamalloc:True", "release_lock_on_cudamalloc:yes",
    "pinned_use_cuda_host_register:True", "pinned_use_host_register:True",
    "pinned_num_register_threads:8", "pinned_num_register_threads:3",
    "pinned_num_register_threads:1024", "pinned_use_background_threads:True",
    "pinned_reserve_segment_size_mb:64", "graph_capture_record_stream_reuse:True",
    "per_process_memory_fraction:0.5", "per_process_memory_fraction:1.5",
    "large_segment_size_mb:40", "expandable_segments_handle_type:1",
    "foo:1", "foo", "max_split_size_mb:64;expandable_segments:True",
    "max_split_size_mb:64 , expandable_segments:True", "max_split_size_mb::64",
    "max_split_size_mb:64:128", "expandable_segments:True,,max_split_size_mb:64",
]
MORE_PROBES = [
    "large_segment_size_mb:10", "large_segment_size_mb:11", "large_segment_size_mb:40,max_split_size_mb:20",
    "max_split_size_mb:20,large_segment_size_mb:40", "large_segment_size_mb:40,max_split_size_mb:40",
    "large_segment_size_mb:40,max_non_split_rounding_mb:30", "max_split_size_mb:64,large_segment_size_mb",
    "per_process_memory_fraction:0", "per_process_memory_fraction:1", "per_process_memory_fraction:-0.1",
    "per_process_memory_fraction:1e-3", "pinned_reserve_segment_size_mb:0", "garbage_collection_threshold:1e-310",
    "garbage_collection_threshold:0x0.8", "garbage_collection_threshold:inf", "max_split_size_mb:-20",
    "max_split_size_mb:18446744073709551615", "max_split_size_mb,64", "max_split_size_mb[64",
    "expandable_segments:True:max_split_size_mb:64", "roundup_power2_divisions:[256:1,]",
    "roundup_power2_divisions:[,256:1]", "roundup_power2_divisions:[256]1]", "roundup_power2_divisions:[256:1]]",
    "roundup_power2_divisions:[256:1],roundup_power2_divisions:[>:2]", "release_lock_on_hipmalloc:True",
    "pinned_use_hip_host_register:False", "foo:[1,2]", "backend:native:", "expandable_segments:True,",
    "expandable_segments:True,,", "max_non_split_rounding_mb:-1", "large_segment_size_mb:99999999999",
]
ENV_PROBES = [
    "foo:1", "max_split_size_mb:19", "max_split_size_mb:20", "expandable_segments:true",
    "max_split_size_mb:64MB", "backend:cudaMallocAsync", "garbage_collection_threshold:0.6",
    "per_process_memory_fraction:0.5",
]


def sizes_for(mix, rng):
    """A request size in bytes."""
    r = rng.randrange(100)
    if mix == "huge" and r < 8:
        return GiB + rng.randrange(3 * GiB // 2)
    if mix == "oversize" and r < 70:
        return rng.choice([64, 70, 90, 110, 130]) * MiB + rng.randrange(-4 * MiB, 40 * MiB)
    if r < 12:
        return 1 + rng.randrange(8 * KiB)
    if r < 24:
        return MiB - 4 * KiB + rng.randrange(8 * KiB)
    if r < 40:
        return MiB + rng.randrange(9 * MiB)
    if r < 52:
        return 7 * MiB + rng.randrange(6 * MiB)
    if r < 66:
        return 10 * MiB + rng.randrange(54 * MiB)
    if r < 78:
        return 60 * MiB + rng.randrange(240 * MiB)
    return rng.choice([512, 600 * KiB, 4 * MiB, 8 * MiB, 12 * MiB, 20 * MiB, 64 * MiB, 70 * MiB, 100 * MiB])


def make_ops(seed, mix, capacity):
    """A sequence of ["m", n], ["f", step of the allocation], ["e"]."""
    rng = random.Random(seed * 1000 + len(mix) + (capacity != 0))
    ops, live, live_bytes = [], [], {}
    budget = 8 * GiB if mix == "huge" else 3 * GiB
    for step in range(STEPS):
        p = rng.randrange(100)
        total = sum(live_bytes.values())
        if (p < 56 or not live) and total < budget:
            n = sizes_for(mix, rng)
            ops.append(["m", n])
            live.append(step)
            live_bytes[step] = n
        elif p < 97 and live:
            k = live.pop(rng.randrange(len(live)))
            del live_bytes[k]
            ops.append(["f", k])
        else:
            ops.append(["e"])
    return ops


def child(args):
    """Replay one sequence in this (fresh) process; print one JSON line."""
    import torch
    spec = json.loads(args.child)
    dev = torch.device("cuda:0")
    torch.cuda.init()
    props = torch.cuda.get_device_properties(dev)
    free_b, total_b = torch.cuda.mem_get_info(dev)
    out = {"name": spec["name"], "seed": spec["seed"], "conf": spec["conf"],
           "torch": torch.__version__, "git": torch.version.git_version,
           "total_memory": props.total_memory, "mem_get_info_total": total_b}
    if spec["capacity"] < 0:  # per_process_memory_fraction in the configuration
        frac = float(spec["conf"].split("per_process_memory_fraction:")[1].split(",")[0])
        out["fraction"] = frac
        out["capacity"] = int(frac * props.total_memory)
    elif spec["capacity"]:
        frac = spec["capacity"] / props.total_memory
        torch.cuda.set_per_process_memory_fraction(frac, dev)
        out["fraction"] = frac
        out["capacity"] = int(frac * props.total_memory)
    else:
        out["capacity"] = 0
    s0 = torch.cuda.memory_stats(dev)
    out["max_split_size"] = s0.get("max_split_size")
    out["initial"] = [s0.get("allocated_bytes.all.current", 0), s0.get("reserved_bytes.all.current", 0)]
    out["backend"] = torch.cuda.get_allocator_backend()
    tensors = {}
    rec = []
    errors = []
    for i, op in enumerate(spec["ops"]):
        raised, ptr = 0, 0
        if op[0] == "m":
            try:
                # t holds the newest tensor until the next allocation that
                # succeeds rebinds it: freeing that tensor (dropping it from
                # tensors) releases its block only then, right after the new
                # block is allocated. The Go replay (TestDeviceConf) does the
                # same.
                t = torch.empty(op[1], dtype=torch.uint8, device=dev)
                tensors[i] = t
                ptr = t.data_ptr()
            except torch.OutOfMemoryError:
                raised = 1
            except RuntimeError as e:  # anything else: record it
                raised = 2
                errors.append([i, str(e).splitlines()[0][:300]])
        elif op[0] == "f":
            tensors.pop(op[1], None)
        else:
            torch.cuda.empty_cache()
        s = torch.cuda.memory_stats(dev)
        rec.append([s.get("allocated_bytes.all.current", 0), s.get("reserved_bytes.all.current", 0),
                    s.get("requested_bytes.all.current", 0), raised, ptr,
                    s.get("oversize_allocations.current", 0), s.get("oversize_segments.current", 0)])
    s = torch.cuda.memory_stats(dev)
    out["num_ooms"] = s.get("num_ooms", 0)
    out["num_alloc_retries"] = s.get("num_alloc_retries", 0)
    out["errors"] = errors
    out["ops"] = spec["ops"]
    out["record"] = rec
    print(json.dumps(out))


def probe_parse(probes):
    """Each probe string through _set_allocator_settings, in this process."""
    import torch
    torch.cuda.init()
    res = []
    for s in probes:
        try:
            torch.cuda.memory._set_allocator_settings(s)
            res.append([s, "ok", ""])
        except Exception as e:  # noqa: BLE001
            res.append([s, type(e).__name__, str(e).splitlines()[0][:300]])
    torch.cuda.memory._set_allocator_settings("")
    print(json.dumps(res))


def probe_env(s):
    env = dict(os.environ)
    env.pop("PYTORCH_ALLOC_CONF", None)
    env["PYTORCH_CUDA_ALLOC_CONF"] = s
    code = ("import torch,json,warnings\n"
            "warnings.simplefilter('always')\n"
            "try:\n"
            "  t=torch.empty(1,device='cuda'); r=['ok', torch.cuda.get_allocator_backend()]\n"
            "except Exception as e:\n"
            "  r=[type(e).__name__, str(e).splitlines()[0][:300]]\n"
            "print(json.dumps(r))\n")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else json.dumps(["crash", p.stderr[-300:]])
    r = json.loads(last)
    warn = [l for l in p.stderr.splitlines() if "arn" in l][:3]
    return [s] + r + [" | ".join(warn)[:300], p.returncode]


def run_child(spec):
    env = dict(os.environ)
    env.pop("PYTORCH_ALLOC_CONF", None)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if spec["conf"] is not None:
        env["PYTORCH_CUDA_ALLOC_CONF"] = spec["conf"]
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
                       env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return {"name": spec["name"], "seed": spec["seed"], "conf": spec["conf"], "crash": p.stderr[-2000:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--child")
    ap.add_argument("--probe", action="store_true")
    ap.add_argument("--more", action="store_true", help="also the configurations and probes not measured yet")
    ap.add_argument("-j", type=int, default=8)
    args = ap.parse_args()
    if args.child:
        return child(args)
    if args.probe:
        return probe_parse(PROBES + (MORE_PROBES if args.more else []))
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    specs = [{"name": n, "seed": s, "conf": c, "capacity": cap, "ops": make_ops(s, mix, cap)}
             for (n, c, cap, mix) in RUNS + (MORE_RUNS if args.more else []) for s in SEEDS]
    with concurrent.futures.ThreadPoolExecutor(args.j) as ex:
        fut_parse = ex.submit(lambda: subprocess.run([sys.executable, os.path.abspath(__file__), "--probe"] + (["--more"] if args.more else []),
                                                     capture_output=True, text=True, timeout=300))
        fut_env = [ex.submit(probe_env, s) for s in ENV_PROBES]
        runs = list(ex.map(run_child, specs))
        p = fut_parse.result()
        parse = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else [["crash", p.stderr[-2000:]]]
        env_res = [f.result() for f in fut_env]
    for r in runs:
        if "crash" in r:
            print("CRASH", r["name"], r["seed"], r["crash"][-500:])
            continue
        rec = r["record"]
        ooms = sum(1 for x in rec if x[3] == 1)
        others = sum(1 for x in rec if x[3] == 2)
        print("%-26s seed %d  conf %-55s cap %11d  steps %d  ooms %3d  other errors %d  max reserved %d  retries %d" % (
            r["name"], r["seed"], r["conf"], r["capacity"], len(rec), ooms, others,
            max(x[1] for x in rec), r["num_alloc_retries"]))
        for e in r["errors"][:3]:
            print("   error at step", e[0], e[1])
    for x in parse:
        print("parse", json.dumps(x))
    for x in env_res:
        print("env", json.dumps(x))
    res = {"env": {"torch": runs[0].get("torch"), "git": runs[0].get("git"),
                   "total_memory": runs[0].get("total_memory")},
           "columns": ["allocated", "reserved", "requested", "raised (1 OOM, 2 other)", "data_ptr",
                       "oversize_allocations", "oversize_segments"],
           "parse": parse, "env_parse": env_res, "runs": runs}
    path = os.path.join(args.out, "allocator_conf.json")
    with open(path, "w") as f:
        json.dump(res, f, separators=(",", ":"))
    print("wrote", path, "in %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    sys.exit(main())
