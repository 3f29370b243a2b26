"""Counting rules of PyTorch's CUDA caching allocator (what memory_allocated and
max_memory_allocated count).

What it checks:
1. size rounding / pools: for a list of request sizes, on a fresh (empty_cache'd)
   allocator, allocate one uint8 tensor of that many bytes and record the deltas of
   memory_allocated, memory_reserved and memory_stats()['requested_bytes.all.current'].
2. block splitting: allocate 12 MiB, free, then allocate 11.5 MiB / 10.5 MiB / 11 MiB+1 /
   11 MiB / 10 MiB+1 (each pair isolated, and also as one chain where each request follows
   the free of the previous): is the whole 12 MiB block counted (no split when the
   leftover is <= 1 MiB)? Same in the small pool (1 MiB block, free, 600 KiB, ...).
3. merging: blocks of 4, 4, 6 MiB in one 20 MiB segment; free the two adjacent 4 MiB ones
   and allocate 7 MiB: does it reuse the merged space (same address, no new segment)?
4. a few more: a >=10 MiB request served from a cached 20 MiB segment; small requests
   never taking large-pool blocks.

Rerun on a GPU machine:  python3 calibration/allocator.py --out DIR  (writes DIR/allocator.json)
"""
import argparse
import json
import os
import sys

import torch

DEV = torch.device("cuda:0")
MiB = 2 ** 20
KiB = 2 ** 10


def st():
    torch.cuda.synchronize(DEV)
    s = torch.cuda.memory_stats(DEV)
    return {
        "allocated": s.get("allocated_bytes.all.current", 0),
        "reserved": s.get("reserved_bytes.all.current", 0),
        "requested": s.get("requested_bytes.all.current", 0),
        "inactive_split": s.get("inactive_split_bytes.all.current", 0),
        "segments": s.get("segment.all.current", 0),
        "small_alloc": s.get("allocated_bytes.small_pool.current", 0),
        "large_alloc": s.get("allocated_bytes.large_pool.current", 0),
        "small_reserved": s.get("reserved_bytes.small_pool.current", 0),
        "large_reserved": s.get("reserved_bytes.large_pool.current", 0),
    }


def diff(a, b):
    return {k: b[k] - a[k] for k in a}


def buf(n):
    return torch.empty(n, dtype=torch.uint8, device=DEV)


def sizes_test():
    sizes = [1, 511, 512, 513, 1048575, 1048576, 1048577, 2 * MiB, 5 * MiB,
             10 * MiB - 1, 10 * MiB, 10 * MiB + 1, 20 * MiB, 20 * MiB + 1, 25 * MiB + 123]
    rows = []
    for n in sizes:
        torch.cuda.empty_cache()
        b = st()
        t = buf(n)
        a = st()
        d = diff(b, a)
        d["request"] = n
        rows.append(d)
        del t
        torch.cuda.empty_cache()
        print("size %10d -> alloc %10d reserved %10d requested %10d" % (n, d["allocated"], d["reserved"], d["requested"]))
    return rows


