"""Memory profile of a small checkpointed nn.Sequential, and autocast dtypes of Conv+BN+SiLU.

What it measures (cuda:0, cudnn.benchmark=False, default allocator settings):

1. Exports `Net` (8 YOLO-style Conv = Conv2d(bias=False) -> BatchNorm2d -> SiLU blocks in
   `self.model = nn.Sequential(...)`) to ONNX in training mode (opset 17, TorchScript
   exporter, dynamic batch/height/width) as DIR/ckpt_net.onnx, with the initializers'
   data stripped (onnxmem reads only dims and dtypes). Prints the node names and checks
   that BatchNormalization has training_mode=1 and that SiLU is Sigmoid+Mul.
2. Six model steps, amp in {False, True} x segments in {0, 2, 4}, each in a fresh state
   like the project's harness: parameters on the GPU, empty_cache, one warm-up step of the
   same scenario, zero_grad(set_to_none=True), a fresh input x (8x3x160x160 fp32), then the
   measured step: forward (under torch.autocast('cuda', torch.float16) when amp; with
   segments K > 1 through torch.utils.checkpoint.checkpoint_sequential(net.model, K, x,
   use_reentrant=False)), loss = sum(o.sum() for o in out) outside autocast, backward,
   `del out, loss`, then `del x`. memory_allocated before (m0), after the forward
   (after_fwd, autocast exited), after the backward and the del (after_bwd, x still
   alive); max_memory_allocated (peak), requested_bytes.all.peak, reserved_bytes.all.peak.
   The allocator trace (torch.cuda.memory._record_memory_history, context='all',
   stacks='python') of the measured step only is stored event by event:
   [action 'a'|'f', requested size, block id, phase, where], block id > 0 for a block
   allocated in the step (the free of a block carries its alloc's id; < 0 = allocated
   before the step), phase one of fwd / loss / bwd / cleanup (from trace marks taken
   between the parts), where = the torch.nn module file of the innermost module frame on
   the Python stack (conv, bn, act, or '' when none: the backward's C++ engine) plus
   '+ckpt' when torch/utils/checkpoint.py is on the stack (in bwd: a recomputation).
3. Autocast dtypes of one Conv+BN+SiLU block (32->64, 3x3, N=8, 80x80) with fp32 weights,
   for an fp32 and an fp16 input: dtypes of conv/bn/silu outputs, of the tensors autograd
   saved (conv _saved_input/_saved_weight, bn _saved_result1/2 = save_mean/invstd), and how
   many bytes memory_allocated grows by in the block's forward (inside autocast, and after
   it exits: the cast-weight cache), with the forward's and backward's event traces.

Writes DIR/ckpt_results.json and DIR/ckpt_net.onnx.

Rerun on a GPU machine, from the repository root:
    python3 calibration/checkpoint_sequential.py --out calibration/results
"""
import argparse
import contextlib
import gc
import json
import os
import sys
import traceback

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint_sequential

import memtrace  # noqa: E402  (calibration/ is on sys.path when run as a script)

DEV = torch.device("cuda:0")
BATCH, IMG = 8, 160
CHANNELS = [(3, 32, 2), (32, 64, 2), (64, 64, 1), (64, 64, 1), (64, 128, 2), (128, 128, 1),
            (128, 128, 1), (128, 64, 1)]


