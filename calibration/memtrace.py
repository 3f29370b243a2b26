"""Helpers shared by the calibration scripts: the caching allocator's event
history (torch.cuda.memory._record_memory_history), compacted to
['a'|'f'|'m', requested_size, id] lists.

Not a script: the scripts import it (they run as python3 calibration/NAME.py,
which puts this folder on sys.path).
"""
import torch

MARK_BWD_BEGIN = 37  # a 37-byte allocation marks "the op's backward starts"
MARK_BWD_END = 41  # a 41-byte allocation marks "the gradient reached the input's producer"


def trace_reset(context=None):
    """Disable (clears the ring buffer) and re-enable allocator history."""
    try:
        torch.cuda.memory._record_memory_history(enabled=None)
    except Exception:
        pass
    try:
        torch.cuda.memory._record_memory_history(
            enabled="all", context=context, stacks="python", max_entries=1000000)
    except TypeError:
        torch.cuda.memory._record_memory_history(max_entries=1000000)


def trace_entries():
    traces = torch.cuda.memory._snapshot()["device_traces"]
    return traces[0] if traces else []


def trace_mark():
    return len(trace_entries())


def compact(entries):
    """[['a'|'f', requested_size, id], ...]; ids > 0 allocated in this phase, ids < 0 were
    allocated before it. Markers become ['m', 37|41, 0] (their frees are dropped)."""
    live, out, nxt, pre = {}, [], 1, -1
    markers = set()
    for e in entries:
        act, addr, size = e.get("action"), e.get("addr"), e.get("size")
        if act == "alloc":
            if size in (MARK_BWD_BEGIN, MARK_BWD_END):
                markers.add(addr)
                out.append(["m", size, 0])
                continue
            live[addr] = nxt
            out.append(["a", size, nxt])
            nxt += 1
        elif act == "free_completed":
            if addr in markers:
                markers.discard(addr)
                continue
            if addr in live:
                out.append(["f", size, live.pop(addr)])
            else:
                out.append(["f", size, pre])
                pre -= 1
    return out


def mark(n, device="cuda:0"):
    """Allocates and frees n bytes: a marker in the event history."""
    t = torch.empty(n, dtype=torch.uint8, device=device)
    del t


class Src(torch.autograd.Function):
    """Turns a leaf into a non-leaf activation; its backward drops the gradient
    after a MARK_BWD_END marker."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        mark(MARK_BWD_END)
        return None