def split_pair(first, second):
    torch.cuda.empty_cache()
    b = st()
    t = buf(first)
    p0 = t.data_ptr()
    s1 = diff(b, st())
    del t
    t = buf(second)
    s2 = diff(b, st())
    same = t.data_ptr() == p0
    del t
    torch.cuda.empty_cache()
    r = {"first": first, "second": second, "after_first": s1, "after_second": s2, "same_ptr": same,
         "leftover": s1["allocated"] - (-(-second // 512) * 512)}
    print("split %d then %d: allocated %d reserved %d inactive_split %d same_ptr %s" % (
        first, second, s2["allocated"], s2["reserved"], s2["inactive_split"], same))
    return r


def split_chain(first, seq):
    torch.cuda.empty_cache()
    b = st()
    t = buf(first)
    out = [{"request": first, **diff(b, st())}]
    for n in seq:
        del t
        t = buf(n)
        out.append({"request": n, **diff(b, st())})
    del t
    torch.cuda.empty_cache()
    print("chain", [(o["request"], o["allocated"]) for o in out])
    return out


def merge_test():
    torch.cuda.empty_cache()
    b = st()
    a = buf(4 * MiB)
    bb = buf(4 * MiB)
    c = buf(6 * MiB)  # leaves a 6 MiB free tail: only the merged A+B (8 MiB) fits 7 MiB
    pa, pb, pc = a.data_ptr(), bb.data_ptr(), c.data_ptr()
    s_abc = diff(b, st())
    del a, bb
    s_free = diff(b, st())
    d = buf(7 * MiB)
    pd = d.data_ptr()
    s_d = diff(b, st())
    e = buf(1 * MiB + 512)  # fits in what is left of the merged A+B (8 MiB - 7 MiB)?
    pe = e.data_ptr()
    s_e = diff(b, st())
    r = {"rel_ptrs": {"b": pb - pa, "c": pc - pa, "d": pd - pa, "e": pe - pa},
         "after_abc": s_abc, "after_free_ab": s_free, "after_d7MiB": s_d, "after_e1MiB512": s_e,
         "d_reuses_merged_ab": pd == pa and s_d["reserved"] == s_abc["reserved"]}
    del c, d, e
    torch.cuda.empty_cache()
    print("merge", r["rel_ptrs"], "d_reuses_merged_ab", r["d_reuses_merged_ab"])
    return r


def misc_tests():
    out = {}
    # >=10 MiB request served from a cached 20 MiB segment created by a 5 MiB request
    torch.cuda.empty_cache()
    b = st()
    t = buf(5 * MiB)
    del t
    t = buf(12 * MiB)
    out["12MiB_from_cached_20MiB_segment"] = diff(b, st())
    del t
    # 19.5 MiB request on the cached 20 MiB segment: unsplit -> counts 20 MiB?
    t = buf(19 * MiB + 512 * KiB)
    out["19.5MiB_from_cached_20MiB_segment"] = diff(b, st())
    del t
    # small request with only a cached large free block: does it take a new small segment?
    t = buf(600 * KiB)
    out["600KiB_with_cached_20MiB_large_block"] = diff(b, st())
    del t
    torch.cuda.empty_cache()
    # many small tensors: allocated is sum of 512-rounded sizes
    b = st()
    ts = [buf(100) for _ in range(10)]
    out["10x100B"] = diff(b, st())
    del ts
    torch.cuda.empty_cache()
    # fp32 scalar and a (3,) int64 tensor
    b = st()
    s = torch.zeros((), device=DEV)
    out["fp32_scalar"] = diff(b, st())
    del s
    torch.cuda.empty_cache()
    # 2 MiB segment exhaustion in the small pool: 4 x 600 KiB
    b = st()
    ts = [buf(600 * KiB) for _ in range(4)]
    out["4x600KiB"] = diff(b, st())
    del ts
    torch.cuda.empty_cache()
    print("misc", json.dumps({k: (v["allocated"], v["reserved"]) for k, v in out.items()}))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.backends.cudnn.benchmark = False
    torch.cuda.set_device(DEV)
    _t = torch.zeros(1, device=DEV)  # init context
    del _t
    torch.cuda.empty_cache()
    res = {"env": {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(DEV),
                   "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}}
    res["sizes"] = sizes_test()
    res["split_pairs"] = [
        split_pair(12 * MiB, 11 * MiB + 512 * KiB),
        split_pair(12 * MiB, 10 * MiB + 512 * KiB),
        split_pair(12 * MiB, 11 * MiB + 1),
        split_pair(12 * MiB, 11 * MiB),
        split_pair(12 * MiB, 11 * MiB - 512),
        split_pair(12 * MiB, 10 * MiB + 1),
        split_pair(1 * MiB, 600 * KiB),
        split_pair(1 * MiB, 1 * MiB - 512),
        split_pair(1 * MiB, 1 * MiB - 1024),
        split_pair(1 * MiB, 512),
    ]
    res["split_chain_12MiB"] = split_chain(12 * MiB, [11 * MiB + 512 * KiB, 10 * MiB + 512 * KiB, 11 * MiB + 1])
    res["split_chain_small"] = split_chain(1 * MiB, [600 * KiB, 1 * MiB - 512, 1000])
    res["merge"] = merge_test()
    res["misc"] = misc_tests()
    with open(os.path.join(a.out, "allocator.json"), "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", os.path.join(a.out, "allocator.json"))


if __name__ == "__main__":
    sys.exit(main())
