package generic

import (
	"fmt"

	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// The generic family's training loss: cross-entropy of each output of
// logits against integer targets, as a classifier's or a language model's
// training script computes it, and the sum of any other output. Which
// cross-entropy depends on the model, and matters in half precision:
//
//   - a causal language model's (transformers' ForCausalLMLoss) upcasts
//     the logits first, logits.float(), and shifts the labels, not the
//     logits;
//   - any other (F.cross_entropy on the logits as they are: a classifier's
//     CrossEntropyLoss, a masked LM's) runs cross_entropy_loss's
//     log_softmax(x, dim, dtype=x.dtype): in the logits' type, autocast
//     leaving an op whose dtype is given alone; then nll_loss, on
//     autocast's float32 list, takes a float32 copy of it.
//
// A causal model is told by its attention mask: transformers'
// causal_mask_function compares key positions with query positions
// (kv_idx <= q_idx, two aranges), where an encoder's bidirectional mask
// compares positions with a length.
//
// Worked example, GPT-2's logits [4 512 50257] under autocast (float16,
// 196 MiB): the forward upcasts them (393 MiB float32), makes the
// log-softmax (393 MiB, which nll_loss's backward reads), the shifted
// labels (16 KiB of int64) and the loss and its total weight (4 bytes
// each), and frees the upcast copy when the loss function returns. The
// backward makes nll_loss_backward's gradient (zeros, 393 MiB), then
// log_softmax_backward's (393 MiB) and frees the first and the saved
// log-softmax; ToCopyBackward makes the logits' float16 gradient (196
// MiB), dense, and frees the float32 one. BERT's masked LM at [8 128
// 30522] (60 MiB in float16) keeps the float16 log-softmax (60 MiB) and
// nll_loss's float32 copy of it (119 MiB); its backward makes
// nll_loss_backward's float32 gradient (119 MiB), frees the copy,
// ToCopyBackward's float16 gradient (60 MiB), frees the float32 one, and
// log_softmax_backward's float16 gradient (60 MiB), the logits' (traced:
// calibration/results/hf_ce_traces.jsonl.gz).
//
// Sources: derivatives.yaml's _log_softmax (result) and nll_loss_forward
// (self, target, total_weight); aten/src/ATen/native/LossNLL.cpp
// (cross_entropy_loss), aten/src/ATen/autocast_mode.cpp (nll_loss fp32,
// log_softmax fp32_set_opt_dtype); aten/src/ATen/native/cuda/Loss.cu.

// crossEntropy is the generic family's schedule.Loss; upcast says the
// logits are upcast first, as a causal language model's loss does.
type crossEntropy struct{ upcast bool }

// causalLM reports whether g is a causal language model's graph: some
// comparison takes two values that both come from a Range (positions
// against positions). Positions flow through index arithmetic, not into
// a lookup's float rows (an embedding's Gather is marked by its table, not
// its indices) nor into a value typed float. An encoder-decoder's decoder
// mask is causal too, and its loss (BART's, T5's CrossEntropyLoss) takes
// the logits as they are: such a graph, with two token inputs, is not
// told apart.
func causalLM(g *ir.Graph) bool {
	if g == nil {
		return false
	}
	fromRange := make([]bool, len(g.Values))
	for i := range g.Nodes {
		n := &g.Nodes[i]
		r := n.OpType == "Range"
		for j, in := range n.Inputs {
			if n.OpType == "Gather" && j > 0 {
				break
			}
			r = r || (in != ir.NoValue && fromRange[in])
		}
		switch n.OpType {
		case "Less", "LessOrEqual", "Greater", "GreaterOrEqual":
			if len(n.Inputs) == 2 && fromRange[n.Inputs[0]] && fromRange[n.Inputs[1]] {
				return true
			}
		}
		for _, o := range n.Outputs {
			fromRange[o] = r && !g.Values[o].DType.IsFloat()
		}
	}
	return false
}

// logits reports whether an output is one of logits that cross-entropy
// takes: float, [batch, classes] or [batch, sequence, vocabulary].
func logits(o schedule.Output) bool {
	return o.DType.IsFloat() && (len(o.Dims) == 2 || len(o.Dims) == 3) && o.Dims[len(o.Dims)-1] > 1
}

// elems is the number of elements of dims d.
func elems(d []int64) int64 {
	n := int64(1)
	for _, x := range d {
		n *= x
	}
	return n
}

// Forward records each output's loss: cross-entropy's buffers for
// logits, a 4-byte sum for another output. It returns, per output, what
// the backward frees: the log-softmax, nll_loss's input (the log-softmax
// itself, or its float32 copy), the targets and the total weight, then
// the loss term; or the sum alone.
func (c crossEntropy) Forward(t schedule.Tape, in schedule.LossInput) []schedule.Buf {
	var saved []schedule.Buf
	for _, o := range in.Outputs {
		if !logits(o) {
			saved = append(saved, t.Alloc(4, "sum"))
			continue
		}
		n := elems(o.Dims)
		rows := n / o.Dims[len(o.Dims)-1]
		half := o.DType.Size() < 4
		if half && !c.upcast {
			// log_softmax in the logits' type, then nll_loss's float32
			// copy of it under autocast (on it as it is otherwise).
			lsm := t.Alloc(n*o.DType.Size(), "log_softmax")
			nll := lsm
			if in.AMP {
				nll = t.Alloc(n*4, "nll_loss's float32 input")
			}
			tgt := t.Alloc(rows*8, "targets")
			loss, tw := t.Alloc(4, "loss"), t.Alloc(4, "total_weight")
			saved = append(saved, lsm, nll, tgt, tw, loss)
			continue
		}
		up := schedule.Buf(-1)
		if half {
			up = t.Alloc(n*4, "logits.float()")
		}
		lsm := t.Alloc(n*4, "log_softmax")
		tgt := t.Alloc(rows*8, "targets")
		loss, tw := t.Alloc(4, "loss"), t.Alloc(4, "total_weight")
		if up >= 0 {
			t.Free(up)
		}
		saved = append(saved, lsm, lsm, tgt, tw, loss)
	}
	return saved
}

// Backward records each output's gradient, in output order: a dense one
// for logits (DenseGrad), the expanded seed of a sum otherwise.
func (c crossEntropy) Backward(t schedule.Tape, in schedule.LossInput, saved []schedule.Buf) []schedule.Buf {
	grads := make([]schedule.Buf, len(in.Outputs))
	k := 0
	for i, o := range in.Outputs {
		if !logits(o) {
			grads[i] = saved[k] // the seed: a 4-byte tensor expanded
			k++
			continue
		}
		lsm, nll, tgt, tw, loss := saved[k], saved[k+1], saved[k+2], saved[k+3], saved[k+4]
		k += 5
		n := elems(o.Dims)
		if h := o.DType.Size(); h < 4 && !c.upcast {
			// nll_loss_backward in nll_loss's input's type, then (under
			// autocast) ToCopyBackward's cast back, then
			// log_softmax_backward in the logits' type.
			var g schedule.Buf
			if nll == lsm {
				g = t.Alloc(n*h, "nll_loss_backward")
			} else {
				g = t.Alloc(n*4, "nll_loss_backward")
				t.Free(nll)
				back := t.Alloc(n*h, "nll_loss_backward, cast back")
				t.Free(g)
				g = back
			}
			gl := t.Alloc(n*h, "log_softmax_backward")
			t.Free(g)
			t.Free(lsm)
			t.Free(tgt)
			t.Free(tw)
			t.Free(loss)
			grads[i] = gl
			continue
		}
		g := t.Alloc(n*4, "nll_loss_backward")
		gl := t.Alloc(n*4, "log_softmax_backward")
		t.Free(g)
		t.Free(lsm)
		t.Free(tgt)
		t.Free(tw)
		t.Free(loss)
		if o.DType.Size() < 4 {
			h := t.Alloc(n*o.DType.Size(), "logits' gradient")
			t.Free(gl)
			gl = h
		}
		grads[i] = gl
	}
	return grads
}

// DenseGrad reports that output i's gradient is a dense tensor of its
// shape: cross-entropy's, not a sum's expanded seed.
func (crossEntropy) DenseGrad(in schedule.LossInput, i int) bool { return logits(in.Outputs[i]) }

// Recipe returns the generic family's training step: the loss above,
// GradScaler under AMP, one parameter group, the optimizer opt and, with
// ema, an EMA copy (a generic training loop keeps none by default); its
// first forward runs the process's first matrix product, which makes
// cuBLAS's workspace (calibration/results/hf_distilbert_warm_traces.jsonl.gz:
// DistilBERT's first linear under AMP takes a new 32 MiB segment for it
// in the warm-up step).
func (Family) Recipe(g *ir.Graph, opt schedule.Optimizer, ema bool, boxes int64) *schedule.Train {
	return &schedule.Train{Loss: crossEntropy{upcast: causalLM(g)}, Boxes: boxes, Optimizer: opt, EMA: ema, GradScaler: true, FirstGemmWorkspace: true}
}

// CheckTrain refuses a named training script: the generic family's step
// is the loop above, with no script to name.
func (f Family) CheckTrain(outs []schedule.Output, trainer string) error {
	if trainer != "" {
		return fmt.Errorf("%s: trainer %q: the %s family's step is cross-entropy on its logits, with no training script to name", f.Name(), trainer, f.Name())
	}
	return nil
}

// Loop returns nil: the generic family has no training script whose run
// onnxmem simulates.
func (Family) Loop(*ir.Graph) *schedule.Loop { return nil }
