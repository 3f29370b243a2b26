"""Model steps of YOLOv9 with checkpoint segments, traced allocation by allocation.

The ground truth (../shared/groundtruth) has allocation traces of four model steps, one of
them with checkpoint segments (yolov9-c, batch 8, AMP, K=2). This script makes more: it
runs the model step that ../shared/groundtruth/README.md describes ("model_step") on
yolov9-t, -s, -m, -c, -e and gelan-c, written here from their layer tables (models/tables.go) with
modules that follow the official repository's forward code (github.com/WongKinYiu/yolov9,
models/common.py and models/yolo.py at 5b1ea9a: Conv, AConv, ADown, ELAN1, RepNCSPELAN4,
RepNCSP, RepNBottleneck, RepConvN, SPPELAN, CBLinear, CBFuse, Concat, nn.Upsample,
DDetect and DualDDetect in training mode), and records every allocation of the measured step.

The step, as the README says:
  - fp32 parameters and buffers on the GPU, x = randn(B, 3, S, S) fp32, gradients None;
  - the forward in train mode, under torch.autocast('cuda', torch.float16) when amp (precision
    "amp"; "bf16" autocasts to torch.bfloat16 instead, see bf16.py), through
    the layer loop of _forward_once (a layer's output lives in y until the end of the
    forward when model.save lists it);
  - segments K > 1: size = n_layers // K; the first K-1 chunks of size layers each run under
    torch.utils.checkpoint.checkpoint(..., use_reentrant=False), the rest normally; a chunk
    returns its last output and the outputs of its layers that model.save lists, and the
    loop then drops from y what no later layer reads;
  - loss = sum of o.sum() over the six head outputs, outside autocast; loss.backward().

Scenarios run one after the other in one process, as the ground truth's did per model, or
with --fresh each in a process of its own. Each scenario: empty_cache, a warm-up step, then
the measured step, whose numbers are
m0 (before it, gradients set to None), after_fwd, fwd_peak, peak (max_memory_allocated),
peak_req and after_bwd. Where ../shared/groundtruth/calibration.jsonl has the same
scenario, its figures are printed next to these.

The traces are written like the ground truth's: {"result": {...}, "events": [[a|f, address,
requested bytes, where], ...]}, where = "yolov9_segments.py:LINE function" of the innermost
frame in this file ('' in the backward's C++ engine), from the gradient frees that open the
step to the last free.

Rerun on a GPU machine, from the repository root (results/yolov9_segments.json and the traces
in results/yolov9_segments/, then results/yolov9_segments_fresh.json):
    python3 calibration/yolov9_segments.py --out calibration/results
    python3 calibration/yolov9_segments.py --out calibration/results --fresh --json yolov9_segments_fresh.json \
        --scenarios yolov9-c:1:640:fp32:2:,yolov9-c:1:640:fp32:4:,yolov9-c:1:640:amp:2:,yolov9-c:2:640:fp32:2:,\
yolov9-s:1:640:fp32:4:,yolov9-s:4:640:fp32:4:,yolov9-s:8:640:amp:4:,yolov9-s:1:640:amp:4:,yolov9-s:64:640:fp32:4:t
(the last scenario was run on its own and appended, with its trace)
"""
import argparse
import json
import math
import os
import subprocess
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

DEV = torch.device("cuda:0")
HERE = os.path.basename(__file__)


# ----------------------------------------------------------------------------- modules
def autopad(k, p=None):
    return k // 2 if p is None else p


class Conv(nn.Module):
    act_default = nn.SiLU()

    def __init__(self, c1, c2, k=1, s=1, p=None, g=1, act=True):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, autopad(k, p), groups=g, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = self.act_default if act is True else nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class AConv(nn.Module):
    def __init__(self, c1, c2):
        super().__init__()
        self.cv1 = Conv(c1, c2, 3, 2, 1)

    def forward(self, x):
        x = F.avg_pool2d(x, 2, 1, 0, False, True)
        return self.cv1(x)


