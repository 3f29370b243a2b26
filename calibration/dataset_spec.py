"""A second synthetic YOLO dataset, written as a spec (no numpy: any Python makes the same file).

train_data.py --dataset FILE writes its JPEGs and label files on the GPU machine and runs the
official code on it; onnxmem predicts the runs from the same file before they are measured
(calibration §27). Its mix differs from train_data.py's own on purpose: sizes from 333x500
to 1920x1080 (landscape, portrait, square), 2% of images without boxes, 8% dense (30 to 150
boxes), the rest geometric of mean 5; box sides log-uniform from 1.5% to 90% of the image.

    python3 calibration/dataset_spec.py --out calibration/results/train_data_v2/dataset.json
"""
import argparse
import json
import math
import os
import random

SIZES = [((640, 480), 25), ((480, 640), 10), ((640, 427), 10), ((800, 600), 10), ((1280, 720), 10),
         ((720, 1280), 5), ((500, 333), 5), ((1024, 1024), 5), ((333, 500), 5), ((1920, 1080), 5),
         ((612, 612), 5), ((640, 360), 5)]


def box_count(rng):
    u = rng.random()
    if u < 0.02:
        return 0
    if u < 0.10:
        return rng.randint(30, 150)
    n = 1
    while rng.random() > 1 / 5.0:
        n += 1
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--train", type=int, default=600)
    ap.add_argument("--val", type=int, default=200)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    sizes, weights = zip(*SIZES)
    out = {"seed": args.seed, "generator": "calibration/dataset_spec.py", "train": [], "val": []}
    for split, n in (("train", args.train), ("val", args.val)):
        for i in range(n):
            w, h = rng.choices(sizes, weights=weights)[0]
            lines = []
            for _ in range(box_count(rng)):
                bw = math.exp(rng.uniform(math.log(0.015), math.log(0.9)))
                bh = min(max(bw * math.exp(rng.gauss(0, 0.5)), 0.01), 0.95)
                cx = rng.uniform(bw / 2, 1 - bw / 2)
                cy = rng.uniform(bh / 2, 1 - bh / 2)
                lines.append(f"{rng.randrange(80)} {cx:.6f} {cy:.6f} {bw:.6f} {bh:.6f}")
            out[split].append({"file": f"{split}_{i:05d}.jpg", "w": w, "h": h, "boxes": len(lines), "labels": lines})
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
