"""Per-op autograd saving rules and allocation sequences on CUDA.

What it checks, for each op of a YOLOv9-like network (N=8, C=64, H=W=80, fp32;
some cases also under torch.autocast('cuda', torch.float16)):

* saved tensors: every tensor autograd packs (torch.autograd.graph.saved_tensors_hooks),
  with shape, dtype, nbytes, storage nbytes and a label telling whether its storage is the
  op's input ("in0", "in1"...), output ("out0"...), a parameter/buffer ("p:weight"), an
  intermediate submodule output ("mod:<name>") or a fresh tensor ("new");
  plus, per autograd node, the named `_saved_*` attributes (e.g. ConvolutionBackward0
  _saved_input / _saved_weight);
* memory_allocated deltas (relative to the moment before forward): after forward with the
  output alive; after `del` of the output (what the graph keeps alive); after backward;
  peak (max_memory_allocated) during forward and during backward;
* the allocator event sequence (action alloc / free_completed, requested size) of forward
  and of backward, from torch.cuda.memory._record_memory_history + _snapshot().

Realism: inputs are produced by a custom autograd Function `Src` (a view of a leaf whose
backward drops the gradient), so the op's input is a non-leaf like in a real network and
no AccumulateGrad copy pollutes the trace; the output is consumed by a `Sink` Function that
returns a scalar and whose backward allocates the output gradient (torch.ones), so the
incoming gradient is owned by the autograd engine and freed as in training. Marker
allocations of 37 bytes (op backward begins: incoming grads ready) and 41 bytes (gradient
reached Src, i.e. the op's backward is over) delimit the op's own backward in the trace.
Each case is run twice (cold = first call, warm = second); both are recorded.

Rerun on a GPU machine:  python3 calibration/saved_tensors.py --out DIR
(writes DIR/saved_tensors.json).  Settings: cudnn.benchmark=False, cuda:0, empty_cache
before each case.
"""
import argparse
import json
import os
import sys
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

from memtrace import MARK_BWD_BEGIN, MARK_BWD_END, Src, compact, mark, trace_entries, trace_mark, trace_reset  # noqa: E402,F401

DEV = torch.device("cuda:0")


# ----------------------------------------------------------------------------- tracing




def summarize_events(ev):
    allocs = {i: s for a, s, i in ev if a == "a"}
    freed = {i for a, s, i in ev if a == "f"}
    return {
        "transient": [allocs[i] for i in allocs if i in freed],
        "persist": [allocs[i] for i in allocs if i not in freed],
        "freed_preexisting": [s for a, s, i in ev if a == "f" and i < 0],
    }




# ------------------------------------------------------------------ source / sink nodes


class Sink(torch.autograd.Function):
    """Consumes outputs, returns a scalar; backward allocates ones as output grads."""

    @staticmethod
    def forward(ctx, *outs):
        ctx.meta = [(o.shape, o.dtype) for o in outs]
        return torch.zeros((), device=DEV)

    @staticmethod
    def backward(ctx, g):
        grads = tuple(torch.ones(s, dtype=d, device=DEV) for s, d in ctx.meta)
        mark(MARK_BWD_BEGIN)
        return grads


# ----------------------------------------------------------------------------- helpers
def sptr(t):
    return t.untyped_storage().data_ptr()


def alloc():
    torch.cuda.synchronize(DEV)
    return torch.cuda.memory_allocated(DEV)


def peak():
    torch.cuda.synchronize(DEV)
    return torch.cuda.max_memory_allocated(DEV)


def tinfo(t):
    return {
        "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
        "nbytes": t.numel() * t.element_size(),
        "storage_nbytes": t.untyped_storage().nbytes(),
        "contiguous": t.is_contiguous(),
    }


def walk_graph(roots, stop_names=("SrcBackward",)):
    seen, order, stack = set(), [], [r for r in roots if r is not None]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        order.append(n)
        if type(n).__name__ in stop_names:
            continue
        for nxt, _ in n.next_functions:
            if nxt is not None:
                stack.append(nxt)
    return order


