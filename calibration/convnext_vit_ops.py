"""The eager memory of torchvision's ConvNeXt and ViT building blocks, for their op rules.

For each block in train mode (fp32 and under autocast float16), the allocator's event history
of one forward and one backward (torch.cuda.memory._record_memory_history with Python stacks):
every alloc and free with its size and the innermost frames inside torch or torchvision, so the
op that made each tensor can be read off. Blocks (batch 8):
  - convnext CNBlock(96, layer_scale 1e-6, stochastic depth 0.1) on 8x96x56x56;
  - convnext LayerNorm2d(96) then Conv2d(96, 192, 2, stride 2) (the downsample);
  - vit EncoderBlock(12 heads, 768, mlp 3072, dropout 0, attention dropout 0) on 8x197x768;
and the whole model step (ground-truth protocol: warm-up step, zero_grad, measured step with
loss = out.sum()) of convnext_tiny and vit_b_16 at batch 8, fp32 and AMP, compacted, with its
figures.
Usage: python3 calibration/convnext_vit_ops.py --out calibration/results

What the fp32 CNBlock forward showed (torch 2.11, H200; the frames came out empty, as
memtrace.trace_reset records no context, so the ops are read off the sizes, 8x96x56x56 float32 =
9,633,792 bytes): the depthwise conv's output; layer_norm on its permuted (channels-last) view
makes a contiguous copy, its output, mean and rstd (8x56x56 float32 each) and frees the copy
(it saves the permuted input, the conv's output); each Linear on the contiguous channels-last
tensor makes one output (the bias added in place) and saves its input; GELU makes one output and
saves its input; layer_scale * x makes one output and saves both; stochastic depth makes its
8-element noise and a product, and the layer-scale product goes; the residual add is in place.
Under autocast the float32 layer_norm takes a float32 copy of its float16 input first, and the
Linears take float16 casts of their inputs and weights. These are the rules that ConvNeXt's ops
(LayerNormalization, MatMul + Add, the Erf pattern of GELU, a parameter's Mul) need; the
backward sequences and the ViT encoder's (attention through scaled_dot_product_attention) are
in the same file, not yet read.
"""
import argparse
import json
import os
import sys

import torch
import torchvision
from torchvision.models.convnext import CNBlock, LayerNorm2d
from torchvision.models.vision_transformer import EncoderBlock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memtrace import trace_reset, trace_entries, compact  # noqa: E402

DEV = torch.device("cuda")


def frames(e):
    out = []
    for fr in e.get("frames") or []:
        fn = fr.get("filename", "")
        if "torch/nn" in fn or "torchvision" in fn or "torch/utils" in fn or "autograd" in fn:
            out.append("%s:%d %s" % (os.path.basename(fn), fr.get("line", 0), fr.get("name", "")))
        if len(out) == 3:
            break
    return out


def events(entries):
    out = []
    for e in entries:
        a = e.get("action")
        if a in ("alloc", "free_completed"):
            out.append([a[0], e["size"], e["addr"] % 100000, frames(e)])
    return out


def block_case(name, make, shape, amp):
    torch.manual_seed(0)
    m = make().to(DEV).train()
    x = torch.randn(*shape, device=DEV, requires_grad=True)
    for _ in range(2):  # warm-up, then recorded
        m.zero_grad(set_to_none=True)
        x.grad = None
        torch.cuda.synchronize()
        trace_reset()
        m0 = torch.cuda.memory_allocated()
        with torch.autocast("cuda", torch.float16, enabled=amp):
            y = m(x)
        torch.cuda.synchronize()
        fwd = events(trace_entries())
        after_fwd = torch.cuda.memory_allocated()
        nf = len(trace_entries())
        y.float().sum().backward() if y.dtype != torch.float32 else y.sum().backward()
        del y
        torch.cuda.synchronize()
        bwd = events(trace_entries())[len(fwd):]
    return {"case": name, "amp": amp, "shape": list(shape), "m0": m0, "after_fwd": after_fwd, "forward": fwd, "backward": bwd}


def model_step(name, B, amp):
    torch.cuda.empty_cache()
    model = getattr(torchvision.models, name)(weights=None).to(DEV).train()
    x = torch.randn(B, 3, 224, 224, device=DEV)
    for step in range(2):
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        m0 = torch.cuda.memory_allocated()
        if step == 1:
            trace_reset()
        with torch.autocast("cuda", torch.float16, enabled=amp):
            o = model(x)
        torch.cuda.synchronize()
        after_fwd = torch.cuda.memory_allocated()
        nf = len(trace_entries()) if step == 1 else 0
        loss = o.sum()
        loss.backward()
        del o, loss
        torch.cuda.synchronize()
    st = torch.cuda.memory_stats()
    ev = trace_entries()
    torch.cuda.memory._record_memory_history(enabled=None)
    return {"model": name, "B": B, "amp": amp, "m0": m0, "after_fwd": after_fwd, "peak": st["allocated_bytes.all.peak"],
            "peak_req": st["requested_bytes.all.peak"], "peak_reserved": st["reserved_bytes.all.peak"], "n_fwd_events": nf,
            "events": compact(ev), "framed": events(ev)[:4000]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="calibration/results")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = False
    res = {"torch": torch.__version__, "blocks": [], "steps": []}
    for amp in (False, True):
        res["blocks"].append(block_case("cnblock", lambda: CNBlock(96, 1e-6, 0.1), (8, 96, 56, 56), amp))
        res["blocks"].append(block_case("downsample", lambda: torch.nn.Sequential(LayerNorm2d(96), torch.nn.Conv2d(96, 192, 2, 2)), (8, 96, 56, 56), amp))
        res["blocks"].append(block_case("encoder", lambda: EncoderBlock(12, 768, 3072, 0.0, 0.0), (8, 197, 768), amp))
    for name in ("convnext_tiny", "vit_b_16"):
        for amp in (False, True):
            res["steps"].append(model_step(name, 8, amp))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "convnext_vit_ops.json"), "w") as fh:
        json.dump(res, fh)
    print("done", [(b["case"], b["amp"], len(b["forward"]), len(b["backward"])) for b in res["blocks"]],
          [(s["model"], s["amp"], s["peak"]) for s in res["steps"]])


if __name__ == "__main__":
    main()
