"""The global-memory staging of a conv bias's gradient, grad_output.sum({0, 2, 3}), by the layout of
the incoming gradient.

convolution_backward (aten/src/ATen/native/Convolution.cpp) computes the bias gradient outside
cuDNN as grad_output.sum over N, H and W, on the gradient as the engine hands it over: a
contiguous NCHW tensor, a slice of one (a concat's backward), or a one-element tensor expanded to
the output's shape (the seed of loss = sum(o.sum())). Reduce.cuh configures the kernel from the
strides that TensorIterator leaves after it moves the reduced dimensions first and coalesces them:
H·W is the fastest dimension of a contiguous or sliced gradient (each block's 32 lanes run along
the reduced rows, block_x_reduce, and a split over blocks stages 4 bytes per column and block),
while an expanded one has stride 0 everywhere, so the kept C counts as fastest (32 columns a block,
16 warps on the rows, and a split stages 4 × C × ctas × 32 bytes).

Part 1 measures the bytes that g.sum((0, 2, 3)) requests beyond its output
(requested_bytes.all.peak during the call, minus before, minus the output) for layouts contig,
slice (channels 64.. of a wider tensor), expand and hwslice (the first H·W of a longer last
axis, as a concat along the flattened positions leaves it), float32 and float16, N in 1..64,
C in 16..1024 and H = W in 10..160. Part 2 runs F.conv2d with a bias through autograd with each
layout of incoming gradient and records every allocation of the backward, to tie part 1 to
convolution_backward. Part 3 runs one train step of the official YOLOv9 code (third_party/yolov9
as train_run.py makes it: Model, ComputeLoss of loss_tal_dual.py or loss_tal.py) and records the
shape, strides and dtype of the gradient that reaches each biased Conv2d's output.

Usage: python3 calibration/conv_bias_reduce.py --out DIR   (writes DIR/conv_bias_reduce.json)
"""
import argparse
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
NS = [1, 2, 4, 8, 16, 32, 64]
CS = [16, 64, 80, 128, 256, 512, 1024]
HWS = [10, 20, 40, 80, 160]


def make(layout, n, c, h, w, dt, dev):
    if layout == "contig":
        return torch.randn(n, c, h, w, device=dev, dtype=dt)
    if layout == "slice":
        return torch.randn(n, c + 64, h, w, device=dev, dtype=dt)[:, 64:]
    if layout == "expand":
        return torch.ones((), device=dev, dtype=dt).expand(n, c, h, w)
    if layout == "hwslice":
        base = torch.randn(n, c, h * w + 400, device=dev, dtype=dt)
        return base.as_strided((n, c, h, w), (c * (h * w + 400), h * w + 400, w, 1))
    raise ValueError(layout)


def extra(x):
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["requested_bytes.all.current"]
    torch.cuda.reset_peak_memory_stats()
    y = x.sum((0, 2, 3))
    torch.cuda.synchronize()
    peak = torch.cuda.memory_stats()["requested_bytes.all.peak"]
    out = y.numel() * y.element_size()
    del y
    return peak - before - out


def events(snap):
    return [(e["action"], e["size"]) for d in snap["device_traces"] for e in d
            if e["action"] in ("alloc", "free_requested")]


def part1(dev):
    rows = []
    for dt in (torch.float32, torch.float16):
        for layout in ("contig", "slice", "expand", "hwslice"):
            for n in NS:
                for c in CS:
                    for s in HWS:
                        if n * (c + 64) * (s * s + 400) > 1 << 28:
                            continue
                        x = make(layout, n, c, s, s, dt, dev)
                        extra(x)
                        rows.append([layout, x.element_size(), n, c, s, extra(x)])
                        del x
    return rows


