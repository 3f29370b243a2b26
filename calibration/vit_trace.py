"""Allocation traces of ViT model steps under autocast, to read the transformer's backward.

The same step as torchvision_ops.py's part 3 (fresh process per model, model.train(), x
resident, the cache emptied, two steps of zero_grad(set_to_none=True), the forward under
autocast float16, out.sum(), backward, del out; the second traced) for vit_b_32 at batch 8 and
32 and vit_b_16 at batch 8, whose AMP peaks onnxmem predicted 2-2.5% low
(docs/accuracy.md).
Usage: python3 calibration/vit_trace.py --out DIR   (writes DIR/vit_steps.json; about a minute)

What the traces show against onnxmem's program (an alignment of the two event lists), which made
the ViT AMP peaks read 2-2.5% low; the second and third are now simulated (schedule/reduce.go,
from reduce_staging.py's measurements; the table's patch embeddings from patchify_sweep.py),
which brought every ViT step within 0.9% (vit_steps_more.json, vit_b_32 at batch 128 in fp32,
agrees with the simulated step's requested peak above its start to the byte):
  - the forward of every encoder block: nn.MultiheadAttention's packed in-projection output
    (B*L*3E float16) is copied by .contiguous() and the original freed, one transient of that
    size that onnxmem leaves out (it is not saved, so after_fwd agrees);
  - the backward of a Linear on [B, L, E] (MatMul + Add in the export): the bias gradient, a sum
    over B*L rows, takes a float32 staging buffer of 2 x rows x outputs x 4 bytes and a
    semaphore of outputs/32 bytes at 1,600 rows (vit_b_32, batch 32: 37.5 MiB for the 3072-wide
    fc1, 9.4 MiB for fc2) but none at 400 rows (batch 8): PyTorch's reduction splits the rows over
    thread blocks with a global-memory reduction (aten/src/ATen/native/cuda/Reduce.cuh,
    setReduceConfig and global_memory_size); at batch 32 the peak falls inside fc1's;
  - vit_b_32 at batch 8: the peak is the patch embedding's (3 -> 768, 32x32, stride 32, padding 0)
    backward-filter workspace, 19,607,696 bytes, where cuDNNWorkspaceRule gives 1.25 x OUT
    (752,640); conv_sweep.py pads k // 2, so the table held none of these.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchvision_ops  # noqa: E402

RUNS = [("vit_b_32", [(8, True), (32, True)]), ("vit_b_16", [(8, True)])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", help='other runs as JSON, e.g. [["vit_b_32", [[128, false]]]]; the file is then vit_steps_more.json')
    a = ap.parse_args()
    runs = json.loads(a.runs) if a.runs else RUNS
    child = torchvision_ops.STEP_CHILD.replace("for B, amp in [(8, False), (8, True), (64, False)]:", "for B, amp in json.loads(sys.argv[2]):")
    res = []
    for name, cfgs in runs:
        p = subprocess.run([sys.executable, "-c", child % os.path.dirname(os.path.abspath(__file__)), name, json.dumps(cfgs)],
                           capture_output=True, text=True)
        try:
            res.extend(json.loads(p.stdout.strip().splitlines()[-1]))
        except Exception:  # noqa
            res.append({"model": name, "error": (p.stdout + p.stderr)[-800:]})
        print(name, "done", flush=True)
    with open(os.path.join(a.out, "vit_steps_more.json" if a.runs else "vit_steps.json"), "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main()