class ADown(nn.Module):
    def __init__(self, c1, c2):
        super().__init__()
        self.c = c2 // 2
        self.cv1 = Conv(c1 // 2, self.c, 3, 2, 1)
        self.cv2 = Conv(c1 // 2, self.c, 1, 1, 0)

    def forward(self, x):
        x = F.avg_pool2d(x, 2, 1, 0, False, True)
        x1, x2 = x.chunk(2, 1)
        x1 = self.cv1(x1)
        x2 = F.max_pool2d(x2, 3, 2, 1)
        x2 = self.cv2(x2)
        return torch.cat((x1, x2), 1)


class RepConvN(nn.Module):
    def __init__(self, c1, c2):
        super().__init__()
        self.act = nn.SiLU()
        self.bn = None
        self.conv1 = Conv(c1, c2, 3, 1, p=1, act=False)
        self.conv2 = Conv(c1, c2, 1, 1, p=0, act=False)

    def forward(self, x):
        id_out = 0 if self.bn is None else self.bn(x)
        return self.act(self.conv1(x) + self.conv2(x) + id_out)


class RepNBottleneck(nn.Module):
    def __init__(self, c1, c2, shortcut=True):
        super().__init__()
        self.cv1 = RepConvN(c1, c2)
        self.cv2 = Conv(c2, c2, 3, 1)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))


class RepNCSP(nn.Module):
    def __init__(self, c1, c2, n=1):
        super().__init__()
        c_ = int(c2 * 0.5)
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c1, c_, 1, 1)
        self.cv3 = Conv(2 * c_, c2, 1)
        self.m = nn.Sequential(*(RepNBottleneck(c_, c_) for _ in range(n)))

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class ELAN1(nn.Module):
    def __init__(self, c1, c2, c3, c4):
        super().__init__()
        self.c = c3 // 2
        self.cv1 = Conv(c1, c3, 1, 1)
        self.cv2 = Conv(c3 // 2, c4, 3, 1)
        self.cv3 = Conv(c4, c4, 3, 1)
        self.cv4 = Conv(c3 + (2 * c4), c2, 1, 1)

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in [self.cv2, self.cv3])
        return self.cv4(torch.cat(y, 1))


