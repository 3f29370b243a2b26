"""Training-mode exports and measured steps of Hugging Face transformers' text models (issue 38).

timm_models.py's procedure, for transformers' own modules, with token inputs. Each network is
built from its config with random weights (torch.manual_seed(0)), wrapped so that its forward takes
input_ids (int64, [batch, sequence]) and returns the logits alone (use_cache=False for decoders),
exported in training mode (torch.onnx.export(..., training=TrainingMode.TRAINING,
do_constant_folding=False, dynamo=False, opset 17, input "input_ids" with dims "batch" and
"sequence", output "logits") at batch 2 and sequence 128, its initializers stripped of their data
(those of 256 bytes or less kept: shape constants), and measured, every scenario in a fresh process:
  - model: param_bytes, buffer_bytes, alloc_after_load, the transformers version and the attention
    implementation the config resolved to;
  - model_step (the ground truth's model step): the model in train mode (dropout on, as the
    configs set it), zero_grad(set_to_none=True), ids = randint(vocab, (B, L)) resident, the
    forward (under fp16 autocast with amp), loss = logits.sum() outside autocast (in the logits'
    type), backward, del logits; the same step twice, the second measured after
    reset_peak_memory_stats: m0, after_fwd, peak, peak_req, peak_reserved (HF_FLOAT_SUM=1 sums
    logits.float() instead, as the first run did: its AMP model steps are kept in
    hf_models_float_sum.jsonl);
  - train_step: the same with torch.optim.AdamW(model.parameters(), lr=1e-4) (transformers'
    default optimizer; foreach on CUDA, weight decay 0.01) and torch.amp.GradScaler(enabled=amp):
    zero_grad(set_to_none=True), forward and, inside its autocast, transformers' loss on the ids
    as labels (a decoder's: logits.float(), the labels shifted, cross_entropy; a masked LM's:
    cross_entropy of the logits as they are); HF_LOSS=sum for logits.float().sum() instead,
    what hf_models_sum_train.jsonl holds;
    scaler.scale(loss).backward(), scaler.step(opt), scaler.update(); steps run until one has made
    the optimizer's state (GradScaler skips 16 to 21 at first), and the next is measured.
With --trace SPEC the allocator's history of that scenario's measured step is kept (action, size,
the innermost transformers/torch frame) in DIR/hf_traces.jsonl.gz; with HF_TRACE_FROM=warmup too
it starts before the warm-up step, with every action's full name (segment_alloc, segment_free,
free_requested, …) and "measured" marking where the measured step begins (the reserved residual
of the tied heads' float32 steps, issue 38).
Usage: python3 calibration/hf_models.py --out DIR [--models gpt2,bert] [--jobs 4]
Writes DIR/hf_models.jsonl (the ground truth's line format with "seq"; the export and model lines,
which predict does not take, were moved to results/hf_models_meta.jsonl) and DIR/hf/MODEL-train.onnx.
"""
import argparse
import concurrent.futures
import gzip
import json
import os
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))

MODELS = ["gpt2", "gpt2-eager", "bert", "llama"]
MORE = ["qwen2", "distilbert", "opt"]  # a second sample: Qwen2 (biased q/k/v, tied head), DistilBERT, OPT
# A third sample, chosen after the engine was fitted to the first two: Mistral (sliding-window mask),
# Phi (partial rotary, gelu_new, attention and MLP in parallel), Gemma (GeGLU, (1 + w) RMSNorm, a scaled
# embedding, head dim 256), RoBERTa (position ids from the mask), ALBERT (one layer's weights shared by
# all, a factorised embedding), GPT-Neo (local attention layers).
THIRD = ["mistral", "phi", "gemma", "roberta", "albert", "gpt_neo"]
SCENARIOS = [("model_step", amp, b, l) for amp in (False, True) for l in (128, 512) for b in (1, 4, 8)] + \
            [("train_step", amp, 4, 512) for amp in (False, True)] + [("train_step", True, 8, 128)]