def node_saved(nodes, label):
    res = []
    for n in nodes:
        name = type(n).__name__
        if name in ("SrcBackward", "AccumulateGrad"):
            continue
        item = {"node": name, "tensors": [], "other": []}
        for a in sorted(dir(n)):
            if not a.startswith("_saved_"):
                continue
            try:
                v = getattr(n, a)
            except Exception as e:  # noqa
                item["other"].append([a, "ERR " + str(e)[:80]])
                continue
            vals = v if isinstance(v, (list, tuple)) else [v]
            if any(isinstance(x, torch.Tensor) for x in vals):
                for k, x in enumerate(vals):
                    if isinstance(x, torch.Tensor):
                        d = tinfo(x)
                        d["attr"] = a if len(vals) == 1 else "%s[%d]" % (a, k)
                        d["label"] = label(sptr(x))
                        item["tensors"].append(d)
            else:
                r = repr(v)
                item["other"].append([a, r if len(r) < 60 else r[:57] + "..."])
        res.append(item)
    return res


# ------------------------------------------------------------------------------- cases
N, C, H = 8, 64, 80


def leaf(c=C, h=H, n=N, dtype=torch.float32, w=None):
    return torch.randn(n, c, h, w or h, device=DEV, dtype=dtype).requires_grad_()


class YConv(nn.Module):
    """YOLOv9 models/common.py Conv: act(bn(conv(x))), bias-free conv, BN, SiLU."""

    def __init__(self, c1, c2, k=1, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=0.001, momentum=0.03)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