# ----------------------------------------------------------------------------- network
class Conv(nn.Module):
    """YOLO's Conv: SiLU(BN(Conv2d(x)))."""

    def __init__(self, c1, c2, k=3, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(*[Conv(a, b, 3, s) for a, b, s in CHANNELS])

    def forward(self, x):
        return [self.model(x)]


# ----------------------------------------------------------------------------- tracing
def trace_reset():
    """Disable (clears the ring buffer) and re-enable allocator history with Python stacks."""
    memtrace.trace_reset(context="all")


def trace_stop():
    try:
        torch.cuda.memory._record_memory_history(enabled=None)
    except Exception:
        pass


trace_entries = memtrace.trace_entries


def where(e):
    mod, ck = "", False
    for fr in e.get("frames") or []:
        fn = fr.get("filename", "")
        if "utils/checkpoint.py" in fn:
            ck = True
        if not mod and "/torch/nn/modules/" in fn:
            base = os.path.basename(fn)
            if base not in ("container.py", "module.py"):
                mod = {"conv.py": "conv", "batchnorm.py": "bn", "activation.py": "act"}.get(base, base)
    return mod + ("+ckpt" if ck else "")


def compact(entries, marks):
    """Events of the trace: [a|f, size, block id, phase, where]. marks = [(start index, phase)]."""
    live, out, nxt, pre = {}, [], 1, -1
    for idx, e in enumerate(entries):
        act, addr, size = e.get("action"), e.get("addr"), e.get("size")
        if act not in ("alloc", "free_completed"):
            continue
        ph = ""
        for start, name in marks:
            if idx >= start:
                ph = name
        if act == "alloc":
            live[addr] = nxt
            out.append(["a", size, nxt, ph, where(e)])
            nxt += 1
        else:
            if addr in live:
                bid = live.pop(addr)
            else:
                bid, pre = pre, pre - 1
            out.append(["f", size, bid, ph, where(e)])
    return out


def env_info():
    import onnx
    return {
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(DEV),
        "onnx": onnx.__version__,
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "cudnn.benchmark": torch.backends.cudnn.benchmark,
    }


# ----------------------------------------------------------------------------- export
def export(path):
    import onnx
    torch.manual_seed(0)
    net = Net().train()
    x = torch.randn(BATCH, 3, IMG, IMG)
    kw = dict(opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
              do_constant_folding=False, input_names=["images"],
              dynamic_axes={"images": {0: "batch", 2: "height", 3: "width"}})
    info = {}
    try:
        torch.onnx.export(net, x, path, dynamo=False, **kw)
        info["exporter"] = "torchscript (dynamo=False)"
    except TypeError as e:
        print("export with dynamo=False failed:", repr(e), "- retrying without it", flush=True)
        torch.onnx.export(net, x, path, **kw)
        info["exporter"] = "default (no dynamo kwarg)"
    except Exception as e:
        print("TorchScript export failed:", repr(e), "- trying dynamo=True", flush=True)
        info["torchscript_error"] = repr(e)[:2000]
        torch.onnx.export(net, (x,), path, dynamo=True, opset_version=18, input_names=["images"],
                          dynamic_axes={"images": {0: "batch", 2: "height", 3: "width"}})
        info["exporter"] = "dynamo"
    m = onnx.load(path)
    ops = {}
    for n in m.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    info["op_types"] = ops
    info["nodes"] = [[n.name, n.op_type] for n in m.graph.node]
    bn_modes = []
    for n in m.graph.node:
        if n.op_type == "BatchNormalization":
            tm = [a.i for a in n.attribute if a.name == "training_mode"]
            bn_modes.append({"name": n.name, "training_mode": tm[0] if tm else None,
                             "outputs": len(n.output)})
    info["batchnorm"] = bn_modes
    info["silu_as_sigmoid_mul"] = ops.get("Sigmoid", 0) == len(CHANNELS) and ops.get("Mul", 0) == len(CHANNELS)
    info["other_silu_ops"] = {k: v for k, v in ops.items() if k.lower() in ("silu", "swish", "hardswish")}
    info["initializers"] = [[t.name, list(t.dims), t.data_type] for t in m.graph.initializer]
    print("exporter:", info["exporter"], "ops:", ops, flush=True)
    for name, op in info["nodes"][:12]:
        print("  node", name, op)
    print("  batchnorm training_mode:", sorted({(b["training_mode"], b["outputs"]) for b in bn_modes}))
    print("  SiLU as Sigmoid+Mul:", info["silu_as_sigmoid_mul"], "other:", info["other_silu_ops"])
    # Strip the weights: onnxmem reads only dims and dtypes.
    stripped = 0
    for t in m.graph.initializer:
        n = 1
        for d in t.dims:
            n *= d
        if n > 64 and (t.raw_data or len(t.float_data)):
            t.ClearField("raw_data")
            t.ClearField("float_data")
            stripped += 1
    m.doc_string = "weights stripped (dims and dtypes only) by calibration/checkpoint_sequential.py"
    onnx.save(m, path)
    info["stripped_initializers"] = stripped
    info["bytes"] = os.path.getsize(path)
    return info


# ----------------------------------------------------------------------------- steps
def scenario(amp, K):
    torch.manual_seed(0)
    gc.collect()
    torch.cuda.empty_cache()
    net = Net().to(DEV).train()
    torch.cuda.empty_cache()

    def forward(x):
        if K > 1:
            return [checkpoint_sequential(net.model, K, x, use_reentrant=False)]
        return net(x)

    def ac():
        return torch.autocast("cuda", torch.float16) if amp else contextlib.nullcontext()

    # Warm-up step.
    x = torch.randn(BATCH, 3, IMG, IMG, device=DEV)
    with ac():
        out = forward(x)
    loss = sum(o.sum() for o in out)
    loss.backward()
    del out, loss, x
    net.zero_grad(set_to_none=True)
    torch.cuda.synchronize()

    # Measured step.
    x = torch.randn(BATCH, 3, IMG, IMG, device=DEV)
    torch.cuda.synchronize()
    trace_reset()
    marks = [(len(trace_entries()), "fwd")]
    m0 = torch.cuda.memory_allocated(DEV)
    torch.cuda.reset_peak_memory_stats(DEV)
    with ac():
        out = forward(x)
    after_fwd = torch.cuda.memory_allocated(DEV)
    fwd_peak = torch.cuda.max_memory_allocated(DEV)
    marks.append((len(trace_entries()), "loss"))
    loss = sum(o.sum() for o in out)
    marks.append((len(trace_entries()), "bwd"))
    loss.backward()
    torch.cuda.synchronize()
    marks.append((len(trace_entries()), "cleanup"))
    out_dtype = str(out[0].dtype)
    del out, loss
    after_bwd = torch.cuda.memory_allocated(DEV)
    del x
    torch.cuda.synchronize()
    st = torch.cuda.memory_stats(DEV)
    peak = torch.cuda.max_memory_allocated(DEV)
    entries = trace_entries()
    trace_stop()
    ev = compact(entries, marks)
    rec = {"amp": amp, "segments": K, "m0": m0, "after_fwd": after_fwd, "fwd_peak": fwd_peak,
           "peak": peak, "peak_req": st.get("requested_bytes.all.peak"),
           "peak_reserved": st.get("reserved_bytes.all.peak"), "after_bwd": after_bwd,
           "output_dtype": out_dtype,
           "segment_allocs": sum(1 for e in entries if e.get("action") == "segment_alloc"),
           "events": ev}
    del net
    gc.collect()
    torch.cuda.empty_cache()
    return rec


# ----------------------------------------------------------------------------- autocast
def autocast_block():
    res = {}
    for in_dtype in (torch.float32, torch.float16):
        for amp in (True, False):
            if in_dtype == torch.float16 and not amp:
                continue
            gc.collect()
            torch.cuda.empty_cache()
            torch.manual_seed(0)
            blk = Conv(32, 64, 3, 1).to(DEV).train()
            x = torch.randn(BATCH, 32, 80, 80, device=DEV).to(in_dtype).requires_grad_(True)
            xin = x * 1  # a non-leaf input like in a network (its own storage)
            torch.cuda.synchronize()
            trace_reset()
            base = torch.cuda.memory_allocated(DEV)
            ctx = torch.autocast("cuda", torch.float16) if amp else contextlib.nullcontext()
            with ctx:
                y1 = blk.conv(xin)
                y2 = blk.bn(y1)
                y3 = blk.act(y2)
                inside = torch.cuda.memory_allocated(DEV) - base
            after_exit = torch.cuda.memory_allocated(DEV) - base
            n_fwd = len(trace_entries())
            cg, bg, sg = y1.grad_fn, y2.grad_fn, y3.grad_fn

            def dt(fn, attr):
                try:
                    t = getattr(fn, attr)
                    return [str(t.dtype), list(t.shape), t.untyped_storage().nbytes()]
                except Exception as e:
                    return repr(e)[:80]
            saved_w = getattr(cg, "_saved_weight", None)
            r = {
                "input_dtype": str(in_dtype), "amp": amp,
                "conv_out": str(y1.dtype), "bn_out": str(y2.dtype), "silu_out": str(y3.dtype),
                "grad_fns": [type(cg).__name__, type(bg).__name__, type(sg).__name__],
                "conv_saved_input": dt(cg, "_saved_input"), "conv_saved_weight": dt(cg, "_saved_weight"),
                "conv_saved_weight_is_param": bool(saved_w is not None and
                                                   saved_w.data_ptr() == blk.conv.weight.data_ptr()),
                "conv_saved_input_is_input": bool(getattr(cg, "_saved_input", None) is not None and
                                                  cg._saved_input.data_ptr() == xin.data_ptr()),
                "bn_saved_mean": dt(bg, "_saved_result1"), "bn_saved_invstd": dt(bg, "_saved_result2"),
                "bn_saved_reserve": dt(bg, "_saved_result3"),
                "bn_saved_input": dt(bg, "_saved_input"),
                "silu_saved_self": dt(sg, "_saved_self"),
                "running_mean": str(blk.bn.running_mean.dtype),
                "weight_bytes_fp32": blk.conv.weight.numel() * 4,
                "in_bytes": xin.numel() * xin.element_size(),
                "out_elems": y3.numel(),
                "fwd_growth_inside_autocast": inside, "fwd_growth_after_exit": after_exit,
            }
            y3.sum().backward()
            torch.cuda.synchronize()
            entries = trace_entries()
            trace_stop()
            r["events"] = compact(entries, [(0, "fwd"), (n_fwd, "bwd")])
            r["after_bwd_growth"] = torch.cuda.memory_allocated(DEV) - base
            res["%s_in%s" % ("amp" if amp else "fp32", "16" if in_dtype == torch.float16 else "32")] = r
            print("block", "amp" if amp else "fp32", "input", in_dtype, "->", r["conv_out"], r["bn_out"],
                  r["silu_out"], "mean", r["bn_saved_mean"], "w", r["conv_saved_weight"],
                  "grow in/after", inside, after_exit, flush=True)
            del blk, x, xin, y1, y2, y3, cg, bg, sg, saved_w
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.backends.cudnn.benchmark = False
    torch.cuda.set_device(DEV)
    path = os.path.join(a.out, "ckpt_results.json")
    res = {"env": env_info(), "onnx": "ckpt_net.onnx", "input": [BATCH, 3, IMG, IMG],
           "channels": CHANNELS, "scenarios": []}

    def save():
        with open(path, "w") as f:
            json.dump(res, f, separators=(",", ":"))

    try:
        res["export"] = export(os.path.join(a.out, "ckpt_net.onnx"))
    except Exception as e:
        res["export"] = {"error": repr(e), "tb": traceback.format_exc()[-3000:]}
        print("EXPORT ERROR", repr(e), traceback.format_exc()[-3000:], flush=True)
    save()
    for amp in (False, True):
        for K in (0, 2, 4):
            try:
                rec = scenario(amp, K)
                print("amp=%d K=%d m0=%d after_fwd=%d peak=%d peak_req=%d reserved=%d after_bwd=%d events=%d" % (
                    amp, K, rec["m0"], rec["after_fwd"], rec["peak"], rec["peak_req"] or -1,
                    rec["peak_reserved"] or -1, rec["after_bwd"], len(rec["events"])), flush=True)
            except Exception as e:
                rec = {"amp": amp, "segments": K, "error": repr(e), "tb": traceback.format_exc()[-3000:]}
                print("ERROR", amp, K, repr(e), traceback.format_exc()[-3000:], flush=True)
            res["scenarios"].append(rec)
            save()
    try:
        res["autocast_dtypes"] = autocast_block()
    except Exception as e:
        res["autocast_dtypes"] = {"error": repr(e), "tb": traceback.format_exc()[-3000:]}
        print("AUTOCAST ERROR", repr(e), traceback.format_exc()[-3000:], flush=True)
    save()
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    sys.exit(main())
