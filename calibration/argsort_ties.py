"""numpy's argsort on this machine, to learn the order it gives ties (issue 33's validation batches).

LoadImagesAndLabels(rect=True) sorts the validation images by aspect ratio h/w with
ar.argsort() (numpy's default kind, quicksort, which numpy runs as its SIMD sort where the CPU
has one): images of one aspect ratio, common in real datasets, come out in an order that is
neither their path order nor random, and which batch holds which image (and so its box counts)
follows from it. This records, with numpy's version and the CPU features it dispatches on:
the permutation of the validation images of calibration/argsort_inputs.json's datasets (their
widths and heights, as train_data.py's runs saw them), and of seeded arrays of few distinct
values at sizes around the SIMD sort's thresholds.

    python3 calibration/argsort_ties.py > calibration/results/argsort_ties.json
"""
import json
import os
import platform

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    out = {"numpy": np.__version__, "machine": platform.machine(), "processor": platform.processor()}
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as feats
        out["cpu_features"] = sorted(k for k, v in feats.items() if v)
    except ImportError:
        pass
    try:
        with open("/proc/cpuinfo") as f:
            out["cpu"] = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    with open(os.path.join(HERE, "argsort_inputs.json")) as f:
        inputs = json.load(f)
    out["datasets"] = {}
    for name, wh in inputs.items():
        s = np.array(wh)  # int64 (w, h), as self.shapes
        ar = s[:, 1] / s[:, 0]
        out["datasets"][name] = ar.argsort().tolist()
    rng = np.random.default_rng(7)
    out["arrays"] = []
    for n in (2, 3, 8, 9, 16, 17, 31, 64, 65, 100, 128, 129, 200, 256, 257, 300, 511, 640, 1000, 1025, 5000, 20000):
        for k in (2, 5):
            v = (rng.integers(0, k, n) / 3.0).astype(np.float64)
            out["arrays"].append({"n": n, "values": v.tolist(), "argsort": v.argsort().tolist()})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