def cases():
    """name -> (description, amp, make) ; make() -> (leaves, module or None, fn(*xs))."""
    L = []

    def add(name, desc, make, amp=False):
        L.append((name, desc, amp, make))

    def mod_case(m, shapes_dtype=((C, H, torch.float32),)):
        def make():
            mm = m().to(DEV).train()
            leaves = [leaf(c, h, dtype=dt) for c, h, dt in shapes_dtype]
            return leaves, mm, lambda *xs: mm(*xs)
        return make

    def fn_case(f, shapes_dtype=((C, H, torch.float32),)):
        def make():
            leaves = [leaf(c, h, dtype=dt) for c, h, dt in shapes_dtype]
            return leaves, None, f
        return make

    add("conv3x3_s1", "Conv2d(64,64,3,1,1,bias=False)", mod_case(lambda: nn.Conv2d(64, 64, 3, 1, 1, bias=False)))
    add("conv3x3_s2", "Conv2d(64,128,3,2,1,bias=False)", mod_case(lambda: nn.Conv2d(64, 128, 3, 2, 1, bias=False)))
    add("conv1x1", "Conv2d(64,64,1,bias=False)", mod_case(lambda: nn.Conv2d(64, 64, 1, 1, 0, bias=False)))
    add("conv1x1_bias_head", "Conv2d(64,144,1,bias=True) (detect head)", mod_case(lambda: nn.Conv2d(64, 144, 1, 1, 0, bias=True)))
    add("conv3x3_s1_amp", "Conv2d(64,64,3,1,1,bias=False), fp16 input, autocast fp16", mod_case(lambda: nn.Conv2d(64, 64, 3, 1, 1, bias=False), ((C, H, torch.float16),)), amp=True)
    add("conv3x3_s1_amp_f32in", "Conv2d(64,64,3,1,1,bias=False), fp32 input, autocast fp16", mod_case(lambda: nn.Conv2d(64, 64, 3, 1, 1, bias=False)), amp=True)
    add("bn_train", "BatchNorm2d(64) train mode", mod_case(lambda: nn.BatchNorm2d(64)))
    add("bn_train_amp", "BatchNorm2d(64) train, fp16 input, autocast", mod_case(lambda: nn.BatchNorm2d(64), ((C, H, torch.float16),)), amp=True)
    add("silu_module", "nn.SiLU()", mod_case(lambda: nn.SiLU()))
    add("silu_functional", "F.silu(x)", fn_case(lambda x: F.silu(x)))
    add("silu_written", "x * torch.sigmoid(x)", fn_case(lambda x: x * torch.sigmoid(x)))
    add("silu_amp", "nn.SiLU() fp16 input under autocast", mod_case(lambda: nn.SiLU(), ((C, H, torch.float16),)), amp=True)
    add("sigmoid", "torch.sigmoid(x)", fn_case(lambda x: torch.sigmoid(x)))
    add("maxpool_3_2_1", "MaxPool2d(3,2,1)", mod_case(lambda: nn.MaxPool2d(3, 2, 1)))
    add("maxpool_5_1_2", "MaxPool2d(5,1,2) (SPPELAN)", mod_case(lambda: nn.MaxPool2d(5, 1, 2)))
    add("avgpool_2_1_0", "AvgPool2d(2,1,0,False,True) (ADown)", mod_case(lambda: nn.AvgPool2d(2, 1, 0, False, True)))
    add("interp_nearest_x2", "F.interpolate(x, scale_factor=2, mode='nearest')", fn_case(lambda x: F.interpolate(x, scale_factor=2, mode="nearest")))
    add("upsample_module_x2", "nn.Upsample(None, 2, 'nearest')", mod_case(lambda: nn.Upsample(None, 2, "nearest")))
    add("cat2", "torch.cat([a, b], 1)", fn_case(lambda a, b: torch.cat([a, b], 1), ((C, H, torch.float32), (C, H, torch.float32))))
    add("chunk_only", "x(8,128,80,80).chunk(2,1) -> both halves are outputs", fn_case(lambda x: tuple(x.chunk(2, 1)), ((2 * C, H, torch.float32),)))
    add("split_16_48", "x.split((16,48),1) -> both parts are outputs", fn_case(lambda x: tuple(x.split((16, 48), 1)), ((C, H, torch.float32),)))

    def chunk_then(m):
        def make():
            mm = m().to(DEV).train()
            return [leaf(2 * C, H)], mm, lambda x: mm(x.chunk(2, 1)[1])
        return make

    add("chunk_conv1x1", "x(8,128,80,80).chunk(2,1)[1] -> Conv2d(64,64,1) (RepNCSP cv1 on chunk)", chunk_then(lambda: nn.Conv2d(64, 64, 1, 1, 0, bias=False)))
    add("chunk_conv3x3_s1", "x(8,128,80,80).chunk(2,1)[1] -> Conv2d(64,64,3,1,1)", chunk_then(lambda: nn.Conv2d(64, 64, 3, 1, 1, bias=False)))
    add("chunk_conv3x3_s2", "x(8,128,80,80).chunk(2,1)[0] -> Conv2d(64,64,3,2,1) (ADown cv1)", (lambda: (lambda mm: ([leaf(2 * C, H)], mm, lambda x: mm(x.chunk(2, 1)[0])))(nn.Conv2d(64, 64, 3, 2, 1, bias=False).to(DEV))))
    add("chunk_maxpool_3_2_1", "x(8,128,80,80).chunk(2,1)[1] -> max_pool2d(3,2,1) (ADown)", fn_case(lambda x: F.max_pool2d(x.chunk(2, 1)[1], 3, 2, 1), ((2 * C, H, torch.float32),)))
    add("chunk_yconv1x1_amp", "fp16 x(8,128,80,80).chunk(2,1)[1] -> Conv(64,64,1) block, autocast", (lambda: (lambda mm: ([leaf(2 * C, H, dtype=torch.float16)], mm, lambda x: mm(x.chunk(2, 1)[1])))(YConv(64, 64, 1, 1).to(DEV).train())), amp=True)
    add("add", "a + b", fn_case(lambda a, b: a + b, ((C, H, torch.float32), (C, H, torch.float32))))
    add("mul", "a * b", fn_case(lambda a, b: a * b, ((C, H, torch.float32), (C, H, torch.float32))))
    add("mul_const", "a * 0.5", fn_case(lambda a: a * 0.5))
    add("stack_sum", "torch.stack([a, b]).sum(0)", fn_case(lambda a, b: torch.stack([a, b]).sum(0), ((C, H, torch.float32), (C, H, torch.float32))))

    def cbfuse(t, x):
        res = [F.interpolate(t.split((64, 64), 1)[1], size=(H, H), mode="nearest")]
        return torch.sum(torch.stack(res + [x]), dim=0)
    add("cbfuse", "CBFuse: t(8,128,40,40).split((64,64))[1] -> interpolate(size=80, nearest); sum(stack([res, x(8,64,80,80)]),0)",
        fn_case(cbfuse, ((2 * C, H // 2, torch.float32), (C, H, torch.float32))))
    add("conv_bn_silu", "YOLOv9 Conv(64,64,3,1): SiLU(BN(Conv3x3)) fp32", mod_case(lambda: YConv(64, 64, 3, 1)))
    add("conv_bn_silu_amp", "YOLOv9 Conv(64,64,3,1) fp16 input, autocast", mod_case(lambda: YConv(64, 64, 3, 1), ((C, H, torch.float16),)), amp=True)
    add("conv_bn_silu_amp_f32in", "YOLOv9 Conv(64,64,3,1) fp32 input, autocast", mod_case(lambda: YConv(64, 64, 3, 1)), amp=True)
    add("conv_bn_silu_s2_amp", "YOLOv9 Conv(64,128,3,2) fp16 input, autocast", mod_case(lambda: YConv(64, 128, 3, 2), ((C, H, torch.float16),)), amp=True)
    return L


# ------------------------------------------------------------------------------ runner
def one_cycle(leaves, mod, fn, amp):
    """One forward + backward. Returns the measurement dict."""
    for t in leaves:
        t.grad = None
    params = list(mod.parameters()) if mod is not None else []
    for p in params:
        p.grad = None
    labels = {}
    for i, t in enumerate(leaves):
        labels.setdefault(sptr(t), "in%d" % i)
    if mod is not None:
        for n, p in mod.named_parameters():
            labels.setdefault(sptr(p), "p:" + n)
        for n, b in mod.named_buffers():
            labels.setdefault(sptr(b), "b:" + n)
    mod_out = {}
    handles = []
    if mod is not None:
        for n, m in mod.named_modules():
            if n:
                def hk(m_, i_, o_, n=n):
                    if isinstance(o_, torch.Tensor):
                        mod_out[sptr(o_)] = "mod:" + n
                handles.append(m.register_forward_hook(hk))

    packed = []

    def pack(t):
        packed.append(dict(tinfo(t), _ptr=sptr(t), data_ptr=t.data_ptr()))
        return t

    def unpack(t):
        return t

    xs = [Src.apply(t) for t in leaves]
    r = {}
    torch.cuda.synchronize(DEV)
    trace_reset()
    base = alloc()
    torch.cuda.reset_peak_memory_stats(DEV)
    m0 = trace_mark()
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        if amp:
            with torch.autocast("cuda", dtype=torch.float16):
                out = fn(*xs)
        else:
            out = fn(*xs)
    r["after_fwd"] = alloc() - base
    r["peak_fwd"] = peak() - base
    st = torch.cuda.memory_stats(DEV)
    r["requested_after_fwd_abs"] = st.get("requested_bytes.all.current")
    ents = trace_entries()
    r["fwd_events"] = compact(ents[m0:])
    for h in handles:
        h.remove()
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    del out
    for i, o in enumerate(outs):
        labels.setdefault(sptr(o), "out%d" % i)
    del o  # the loop variable would keep the last output alive
    labels.update({k: v for k, v in mod_out.items() if k not in labels})
    in_views = {sptr(x): "in%d" % i for i, x in enumerate(xs)}

    def label(p):
        return labels.get(p) or in_views.get(p) or "new"

    r["outputs"] = [tinfo(o) for o in outs]
    r["inputs"] = [tinfo(t) for t in leaves]
    r["saved_packed"] = [dict({k: v for k, v in d.items() if k != "_ptr"}, label=label(d["_ptr"])) for d in packed]
    nodes = walk_graph([o.grad_fn for o in outs])
    r["saved_nodes"] = node_saved(nodes, label)
    r["graph_nodes"] = [type(n).__name__ for n in nodes]
    del nodes
    a0 = alloc()
    loss = Sink.apply(*outs)
    sink_delta = alloc() - a0
    del outs
    r["after_del_out"] = alloc() - base - sink_delta
    del xs
    r["after_del_out_and_input_views"] = alloc() - base - sink_delta

    torch.cuda.reset_peak_memory_stats(DEV)
    pre = alloc()
    m1 = trace_mark()
    loss.backward()
    r["after_bwd_rel_pre"] = alloc() - pre
    r["peak_bwd_rel_pre"] = peak() - pre
    r["pre_bwd_rel_base"] = pre - base
    ents = trace_entries()
    r["bwd_events"] = compact(ents[m1:])
    del loss
    r["after_all_rel_base"] = alloc() - base
    r["param_grads"] = {n: tinfo(p.grad) for n, p in (mod.named_parameters() if mod is not None else []) if p.grad is not None}
    r["fwd_summary"] = summarize_events(r["fwd_events"])
    r["bwd_summary"] = summarize_events(r["bwd_events"])
    for p in params:
        p.grad = None
    return r


def run_case(name, desc, amp, make):
    torch.cuda.empty_cache()
    leaves, mod, fn = make()
    rec = {"name": name, "desc": desc, "amp": amp}
    rec["cold"] = one_cycle(leaves, mod, fn, amp)
    torch.cuda.empty_cache()
    rec["warm"] = one_cycle(leaves, mod, fn, amp)
    del leaves, mod, fn
    torch.cuda.empty_cache()
    return rec


def env_info():
    return {
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(DEV),
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "cudnn.benchmark": torch.backends.cudnn.benchmark,
    }


def brief(rec):
    w = rec["warm"]
    sv = ", ".join("%s%s" % (d["label"], d["shape"]) for d in w["saved_packed"])
    return "%-22s fwd+%d peak+%d kept(del out)=%d | bwd peak+%d after%+d | saved: %s" % (
        rec["name"], w["after_fwd"], w["peak_fwd"], w["after_del_out"],
        w["peak_bwd_rel_pre"], w["after_bwd_rel_pre"], sv)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.backends.cudnn.benchmark = False
    torch.cuda.set_device(DEV)
    torch.manual_seed(0)
    res = {"env": env_info(), "N_C_H": [N, C, H], "cases": []}
    for name, desc, amp, make in cases():
        if a.only and name not in a.only.split(","):
            continue
        try:
            rec = run_case(name, desc, amp, make)
            print(brief(rec), flush=True)
        except Exception as e:  # keep going
            rec = {"name": name, "desc": desc, "amp": amp, "error": repr(e), "tb": traceback.format_exc()[-2000:]}
            print("ERROR", name, repr(e), flush=True)
        res["cases"].append(rec)
        with open(os.path.join(a.out, "saved_tensors.json"), "w") as f:  # partial results
            json.dump(res, f, separators=(",", ":"))
    try:
        torch.cuda.memory._record_memory_history(enabled=None)
    except Exception:
        pass
    with open(os.path.join(a.out, "saved_tensors.json"), "w") as f:
        json.dump(res, f, separators=(",", ":"))
    print("wrote", os.path.join(a.out, "saved_tensors.json"))


if __name__ == "__main__":
    sys.exit(main())