def part2(dev):
    out = []
    for layout in ("contig", "slice", "expand"):
        for n, cin, c, s, amp in [(8, 64, 80, 80, False), (8, 64, 80, 80, True), (32, 64, 256, 40, False),
                                  (2, 128, 512, 160, False), (1, 64, 64, 160, True)]:
            x = torch.randn(n, cin, s, s, device=dev, requires_grad=True)
            wt = torch.randn(c, cin, 1, 1, device=dev, requires_grad=True)
            b = torch.randn(c, device=dev, requires_grad=True)
            snap = None
            for step in range(2):
                with torch.autocast("cuda", torch.float16, enabled=amp):
                    y = F.conv2d(x, wt, b)
                g = make(layout, n, c, s, s, y.dtype, dev)
                torch.cuda.synchronize()
                if step == 1:
                    torch.cuda.memory._record_memory_history(max_entries=10000)
                y.backward(g)
                torch.cuda.synchronize()
                if step == 1:
                    snap = torch.cuda.memory._snapshot()
                    torch.cuda.memory._record_memory_history(enabled=None)
                del y, g
                x.grad = wt.grad = b.grad = None
            out.append({"layout": layout, "n": n, "cin": cin, "c": c, "s": s, "amp": amp, "events": events(snap)})
    return out


def part3(dev, yolo):
    sys.path.insert(0, HERE)
    import train_run  # noqa: E402

    train_run.install_stubs()
    sys.path.insert(0, yolo)
    import yaml  # noqa: E402
    import torch.cuda.amp as tca
    if not hasattr(tca, "autocast"):
        tca.autocast = lambda enabled=True, **k: torch.amp.autocast("cuda", enabled=enabled, **k)
    from models.yolo import Model  # noqa: E402
    with open(os.path.join(yolo, "data/hyps/hyp.scratch-high.yaml")) as f:
        hyp = yaml.safe_load(f)
    res = []
    for cfg, amp in [("yolov9-c", False), ("yolov9-c", True), ("gelan-c", True)]:
        if cfg.startswith("gelan"):
            from utils.loss_tal import ComputeLoss
        else:
            from utils.loss_tal_dual import ComputeLoss
        model = Model(os.path.join(yolo, "models/detect", cfg + ".yaml"), ch=3, nc=80).to(dev)
        model.hyp = hyp
        model.nc = 80
        loss_fn = ComputeLoss(model)
        seen = []
        hooks = []
        for name, m in model.named_modules():
            if isinstance(m, nn.Conv2d) and m.bias is not None:
                def fh(mod, inp, out, name=name):
                    if out.requires_grad:
                        out.register_hook(lambda g, name=name: seen.append(
                            {"name": name, "shape": list(g.shape), "stride": list(g.stride()),
                             "dtype": str(g.dtype), "contiguous": g.is_contiguous()}))
                hooks.append(m.register_forward_hook(fh))
        x = torch.rand(4, 3, 640, 640, device=dev)
        targets = torch.tensor([[0, 1, 0.5, 0.5, 0.2, 0.3], [1, 2, 0.3, 0.4, 0.1, 0.1],
                                [2, 3, 0.6, 0.6, 0.3, 0.2], [3, 4, 0.4, 0.5, 0.2, 0.2]], device=dev)
        with torch.autocast("cuda", torch.float16, enabled=amp):
            pred = model(x)
            loss, _ = loss_fn(pred, targets)
        loss.backward()
        for h in hooks:
            h.remove()
        res.append({"cfg": cfg, "amp": amp, "grads": seen})
        del model, loss_fn, pred, loss
        torch.cuda.empty_cache()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--yolo", default=os.path.join(os.path.dirname(HERE), "third_party", "yolov9"))
    a = ap.parse_args()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    res = {"torch": torch.__version__, "gpu": props.name, "sms": props.multi_processor_count,
           "max_threads_per_sm": props.max_threads_per_multi_processor}
    res["sums"] = part1(dev)
    print(len(res["sums"]), "sums", flush=True)
    res["autograd"] = part2(dev)
    print(len(res["autograd"]), "conv backwards", flush=True)
    try:
        res["yolo"] = part3(dev, a.yolo)
    except Exception as e:  # the synthetic parts stand alone
        res["yolo_error"] = repr(e)
        print("part 3:", repr(e), flush=True)
    with open(os.path.join(a.out, "conv_bias_reduce.json"), "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main()
