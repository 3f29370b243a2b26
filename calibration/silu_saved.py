"""Which tensor does a YOLOv9 Conv (conv, BatchNorm, SiLU) keep for the backward?

The ground truth's traces (../shared/groundtruth/traces) free, when a Conv module's output is
dropped, the block that BatchNorm allocated and keep the one SiLU allocated until the
backward, although SiLU's derivative (derivatives.yaml: silu_backward(grad, self)) saves
its input. This script runs act(bn(conv(x))) on the H200, in float32 and under autocast
(float16), and prints:
  - the tensors SiluBackward0 and the BatchNorm backward hold (data_ptr compared with the
    outputs of conv, bn and act);
  - the allocator's events of `r = x2 + act(bn(conv(x)))` (the temporary dropped after the
    add), with each block named by the tensor whose data_ptr it is.

Rerun on a GPU machine: python3 calibration/silu_saved.py > calibration/results/silu_saved.txt
"""
import torch
import torch.nn as nn

DEV = torch.device("cuda:0")


def main():
    torch.backends.cudnn.benchmark = False
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), torch.cuda.get_device_name(DEV))
    conv = nn.Conv2d(32, 32, 3, 1, 1, bias=False).to(DEV)
    bn = nn.BatchNorm2d(32).to(DEV)
    act = nn.SiLU()
    x = torch.randn(8, 32, 160, 160, device=DEV, requires_grad=True)
    x2 = torch.randn(8, 32, 160, 160, device=DEV)
    for amp in (False, True):
        with torch.autocast("cuda", torch.float16, enabled=amp):
            c = conv(x)
            y = bn(c)
            z = act(y)
        names = {c.data_ptr(): "conv", y.data_ptr(): "bn", z.data_ptr(): "act"}
        g = z.grad_fn
        saved = {k: getattr(g, k) for k in dir(g) if k.startswith("_saved_")}
        print("amp" if amp else "fp32", g.name(), {k: names.get(v.data_ptr(), "other") if torch.is_tensor(v) else v
                                                   for k, v in saved.items()})
        gb = y.grad_fn
        print("  ", gb.name(), {k: names.get(getattr(gb, k).data_ptr(), "other") for k in dir(gb)
                                if k.startswith("_saved_") and torch.is_tensor(getattr(gb, k))})
        del c, y, z, g, gb, saved
        torch.cuda.synchronize()
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
        with torch.autocast("cuda", torch.float16, enabled=amp):
            r = x2 + act(bn(conv(x)))
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        for e in snap["device_traces"][0]:
            if e["action"] in ("alloc", "free_requested"):
                print("   %-14s %14d %10d" % (e["action"], e["addr"], e["size"]))
        print("   r at", r.data_ptr(), "; the add's grad_fn", r.grad_fn.name())
        del r


if __name__ == "__main__":
    main()
