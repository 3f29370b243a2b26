"""Memory snapshots taken on the GPU, for onnxmem diff to read back.

torchvision's resnet18 (weights=None) in train mode, batch 8 at 224x224, fp32 and under autocast
float16, in a fresh process each, run as ../shared/groundtruth/torchvision.jsonl's model steps:
x resident, a warm-up step, zero_grad(set_to_none=True), then torch.cuda.memory.
_record_memory_history(stacks="python") just before the measured step (forward, out.sum(),
backward, del out) and torch.cuda.memory._dump_snapshot() after it.
Usage: python3 calibration/gpu_snapshot.py --out DIR
(writes DIR/resnet18-b8-fp32.pickle and DIR/resnet18-b8-amp.pickle; seconds)
"""
import argparse
import os
import subprocess
import sys

CHILD = r"""
import sys, torch, torchvision
amp = sys.argv[1] == "amp"
torch.backends.cudnn.benchmark = False
model = torchvision.models.resnet18(weights=None).cuda().train()
x = torch.randn(8, 3, 224, 224, device="cuda")
for step in range(2):
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    if step == 1:
        torch.cuda.memory._record_memory_history(stacks="python")
    with torch.autocast("cuda", torch.float16, enabled=amp):
        o = model(x)
    loss = o.sum()
    loss.backward()
    del o, loss
    torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(sys.argv[2])
torch.cuda.memory._record_memory_history(enabled=None)
print("peak", torch.cuda.max_memory_allocated())
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    for prec in ("fp32", "amp"):
        path = os.path.join(a.out, "resnet18-b8-%s.pickle" % prec)
        p = subprocess.run([sys.executable, "-c", CHILD, prec, path], capture_output=True, text=True)
        print(prec, p.stdout.strip(), p.stderr.strip()[-300:], os.path.getsize(path) if os.path.exists(path) else "missing")


if __name__ == "__main__":
    main()