CHILD = r'''
import io, json, os, sys, traceback
sys.path.insert(0, %(here)r)
import torch, transformers
from torchvision_more import fields, ld
name, out_dir, what = sys.argv[1], sys.argv[2], sys.argv[3]
float_sum = os.environ.get("HF_FLOAT_SUM") == "1"  # the first run's model steps: out.float().sum()
loss_kind = os.environ.get("HF_LOSS", "ce")  # a train step's loss: "ce" (transformers') or "sum"
trace = len(sys.argv) > 4 and sys.argv[4] == "trace"
trace_warm = trace and os.environ.get("HF_TRACE_FROM") == "warmup"

def build(name):
    torch.manual_seed(0)
    if name.startswith("gpt2"):
        cfg = transformers.GPT2Config()
        if name == "gpt2-eager":
            cfg._attn_implementation = "eager"
        return transformers.GPT2LMHeadModel(cfg), True
    if name == "bert":
        return transformers.BertForMaskedLM(transformers.BertConfig()), False
    if name == "llama":
        cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=6,
                                       num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=2048)
        return transformers.LlamaForCausalLM(cfg), True
    if name == "qwen2":
        cfg = transformers.Qwen2Config(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=6,
                                       num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=2048,
                                       tie_word_embeddings=True)
        return transformers.Qwen2ForCausalLM(cfg), True
    if name == "distilbert":
        return transformers.DistilBertForMaskedLM(transformers.DistilBertConfig()), False
    if name == "opt":
        cfg = transformers.OPTConfig(hidden_size=768, num_hidden_layers=6, ffn_dim=3072, num_attention_heads=12,
                                     vocab_size=50272, word_embed_proj_dim=768)
        return transformers.OPTForCausalLM(cfg), True
    small = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=6, num_attention_heads=12,
                 max_position_embeddings=2048)
    if name == "mistral":
        cfg = transformers.MistralConfig(vocab_size=32000, num_key_value_heads=4, sliding_window=256, **small)
        return transformers.MistralForCausalLM(cfg), True
    if name == "phi":
        cfg = transformers.PhiConfig(vocab_size=32000, partial_rotary_factor=0.5, **small)
        return transformers.PhiForCausalLM(cfg), True
    if name == "gemma":
        cfg = transformers.GemmaConfig(vocab_size=32000, num_key_value_heads=4, head_dim=256, **small)
        return transformers.GemmaForCausalLM(cfg), True
    if name == "roberta":
        return transformers.RobertaForMaskedLM(transformers.RobertaConfig(vocab_size=50265)), False
    if name == "albert":
        return transformers.AlbertForMaskedLM(transformers.AlbertConfig(vocab_size=30000, embedding_size=128,
                                                                         hidden_size=768, num_attention_heads=12,
                                                                         intermediate_size=3072)), False
    if name == "gpt_neo":
        cfg = transformers.GPTNeoConfig(vocab_size=50257, hidden_size=768, num_layers=6, num_heads=12,
                                        attention_types=[[["global", "local"], 3]], window_size=256,
                                        max_position_embeddings=2048)
        return transformers.GPTNeoForCausalLM(cfg), True
    raise SystemExit("unknown model " + name)

class LM(torch.nn.Module):
    def __init__(self, m, decoder):
        super().__init__()
        self.m, self.decoder = m, decoder
    def forward(self, input_ids):
        if self.decoder:
            return self.m(input_ids=input_ids, use_cache=False, return_dict=True).logits
        return self.m(input_ids=input_ids, return_dict=True).logits

def strip(b, depth=0):
    # ModelProto 7 graph; GraphProto 5 initializer; TensorProto data fields dropped when over 256 bytes.
    out = []
    for num, _, raw, payload in fields(b):
        if depth == 0 and num == 7:
            out.append(ld(7, strip(payload, 1)))
        elif depth == 1 and num == 5 and len(payload) > 320:
            out.append(ld(5, b"".join(r for n, _, r, _ in fields(payload) if n not in (4, 5, 6, 7, 9, 10, 11, 13, 14))))
        else:
            out.append(raw)
    return b"".join(out)

rec = []
try:
    hf, decoder = build(name)
    model = LM(hf, decoder)
    model.train()
    vocab = hf.config.vocab_size
    common = {"cfg": name, "model": "hf/%%s-train.onnx" %% name}
    if what == "export":
        # transformers' masking_utils looks for packed sequences with torch.diff, which torch.onnx's
        # TorchScript exporter has no symbolic for: the same difference as two slices, for the export.
        def diff(x, n=1, dim=-1, prepend=None, append=None):
            assert n == 1
            if prepend is not None:
                x = torch.cat([prepend, x], dim)
            if append is not None:
                x = torch.cat([x, append], dim)
            k = x.size(dim)
            return x.narrow(dim, 1, k - 1) - x.narrow(dim, 0, k - 1)
        torch.diff = diff
        torch.Tensor.diff = diff
        ids = torch.randint(vocab, (2, 128))
        buf = io.BytesIO()
        torch.onnx.export(model, (ids,), buf, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          dynamo=False, opset_version=17, input_names=["input_ids"], output_names=["logits"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch", 1: "sequence"}})
        with open(os.path.join(out_dir, "hf", name + "-train.onnx"), "wb") as f:
            f.write(strip(buf.getvalue()))
        print(json.dumps([{"kind": "export", **common, "bytes": len(buf.getvalue())}]))
        sys.exit(0)
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    torch.cuda.init()
    model = model.to(dev)
    pb = sum(p.numel() * p.element_size() for p in model.parameters())
    bb = sum(b.numel() * b.element_size() for b in model.buffers())
    kind, amp, B, L = what.split(":")
    amp, B, L = amp == "amp", int(B), int(L)
    if kind == "model":
        rec.append({"kind": "model", **common, "param_bytes": pb, "buffer_bytes": bb,
                    "alloc_after_load": torch.cuda.memory_allocated(), "transformers": transformers.__version__,
                    "torch": torch.__version__, "attn_implementation": hf.config._attn_implementation,
                    "device_name": torch.cuda.get_device_name()})
        print(json.dumps(rec))
        sys.exit(0)
    ids = torch.randint(vocab, (B, L), device=dev)
    opt = scaler = None
    if kind == "train_step":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        scaler = torch.amp.GradScaler("cuda", enabled=amp)
    def step():
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            o = model(ids)
            if kind == "train_step" and loss_kind == "ce":
                # transformers' own losses, inside the model's forward (under autocast): a decoder's
                # ForCausalLMLoss upcasts the logits and shifts the labels; a masked LM's
                # CrossEntropyLoss takes the logits as they are (autocast's fp32 list casts them).
                V = o.shape[-1]
                if decoder:
                    labels = torch.nn.functional.pad(ids, (0, 1), value=-100)[..., 1:].contiguous()
                    loss = torch.nn.functional.cross_entropy(o.float().view(-1, V), labels.view(-1), ignore_index=-100)
                else:
                    loss = torch.nn.functional.cross_entropy(o.view(-1, V), ids.view(-1))
        # The model step's loss is the ground truth's, out.sum() in the output's type; with --loss sum a
        # train step's upcasts a half output first (out.float().sum()), where a float16 sum of a
        # vocabulary's logits overflows and GradScaler would skip every step.
        if kind != "train_step" or loss_kind != "ce":
            loss = o.float().sum() if o.dtype != torch.float32 and (kind == "train_step" or float_sum) else o.sum()
        fwd = torch.cuda.memory_allocated()
        if opt is None:
            loss.backward()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        del o, loss
        return fwd
    r = {"kind": kind, **common, "batch": B, "seq": L, "amp": amp}
    if kind == "train_step":
        r.update(optimizer="AdamW", ema=False)
    try:
        if trace_warm:
            torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=2000000)
        step()
        warm = 1
        # Under fp16 AMP GradScaler skips the optimizer's step while the scaled gradients overflow:
        # step until one has made AdamW's state, as train_step.py does.
        while opt is not None and not opt.state and warm < 40:
            step()
            warm += 1
        if opt is not None:
            r["warm_steps"] = warm
        # The measured step is one whose optimizer step GradScaler ran: a skipped one is retried
        # (up to 8 times; "skipped" says whether the last was).
        for attempt in range(8):
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            if trace and not trace_warm:
                torch.cuda.memory._record_memory_history(enabled=None)
                torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=2000000)
            if trace_warm:
                mark = len(torch.cuda.memory._snapshot()["device_traces"][0])
            m0 = torch.cuda.memory_allocated()
            scale = scaler.get_scale() if scaler is not None and amp else None
            fwd = step()
            torch.cuda.synchronize()
            if scale is None:
                break
            r["skipped"] = scaler.get_scale() < scale
            r["retries"] = attempt
            if not r["skipped"]:
                break
        st = torch.cuda.memory_stats()
        r["measured"] = {"m0": m0, "after_fwd": fwd, "peak": st["allocated_bytes.all.peak"], "peak_req": st["requested_bytes.all.peak"],
                         "peak_reserved": st["reserved_bytes.all.peak"], "end": torch.cuda.memory_allocated(),
                         "segments": st["segment.all.current"]}
        if trace:
            ev = []
            for i, e in enumerate(torch.cuda.memory._snapshot()["device_traces"][0]):
                if trace_warm and i == mark:
                    ev.append(["measured", 0, 0, ""])
                fr = [f for f in (e.get("frames") or []) if "transformers" in f["filename"] or "/torch/" in f["filename"]]
                where = "%%s:%%d:%%s" %% (os.path.basename(fr[0]["filename"]), fr[0]["line"], fr[0]["name"]) if fr else ""
                ev.append([e["action"] if trace_warm else e["action"][:2], e["size"], e["addr"] %% 100000007, where])
            r["trace"] = ev
    except torch.OutOfMemoryError:
        r["measured"] = {"oom": True}
    rec.append(r)
except Exception as e:
    rec.append({"kind": "error", "cfg": name, "what": what, "error": traceback.format_exc()[-1500:]})
print(json.dumps(rec))
'''


