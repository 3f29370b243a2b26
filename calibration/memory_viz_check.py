"""Opens a snapshot that onnxmem wrote (onnxmem timeline -snapshot FILE.pickle) with PyTorch's own
memory tools, as a user would: python -m torch.cuda._memory_viz trace_plot and segment_plot (the
HTML viewers), and the text summaries segsum, trace and stats of torch.cuda._memory_viz.
Usage: python3 calibration/memory_viz_check.py FILE.pickle OUTDIR
"""
import os
import pickle
import subprocess
import sys

from torch.cuda import _memory_viz as viz

path, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
for cmd in ("trace_plot", "segment_plot"):
    r = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", cmd, path, "-o", os.path.join(out, cmd + ".html")],
                       capture_output=True, text=True)
    print(cmd, "rc", r.returncode, r.stderr[-400:], os.path.getsize(os.path.join(out, cmd + ".html")) if r.returncode == 0 else "")
data = pickle.load(open(path, "rb"))
for name in ("segsum", "trace", "memory"):
    f = getattr(viz, name, None)
    if f is None:
        print(name, "absent")
        continue
    try:
        s = f(data)
        print(name, "ok", len(s), repr(s[:600]))
    except Exception as e:  # noqa
        print(name, "failed", repr(e)[:400])