class RepNCSPELAN4(nn.Module):
    def __init__(self, c1, c2, c3, c4, c5=1):
        super().__init__()
        self.c = c3 // 2
        self.cv1 = Conv(c1, c3, 1, 1)
        self.cv2 = nn.Sequential(RepNCSP(c3 // 2, c4, c5), Conv(c4, c4, 3, 1))
        self.cv3 = nn.Sequential(RepNCSP(c4, c4, c5), Conv(c4, c4, 3, 1))
        self.cv4 = Conv(c3 + (2 * c4), c2, 1, 1)

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        y.extend((m(y[-1])) for m in [self.cv2, self.cv3])
        return self.cv4(torch.cat(y, 1))


class SP(nn.Module):
    def __init__(self, k=3, s=1):
        super().__init__()
        self.m = nn.MaxPool2d(kernel_size=k, stride=s, padding=k // 2)

    def forward(self, x):
        return self.m(x)


class SPPELAN(nn.Module):
    def __init__(self, c1, c2, c3):
        super().__init__()
        self.c = c3
        self.cv1 = Conv(c1, c3, 1, 1)
        self.cv2 = SP(5)
        self.cv3 = SP(5)
        self.cv4 = SP(5)
        self.cv5 = Conv(4 * c3, c2, 1, 1)

    def forward(self, x):
        y = [self.cv1(x)]
        y.extend(m(y[-1]) for m in [self.cv2, self.cv3, self.cv4])
        return self.cv5(torch.cat(y, 1))


class Concat(nn.Module):
    def forward(self, x):
        return torch.cat(x, 1)


class Silence(nn.Module):
    def forward(self, x):
        return x


class CBLinear(nn.Module):
    def __init__(self, c1, c2s):
        super().__init__()
        self.c2s = c2s
        self.conv = nn.Conv2d(c1, sum(c2s), 1, 1, 0, bias=True)

    def forward(self, x):
        outs = self.conv(x).split(self.c2s, dim=1)
        return outs


class CBFuse(nn.Module):
    def __init__(self, idx):
        super().__init__()
        self.idx = idx

    def forward(self, xs):
        target_size = xs[-1].shape[2:]
        res = [F.interpolate(x[self.idx[i]], size=target_size, mode="nearest") for i, x in enumerate(xs[:-1])]
        out = torch.sum(torch.stack(res + xs[-1:]), dim=0)
        return out


class DFL(nn.Module):
    def __init__(self, c1=16):
        super().__init__()
        self.conv = nn.Conv2d(c1, 1, 1, bias=False).requires_grad_(False)


def make_divisible(x, d):
    return math.ceil(x / d) * d


class DDetect(nn.Module):
    def __init__(self, nc, ch):
        super().__init__()
        self.nl = len(ch)
        reg = 16
        c2, c3 = make_divisible(max((ch[0] // 4, reg * 4, 16)), 4), max((ch[0], min((nc * 2, 128))))
        self.cv2 = nn.ModuleList(nn.Sequential(Conv(x, c2, 3), Conv(c2, c2, 3, g=4), nn.Conv2d(c2, 4 * reg, 1, groups=4)) for x in ch)
        self.cv3 = nn.ModuleList(nn.Sequential(Conv(x, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for x in ch)
        self.dfl = DFL(reg)

    def forward(self, x):
        for i in range(self.nl):
            x[i] = torch.cat((self.cv2[i](x[i]), self.cv3[i](x[i])), 1)
        return x


class DualDDetect(nn.Module):
    def __init__(self, nc, ch):
        super().__init__()
        self.nl = len(ch) // 2
        reg = 16
        c2, c3 = make_divisible(max((ch[0] // 4, reg * 4, 16)), 4), max((ch[0], min((nc * 2, 128))))
        c4, c5 = make_divisible(max((ch[self.nl] // 4, reg * 4, 16)), 4), max((ch[self.nl], min((nc * 2, 128))))
        self.cv2 = nn.ModuleList(nn.Sequential(Conv(x, c2, 3), Conv(c2, c2, 3, g=4), nn.Conv2d(c2, 4 * reg, 1, groups=4)) for x in ch[:self.nl])
        self.cv3 = nn.ModuleList(nn.Sequential(Conv(x, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for x in ch[:self.nl])
        self.cv4 = nn.ModuleList(nn.Sequential(Conv(x, c4, 3), Conv(c4, c4, 3, g=4), nn.Conv2d(c4, 4 * reg, 1, groups=4)) for x in ch[self.nl:])
        self.cv5 = nn.ModuleList(nn.Sequential(Conv(x, c5, 3), Conv(c5, c5, 3), nn.Conv2d(c5, nc, 1)) for x in ch[self.nl:])
        self.dfl = DFL(reg)
        self.dfl2 = DFL(reg)

    def forward(self, x):
        d1 = []
        d2 = []
        for i in range(self.nl):
            d1.append(torch.cat((self.cv2[i](x[i]), self.cv3[i](x[i])), 1))
            d2.append(torch.cat((self.cv4[i](x[self.nl + i]), self.cv5[i](x[self.nl + i])), 1))
        return [d1, d2]


# ----------------------------------------------------------------------------- tables
# (from, module, args) as in the yaml files; args without c1, which the builder adds.
YOLOV9_S = [
    (-1, "conv", [32, 3, 2]), (-1, "conv", [64, 3, 2]), (-1, "elan1", [64, 64, 32]),
    (-1, "aconv", [128]), (-1, "rep", [128, 128, 64, 3]), (-1, "aconv", [192]),
    (-1, "rep", [192, 192, 96, 3]), (-1, "aconv", [256]), (-1, "rep", [256, 256, 128, 3]),
    (-1, "sppelan", [256, 128]), (-1, "up", []), ([-1, 6], "concat", []),
    (-1, "rep", [192, 192, 96, 3]), (-1, "up", []), ([-1, 4], "concat", []),
    (-1, "rep", [128, 128, 64, 3]), (-1, "aconv", [96]), ([-1, 12], "concat", []),
    (-1, "rep", [192, 192, 96, 3]), (-1, "aconv", [128]), ([-1, 9], "concat", []),
    (-1, "rep", [256, 256, 128, 3]), (8, "sppelan", [256, 128]), (-1, "up", []),
    ([-1, 6], "concat", []), (-1, "rep", [192, 192, 96, 3]), (-1, "up", []),
    ([-1, 4], "concat", []), (-1, "rep", [128, 128, 64, 3]),
    ([28, 25, 22, 15, 18, 21], "detect", []),
]
YOLOV9_C = [
    (-1, "silence", []), (-1, "conv", [64, 3, 2]), (-1, "conv", [128, 3, 2]),
    (-1, "rep", [256, 128, 64, 1]), (-1, "adown", [256]), (-1, "rep", [512, 256, 128, 1]),
    (-1, "adown", [512]), (-1, "rep", [512, 512, 256, 1]), (-1, "adown", [512]),
    (-1, "rep", [512, 512, 256, 1]), (-1, "sppelan", [512, 256]), (-1, "up", []),
    ([-1, 7], "concat", []), (-1, "rep", [512, 512, 256, 1]), (-1, "up", []),
    ([-1, 5], "concat", []), (-1, "rep", [256, 256, 128, 1]), (-1, "adown", [256]),
    ([-1, 13], "concat", []), (-1, "rep", [512, 512, 256, 1]), (-1, "adown", [512]),
    ([-1, 10], "concat", []), (-1, "rep", [512, 512, 256, 1]),
    (5, "cblinear", [[256]]), (7, "cblinear", [[256, 512]]), (9, "cblinear", [[256, 512, 512]]),
    (0, "conv", [64, 3, 2]), (-1, "conv", [128, 3, 2]), (-1, "rep", [256, 128, 64, 1]),
    (-1, "adown", [256]), ([23, 24, 25, -1], "cbfuse", [[0, 0, 0]]),
    (-1, "rep", [512, 256, 128, 1]), (-1, "adown", [512]), ([24, 25, -1], "cbfuse", [[1, 1]]),
    (-1, "rep", [512, 512, 256, 1]), (-1, "adown", [512]), ([25, -1], "cbfuse", [[2]]),
    (-1, "rep", [512, 512, 256, 1]), ([31, 34, 37, 16, 19, 22], "detect", []),
]
YOLOV9_M = [
    (-1, "silence", []), (-1, "conv", [32, 3, 2]), (-1, "conv", [64, 3, 2]), (-1, "rep", [128, 128, 64, 1]),
    (-1, "aconv", [240]), (-1, "rep", [240, 240, 120, 1]), (-1, "aconv", [360]),
    (-1, "rep", [360, 360, 180, 1]), (-1, "aconv", [480]), (-1, "rep", [480, 480, 240, 1]),
    (-1, "sppelan", [480, 240]), (-1, "up", []), ([-1, 7], "concat", []), (-1, "rep", [360, 360, 180, 1]),
    (-1, "up", []), ([-1, 5], "concat", []), (-1, "rep", [240, 240, 120, 1]), (-1, "aconv", [184]),
    ([-1, 13], "concat", []), (-1, "rep", [360, 360, 180, 1]), (-1, "aconv", [240]),
    ([-1, 10], "concat", []), (-1, "rep", [480, 480, 240, 1]), (5, "cblinear", [[240]]),
    (7, "cblinear", [[240, 360]]), (9, "cblinear", [[240, 360, 480]]), (0, "conv", [32, 3, 2]),
    (-1, "conv", [64, 3, 2]), (-1, "rep", [128, 128, 64, 1]), (-1, "aconv", [240]),
    ([23, 24, 25, -1], "cbfuse", [[0, 0, 0]]), (-1, "rep", [240, 240, 120, 1]), (-1, "aconv", [360]),
    ([24, 25, -1], "cbfuse", [[1, 1]]), (-1, "rep", [360, 360, 180, 1]), (-1, "aconv", [480]),
    ([25, -1], "cbfuse", [[2]]), (-1, "rep", [480, 480, 240, 1]), ([31, 34, 37, 16, 19, 22], "detect", []),
]
YOLOV9_E = [
    (-1, "silence", []), (-1, "conv", [64, 3, 2]), (-1, "conv", [128, 3, 2]),
    (-1, "rep", [256, 128, 64, 2]), (-1, "adown", [256]), (-1, "rep", [512, 256, 128, 2]),
    (-1, "adown", [512]), (-1, "rep", [1024, 512, 256, 2]), (-1, "adown", [1024]),
    (-1, "rep", [1024, 512, 256, 2]), (1, "cblinear", [[64]]), (3, "cblinear", [[64, 128]]),
    (5, "cblinear", [[64, 128, 256]]), (7, "cblinear", [[64, 128, 256, 512]]),
    (9, "cblinear", [[64, 128, 256, 512, 1024]]), (0, "conv", [64, 3, 2]),
    ([10, 11, 12, 13, 14, -1], "cbfuse", [[0, 0, 0, 0, 0]]), (-1, "conv", [128, 3, 2]),
    ([11, 12, 13, 14, -1], "cbfuse", [[1, 1, 1, 1]]), (-1, "rep", [256, 128, 64, 2]), (-1, "adown", [256]),
    ([12, 13, 14, -1], "cbfuse", [[2, 2, 2]]), (-1, "rep", [512, 256, 128, 2]), (-1, "adown", [512]),
    ([13, 14, -1], "cbfuse", [[3, 3]]), (-1, "rep", [1024, 512, 256, 2]), (-1, "adown", [1024]),
    ([14, -1], "cbfuse", [[4]]), (-1, "rep", [1024, 512, 256, 2]), (9, "sppelan", [512, 256]),
    (-1, "up", []), ([-1, 7], "concat", []), (-1, "rep", [512, 512, 256, 2]), (-1, "up", []),
    ([-1, 5], "concat", []), (-1, "rep", [256, 256, 128, 2]), (28, "sppelan", [512, 256]), (-1, "up", []),
    ([-1, 25], "concat", []), (-1, "rep", [512, 512, 256, 2]), (-1, "up", []), ([-1, 22], "concat", []),
    (-1, "rep", [256, 256, 128, 2]), (-1, "adown", [256]), ([-1, 39], "concat", []),
    (-1, "rep", [512, 512, 256, 2]), (-1, "adown", [512]), ([-1, 36], "concat", []),
    (-1, "rep", [512, 1024, 512, 2]), ([35, 32, 29, 42, 45, 48], "detect", []),
]
# yolov9-t is yolov9-s at half the width: every channel count halved (a conv's kernel and
# stride and RepNCSPELAN4's repeat count stay).
CHANNEL_ARGS = {"conv": 1, "aconv": 1, "elan1": 3, "rep": 3, "sppelan": 2}
YOLOV9_T = [(f, kind, [a // 2 if j < CHANNEL_ARGS.get(kind, 0) else a for j, a in enumerate(args)])
            for f, kind, args in YOLOV9_S]
# gelan-c is layers 1-22 of yolov9-c, renumbered, with a single head.
GELAN_C = [
    (-1, "conv", [64, 3, 2]), (-1, "conv", [128, 3, 2]), (-1, "rep", [256, 128, 64, 1]), (-1, "adown", [256]),
    (-1, "rep", [512, 256, 128, 1]), (-1, "adown", [512]), (-1, "rep", [512, 512, 256, 1]), (-1, "adown", [512]),
    (-1, "rep", [512, 512, 256, 1]), (-1, "sppelan", [512, 256]), (-1, "up", []), ([-1, 6], "concat", []),
    (-1, "rep", [512, 512, 256, 1]), (-1, "up", []), ([-1, 4], "concat", []), (-1, "rep", [256, 256, 128, 1]),
    (-1, "adown", [256]), ([-1, 12], "concat", []), (-1, "rep", [512, 512, 256, 1]), (-1, "adown", [512]),
    ([-1, 9], "concat", []), (-1, "rep", [512, 512, 256, 1]), ([15, 18, 21], "ddetect", []),
]
TABLES = {"yolov9-t": YOLOV9_T, "yolov9-s": YOLOV9_S, "yolov9-m": YOLOV9_M, "yolov9-c": YOLOV9_C, "yolov9-e": YOLOV9_E,
          "gelan-c": GELAN_C}


BLOCKS = {"conv": Conv, "aconv": AConv, "adown": ADown, "elan1": ELAN1, "rep": RepNCSPELAN4, "sppelan": SPPELAN}


class Model(nn.Module):
    def __init__(self, table, nc=80):
        super().__init__()
        layers, ch, save = [], [3], []
        for i, (f, kind, args) in enumerate(table):
            froms = f if isinstance(f, list) else [f]
            c1 = ch[-1] if f == -1 else ch[f] if isinstance(f, int) else None
            if kind in BLOCKS:  # modules whose first argument is the output channels
                m, c2 = BLOCKS[kind](c1, *args), args[0]
            elif kind == "up":
                m, c2 = nn.Upsample(None, 2, "nearest"), c1
            elif kind == "concat":
                m, c2 = Concat(), sum(ch[-1] if j == -1 else ch[j] for j in froms)
            elif kind == "silence":
                m, c2 = Silence(), c1
            elif kind == "cblinear":
                m, c2 = CBLinear(c1, args[0]), args[0]
            elif kind == "cbfuse":
                m, c2 = CBFuse(args[0]), ch[froms[-1]] if froms[-1] != -1 else ch[-1]
            elif kind == "detect":
                m, c2 = DualDDetect(nc, [ch[j] for j in froms]), None
            elif kind == "ddetect":
                m, c2 = DDetect(nc, [ch[j] for j in froms]), None
            else:
                raise ValueError(kind)
            m.f, m.i = f, i
            save.extend(x % i for x in froms if x != -1)
            layers.append(m)
            if i == 0:
                ch = []
            ch.append(c2)
        self.model = nn.Sequential(*layers)
        self.save = sorted(set(save))
        # The official Model.__init__ calls initialize_weights (utils/torch_utils.py), which sets
        # inplace = True on every nn.SiLU: act(bn(conv(x))) then overwrites the batch norm's output
        # and autograd keeps a clone of it. (Results measured before 2026-12-04 ran SiLU out of
        # place; they were measured again.)
        for mod in self.modules():
            if isinstance(mod, nn.SiLU):
                mod.inplace = True


def run_layer(m, x, y):
    if m.f != -1:
        x = y[m.f] if isinstance(m.f, int) else [x if j == -1 else y[j] for j in m.f]
    return m(x)


def reads(m, i):
    """Absolute indices of the layers whose outputs layer i reads."""
    f = m.f if isinstance(m.f, list) else [m.f]
    return [i - 1 if j == -1 else j for j in f]


def forward_once(model, x):
    y = {}
    for m in model.model:
        x = run_layer(m, x, y)
        if m.i in model.save:
            y[m.i] = x
    return x


def forward_segments(model, x, k):
    layers = list(model.model)
    n = len(layers)
    size = n // k
    last = {}
    for i, m in enumerate(layers):
        for j in reads(m, i):
            last[j] = max(last.get(j, -1), i)
    y = {}
    for c in range(k - 1):
        a, b = c * size, (c + 1) * size
        ins = sorted({j for i in range(a, b) for j in reads(layers[i], i) if j < a - 1 or (j == a - 1 and j in y)})
        outs = [j for j in range(a, b) if j in model.save]

        def fn(x, *args, a=a, b=b, ins=ins, outs=outs):
            yy = dict(zip(ins, args))
            for i in range(a, b):
                x = run_layer(layers[i], x, yy)
                if i in model.save:
                    yy[i] = x
            return (x, *[yy[j] for j in outs])

        res = checkpoint(fn, x, *[y[j] for j in ins], use_reentrant=False)
        x = res[0]
        for j, v in zip(outs, res[1:]):
            y[j] = v
        del res
        for j in [j for j in y if last.get(j, -1) < b]:
            del y[j]
    for i in range((k - 1) * size, n):
        x = run_layer(layers[i], x, y)
        if i in model.save:
            y[i] = x
    return x


# ----------------------------------------------------------------------------- tracing
def where(e):
    for fr in e.get("frames") or []:
        if os.path.basename(fr.get("filename", "")) == HERE:
            return "%s:%d %s" % (HERE, fr.get("line", 0), fr.get("name", ""))
    return ""


def events(entries):
    out = []
    for e in entries:
        act = e.get("action")
        if act == "alloc":
            out.append(["a", e["addr"], e["size"], where(e)])
        elif act == "free_completed":
            out.append(["f", e["addr"], e["size"], where(e)])
    return out


def flatten(out):
    """The head's outputs: [d1, d2] of YOLOv9's DualDDetect, or the list of DDetect."""
    for o in out:
        if isinstance(o, (list, tuple)):
            yield from flatten(o)
        else:
            yield o


def step(model, x, k, amp, dtype=torch.float16):
    with torch.autocast("cuda", dtype, enabled=amp):
        out = forward_segments(model, x, k) if k > 1 else forward_once(model, x)
    torch.cuda.synchronize()
    after_fwd = torch.cuda.memory_allocated()
    fwd_peak = torch.cuda.max_memory_allocated()
    loss = sum(o.sum() for o in flatten(out))
    loss.backward()
    del out, loss
    torch.cuda.synchronize()
    return after_fwd, fwd_peak


def scenario(model, cfg, batch, img, amp, k, trace, dtype=torch.float16, half=False):
    """dtype: autocast's type when amp (float16, or bfloat16 for the "bf16" precision); half: the
    model was made half (model.half()) and the input is half too."""
    torch.cuda.empty_cache()
    x = torch.randn(batch, 3, img, img, device=DEV, dtype=torch.float16 if half else torch.float32)
    step(model, x, k, amp, dtype=dtype)  # warm-up
    torch.cuda.synchronize()
    if trace:
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=2000000)
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    m0 = torch.cuda.memory_allocated()
    after_fwd, fwd_peak = step(model, x, k, amp, dtype=dtype)
    st = torch.cuda.memory_stats()
    res = {"m0": m0, "after_fwd": after_fwd, "fwd_peak": fwd_peak, "peak": st["allocated_bytes.all.peak"],
           "peak_req": st["requested_bytes.all.peak"], "peak_reserved": st["reserved_bytes.all.peak"],
           "after_bwd": torch.cuda.memory_allocated()}
    ev = None
    if trace:
        ev = events(torch.cuda.memory._snapshot()["device_traces"][0])
        torch.cuda.memory._record_memory_history(enabled=None)
    del x
    return res, ev


def measured(path):
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path):
        d = json.loads(line)
        if d.get("kind") == "model_step":
            out[(d["cfg"], d["batch"], d["img"], d["amp"], d["segments"])] = d["measured"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="calibration/results")
    ap.add_argument("--groundtruth", default="../shared/groundtruth/calibration.jsonl")
    ap.add_argument("--fresh", action="store_true",
                    help="run each scenario in a process of its own (the allocator's history is then the same as a fresh process's)")
    ap.add_argument("--json", default="yolov9_segments.json", help="name of the results file under --out")
    ap.add_argument("--scenarios", default="yolov9-s:8:640:amp:4:t,yolov9-s:32:640:amp:4:t,yolov9-s:4:640:fp32:4:t,"
                    "yolov9-s:32:640:fp32:4:,yolov9-s:8:640:amp:0:t,yolov9-c:8:640:amp:2:t,yolov9-c:1:640:fp32:2:t,"
                    "yolov9-c:1:640:amp:2:t,yolov9-c:1:640:fp32:4:t")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = False
    if a.fresh and "," in a.scenarios:
        lines = []
        for spec in a.scenarios.split(","):
            cmd = [sys.executable, __file__, "--out", a.out, "--groundtruth", a.groundtruth, "--scenarios", spec,
                   "--json", "fresh-%s.json" % spec.replace(":", "-")]
            print(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout, end="", flush=True)
            path = os.path.join(a.out, "fresh-%s.json" % spec.replace(":", "-"))
            lines += json.load(open(path))["scenarios"]
            os.remove(path)
        with open(os.path.join(a.out, a.json), "w") as fh:
            json.dump({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                       "gpu": torch.cuda.get_device_name(DEV), "fresh": True, "scenarios": lines}, fh, indent=1)
        return
    gt = measured(a.groundtruth)
    os.makedirs(a.out, exist_ok=True)
    results = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
               "gpu": torch.cuda.get_device_name(DEV), "scenarios": []}
    models = {}
    for spec in a.scenarios.split(","):
        cfg, batch, img, prec, k, tr = spec.split(":")
        if prec not in ("fp32", "amp", "bf16", "half"):
            raise ValueError("%s: precision %r: want fp32, amp (autocast float16), bf16 (autocast bfloat16) "
                             "or half (model.half(), a half input, no autocast)" % (spec, prec))
        half = prec == "half"
        batch, img, k, amp = int(batch), int(img), int(k), prec in ("amp", "bf16")
        dtype = torch.bfloat16 if prec == "bf16" else torch.float16
        if (cfg, half) not in models:
            models.clear()
            torch.cuda.empty_cache()
            torch.manual_seed(0)
            m = Model(TABLES[cfg]).to(DEV).train()
            if half:
                m.half()  # the ground truth's "half": BatchNorm in float16 too
            models[(cfg, half)] = m
            print("%s: %d params, %d layers, save %s" % (cfg, sum(p.numel() for p in m.parameters()), len(m.model), m.save))
        res, ev = scenario(models[(cfg, half)], cfg, batch, img, amp, k, tr == "t", dtype=dtype, half=half)
        g = {} if prec in ("bf16", "half") else gt.get((cfg, batch, img, amp, k), {})  # the ground truth's amp is float16
        line = {"cfg": cfg, "batch": batch, "img": img, "amp": amp, "segments": k, "result": res, "groundtruth": g}
        if prec == "bf16":
            line["amp_dtype"] = "bfloat16"
        if half:
            line["half"] = True
        results["scenarios"].append(line)
        print("%s b%d %d %s k%d:" % (cfg, batch, img, prec, k),
              " ".join("%s %.1f (gt %s)" % (f, res[f] / 2**20, "%.1f" % (g[f] / 2**20) if f in g else "-") for f in
                       ("m0", "after_fwd", "fwd_peak", "peak", "after_bwd")), flush=True)
        if ev is not None:
            name = "trace-%s-b%d-%s-k%d.json" % (cfg.replace("yolov9-", ""), batch, prec, k)
            os.makedirs(os.path.join(a.out, "yolov9_segments"), exist_ok=True)
            with open(os.path.join(a.out, "yolov9_segments", name), "w") as fh:
                json.dump({"result": res, "events": ev}, fh)
    with open(os.path.join(a.out, a.json), "w") as fh:
        json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