def one(name, out, what, timeout, trace=False):
    args = [sys.executable, "-c", CHILD % {"here": HERE}, name, out, what] + (["trace"] if trace else [])
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        return json.loads(p.stdout.strip().splitlines()[-1])
    except Exception as e:  # noqa
        err = repr(e)[:300]
        if "p" in locals():
            err += " " + (p.stdout + p.stderr)[-1500:]
        return [{"kind": "error", "cfg": name, "what": what, "error": err}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--timeout", type=int, default=400)
    ap.add_argument("--trace", default="model_step:amp:4:128", help="the scenario whose allocator history is kept, per model")
    ap.add_argument("--scenarios", default="", help="kind:amp|fp32:B:L,... in place of the default list")
    ap.add_argument("--jsonl", default="hf_models.jsonl")
    ap.add_argument("--no-model", action="store_true", help="skip the export and the model line")
    a = ap.parse_args()
    os.makedirs(os.path.join(a.out, "hf"), exist_ok=True)
    names = a.models.split(",")
    scen = [("%s:%s:%d:%d" % (k, "amp" if amp else "fp32", b, l)) for k, amp, b, l in SCENARIOS]
    if a.scenarios:
        scen = a.scenarios.split(",")
    jobs = [] if a.no_model else [(n, "export") for n in names] + [(n, "model:fp32:0:0") for n in names]
    jobs += [(n, s) for n in names for s in scen]
    # Each finished process's lines go at once to DIR/JSONL.partial (traces left out), so that a
    # call cut short keeps what it measured.
    lock = threading.Lock()
    partial = open(os.path.join(a.out, a.jsonl + ".partial"), "a")

    def run(j):
        got = one(j[0], a.out, j[1], a.timeout, j[1] == a.trace)
        with lock:
            for r in got:
                partial.write(json.dumps({k: v for k, v in r.items() if k != "trace"}) + "\n")
            partial.flush()
        return got
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        results = list(pool.map(run, jobs))
    partial.close()
    traces = []
    with open(os.path.join(a.out, a.jsonl), "w") as f:
        for (name, what), got in zip(jobs, results):
            for r in got:
                if "trace" in r:
                    traces.append({"cfg": name, "what": what, "events": r.pop("trace")})
                if r["kind"] == "error":
                    print(name, what, "ERROR", r["error"][-600:], flush=True)
                f.write(json.dumps(r) + "\n")
    with gzip.open(os.path.join(a.out, a.jsonl.replace(".jsonl", "_traces.jsonl.gz")), "wt") as f:
        for t in traces:
            f.write(json.dumps(t) + "\n")
    print("wrote", len(jobs), "jobs")


if __name__ == "__main__":
    main()
