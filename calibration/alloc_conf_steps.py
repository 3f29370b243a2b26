"""YOLOv9 model steps under PYTORCH_CUDA_ALLOC_CONF options, each in a fresh process.

The ground truth's scenarios may carry "alloc_conf" (../shared/groundtruth/README.md,
"Allocator options"): the step ran with that PYTORCH_CUDA_ALLOC_CONF in the environment.
onnxmem simulates the options from CUDACachingAllocator.cpp, and allocator_conf.py checked
them on sequences of plain allocations; this script checks them on whole model steps.

Each scenario is yolov9_segments.py's model step (its modules and its scenario():
empty_cache, x = randn(B, 3, S, S), a warm-up step, then the measured step with reset
peaks), run by `yolov9_segments.py --fresh` in a process of its own whose environment holds
the configuration, so that the allocator reads it when CUDA starts, as PyTorch does. The
results are yolov9_segments.py's, with "alloc_conf" added to each scenario, and the same
scenarios as predict lines (built-in models, "measured" beside them, "alloc_conf" left out
for the default allocator) in alloc_conf_steps.jsonl, which docs/accuracy.md reads.

Rerun on a GPU machine, from the repository root (results/alloc_conf_steps.json and .jsonl):
    python3 calibration/alloc_conf_steps.py --out calibration/results
Only the .jsonl again, from the .json (no GPU):
    python3 calibration/alloc_conf_steps.py --out calibration/results --jsonl-only
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# The first, empty, is the default allocator: the control.
CONFS = [
    "",
    "expandable_segments:True",
    "max_split_size_mb:128",
    "max_split_size_mb:64,roundup_power2_divisions:4",
]

SCENARIOS = ",".join([
    "yolov9-s:8:640:amp:0:",
    "yolov9-s:16:640:fp32:2:",
    "yolov9-c:8:640:amp:2:",
    "yolov9-c:4:640:fp32:0:",
    "yolov9-t:32:640:amp:0:",
])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="calibration/results")
    ap.add_argument("--json", default="alloc_conf_steps.json")
    ap.add_argument("--confs", default=";".join(CONFS), help="configurations, separated by ';'")
    ap.add_argument("--scenarios", default=SCENARIOS, help="yolov9_segments.py's cfg:batch:img:prec:k:trace, comma-separated")
    ap.add_argument("--jsonl-only", action="store_true", help="write the .jsonl from the .json, measuring nothing")
    a = ap.parse_args()
    if a.jsonl_only:
        write_jsonl(a.out, a.json)
        return
    os.makedirs(a.out, exist_ok=True)
    out = None
    for conf in a.confs.split(";"):
        env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        tmp = "alloc-conf-tmp.json"
        cmd = [sys.executable, os.path.join(HERE, "yolov9_segments.py"), "--out", a.out, "--fresh",
               "--json", tmp, "--scenarios", a.scenarios]
        print("PYTORCH_CUDA_ALLOC_CONF=%s" % conf, flush=True)
        print(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout, end="", flush=True)
        path = os.path.join(a.out, tmp)
        res = json.load(open(path))
        os.remove(path)
        for s in res["scenarios"]:
            s["alloc_conf"] = conf
            s.pop("groundtruth", None)
        if out is None:
            out = {k: v for k, v in res.items() if k != "scenarios"}
            out["scenarios"] = []
        out["scenarios"] += res["scenarios"]
    with open(os.path.join(a.out, a.json), "w") as fh:
        json.dump(out, fh, indent=1)
    write_jsonl(a.out, a.json)


def write_jsonl(out, name):
    """Writes the scenarios of out/name as predict lines, to the same name with .jsonl."""
    res = json.load(open(os.path.join(out, name)))
    with open(os.path.join(out, os.path.splitext(name)[0] + ".jsonl"), "w") as fh:
        for s in res["scenarios"]:
            line = {"kind": "model_step", "cfg": s["cfg"], "model": None, "batch": s["batch"], "img": s["img"],
                    "amp": s["amp"], "segments": s["segments"]}
            if s["alloc_conf"]:
                line["alloc_conf"] = s["alloc_conf"]
            line["measured"] = s["result"]
            fh.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
