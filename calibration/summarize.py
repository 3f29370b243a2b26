"""Turns the JSON results of saved_tensors.py, allocator.py and conv_workspace.py into a
readable Markdown summary (no torch needed; runs anywhere).

    python3 calibration/summarize.py [--dir calibration/results] > calibration/results/summary.md

Notation in the event sequences: `+X` alloc, `-X` free (requested sizes), `#k` pairs an alloc
with its free (negative k: a block allocated before the phase, e.g. a saved tensor),
`|B` the op's backward begins (output grads ready), `|E` the gradient reached an input
producer (the op's backward is over for that input). Sizes are written relative to
IN (first input bytes) and OUT (first output bytes) where they are multiples of them, W is the
fp32 conv weight (W16 its fp16 autocast copy); when IN == OUT the name IN is used.
"""
import argparse
import json
import os
from fractions import Fraction


def sym_factory(IN, OUT, extra=()):
    names = [("IN", IN), ("OUT", OUT)] + list(extra)

    def sym(s):
        if s in (4,):
            return "4B"
        for nm, v in names:
            if v and s == v:
                return nm
        for nm, v in names:
            if v and s > 0 and s % v == 0 and s // v <= 16:
                return "%d*%s" % (s // v, nm)
        for nm, v in names[:2]:
            if v and s > 0:
                f = Fraction(s, v)
                if f.denominator in (2, 4, 8) and f < 16:
                    return "%s*%s" % (f, nm)
        return "%dB" % s
    return sym


def fmt_events(ev, sym):
    out = []
    for a, s, i in ev:
        if a == "m":
            out.append("|B" if s == 37 else "|E")
        else:
            out.append("%s%s#%d" % ("+" if a == "a" else "-", sym(s), i))
    return " ".join(out)


def saved_section(d):
    L = ["## saved_tensors.py (N=8, C=64, H=W=80; warm run; cold run identical unless noted)", ""]
    L.append("| case | saved per autograd node (attr: label shape dtype) | fwd +alloc | fwd peak | kept after del out | bwd peak over pre-bwd |")
    L.append("|---|---|---|---|---|---|")
    seqs = []
    for c in d["cases"]:
        if "error" in c:
            L.append("| %s | ERROR %s | | | | |" % (c["name"], c["error"]))
            continue
        w = c["warm"]
        IN = w["inputs"][0]["nbytes"]
        OUT = w["outputs"][0]["nbytes"]
        extra = []
        pg = w.get("param_grads", {})
        wk = "weight" if "weight" in pg else ("conv.weight" if "conv.weight" in pg else None)
        if wk and pg[wk]["nbytes"] >= 4096:  # conv weights (BN weights are tiny)
            extra.append(("W", pg[wk]["nbytes"]))
            if c["amp"]:
                extra.append(("W16", pg[wk]["nbytes"] // 2))
        sym = sym_factory(IN, OUT, extra)
        sv = []
        for n in w["saved_nodes"]:
            ts = ", ".join("%s: %s %s %s" % (t["attr"].replace("_saved_", ""), t["label"],
                                              "x".join(map(str, t["shape"])) or "scalar", t["dtype"])
                           for t in n["tensors"])
            sv.append("**%s**(%s)" % (n["node"], ts or "-"))
        L.append("| %s | %s | %s | %s | %s | %s |" % (
            c["name"], "; ".join(sv), sym(w["after_fwd"]) if w["after_fwd"] else 0,
            sym(w["peak_fwd"]) if w["peak_fwd"] else 0,
            sym(w["after_del_out"]) if w["after_del_out"] else 0, sym(w["peak_bwd_rel_pre"])))
        cold = c["cold"]
        note = "" if (cold["fwd_events"] == w["fwd_events"] and cold["bwd_events"] == w["bwd_events"]) else " (cold run differs)"
        seqs.append("* **%s** — %s. IN=%d OUT=%d%s\n  * fwd: `%s`\n  * bwd: `%s`" % (
            c["name"], c["desc"], IN, OUT, note, fmt_events(w["fwd_events"], sym) or "(nothing)",
            fmt_events(w["bwd_events"], sym)))
    L += ["", "### Allocation sequences (requested sizes)", "",
          "bwd always starts with `+4B` (loss grad) and `+OUT` (the output grad made by the sink);"
          " the trailing `-IN#k` after `|E` is the input grad being dropped by the producer.", ""]
    L += seqs
    return L


def alloc_section(d):
    L = ["## allocator.py", "", "| request | allocated | reserved | requested |", "|---|---|---|---|"]
    for r in d["sizes"]:
        L.append("| %d | %d | %d | %d |" % (r["request"], r["allocated"], r["reserved"], r["requested"]))
    L += ["", "| first (freed) | second | allocated | reserved | same ptr |", "|---|---|---|---|---|"]
    for r in d["split_pairs"]:
        L.append("| %d | %d | %d | %d | %s |" % (r["first"], r["second"], r["after_second"]["allocated"],
                                                 r["after_second"]["reserved"], r["same_ptr"]))
    L += ["", "chain 12 MiB: %s" % [(x["request"], x["allocated"]) for x in d["split_chain_12MiB"]],
          "", "chain small: %s" % [(x["request"], x["allocated"]) for x in d["split_chain_small"]],
          "", "merge: %s" % json.dumps({k: d["merge"][k] for k in ("rel_ptrs", "d_reuses_merged_ab")}),
          "", "misc (allocated, reserved): %s" % json.dumps({k: (v["allocated"], v["reserved"]) for k, v in d["misc"].items()})]
    return L


def fit(ws, IN, OUT, W):
    best = None
    for a in range(0, 5):
        for b in range(0, 5):
            for c in range(0, 65):
                r = ws - a * IN - b * OUT - c * W
                if 0 <= r < 1024:
                    # prefer forms with the input once (IN=OUT for stride-1 convs, IN=2*OUT
                    # for the 64->128 s2 conv, so byte counts alone cannot tell them apart)
                    cand = (a != 1, b, c, a, r)
                    if best is None or cand < best:
                        best = cand
    if best is None:  # pure multiple of W/2 (split-K partial buffers), up to 512 W
        for h in range(1, 1025):
            r = ws - h * W // 2
            if 0 <= r < 1024:
                return "%s*W+%d" % (("%g" % (h / 2.0)), r)
        return None
    _, b, c, a, r = best
    parts = []
    for k, nm in ((a, "IN"), (b, "OUT"), (c, "W")):
        if k:
            parts.append(nm if k == 1 else "%d*%s" % (k, nm))
    parts.append(str(r))
    return "+".join(parts)


def split_bwd(row):
    """Return (dgrad_ws, wgrad_ws, other_transients) from the backward event list."""
    ev = row["bwd_events"]
    i0 = max((i for i, e in enumerate(ev) if e[0] == "m" and e[1] == 37), default=-1) + 1
    i1 = next((i for i, e in enumerate(ev) if i >= i0 and e[0] == "m" and e[1] == 41), len(ev))
    seg = ev[i0:i1]
    freed = {i for a, s, i in seg if a == "f"}
    gw_pos = next((k for k, (a, s, i) in enumerate(seg) if a == "a" and s == row["w_bytes"]), None)
    d, w, other = [], [], []
    for k, (a, s, i) in enumerate(seg):
        if a != "a" or i not in freed:
            continue
        if s in (row["in_bytes"], row["w_bytes"]) or (row["b_bytes"] and s == row["b_bytes"]):
            other.append(s)
        elif gw_pos is not None and k > gw_pos:
            w.append(s)
        else:
            d.append(s)
    return d, w, other


def conv_section(d):
    L = ["## conv_workspace.py (cudnn.benchmark=False; warm run; no cold/warm difference seen)", "",
         "ws columns: workspace sizes (requested bytes) with the smallest fit a*IN+b*OUT+c*W+r (r<1024);"
         " IN/OUT/W in the compute dtype. copy = contiguous copy of a channel-slice input.", "",
         "| conv | N | H | dtype | layout | IN | OUT | W | fwd ws | bwd dgrad ws | bwd wgrad ws | other transients fwd / bwd | fwd peak | bwd peak |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in d["rows"]:
        if "error" in row:
            L.append("| %s | ERROR %s |" % (row["config"], row["error"]))
            continue
        c = row["config"]
        IN, OUT, W = row["in_bytes"], row["out_bytes"], row["w_bytes"]

        def f(lst):
            return ", ".join("%d (%s)" % (s, fit(s, IN, OUT, W) or "%.3g IN" % (s / IN)) for s in lst) or "-"
        fws = [s for s in row["fwd_transients"] if s not in (IN, row["x_bytes_given"]) and not (row["b_bytes"] and s == row["b_bytes"])]
        fother = [s for s in row["fwd_transients"] if s not in fws]
        dws, wws, bother = split_bwd(row)
        lay = c["layout"] + ("" if c["in_grad"] else ",no-dx") + (",x fp32" if c.get("x_dtype") == "float32" and c["dtype"] != "fp32" else "")
        L.append("| %s | %d | %d | %s | %s | %d | %d | %d | %s | %s | %s | %s / %s | %d | %d |" % (
            c["name"], c["n"], c["h"], "fp16" if c["dtype"] != "fp32" else "fp32", lay, IN, OUT, W,
            f(fws), f(dws), f(wws), fother or "-", bother or "-", row["fwd_peak"], row["bwd_peak"]))
    return L


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    a = ap.parse_args()
    L = ["# Calibration summary (generated by calibration/summarize.py)", ""]
    p = os.path.join(a.dir, "saved_tensors.json")
    if os.path.exists(p):
        d = json.load(open(p))
        L += ["env: %s" % json.dumps(d["env"]), ""]
        L += saved_section(d) + [""]
    p = os.path.join(a.dir, "allocator.json")
    if os.path.exists(p):
        L += alloc_section(json.load(open(p))) + [""]
    p = os.path.join(a.dir, "conv_workspace.json")
    if os.path.exists(p):
        L += conv_section(json.load(open(p))) + [""]
    print("\n".join(L))


if __name__ == "__main__":
    main()
