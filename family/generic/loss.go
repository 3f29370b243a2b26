package generic

import (
	"fmt"

	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// The generic family's training loss: cross-entropy of each output of
// logits against integer targets, as a classifier's or a language model's
// training script computes it (F.cross_entropy; transformers'
// ForCausalLMLoss, which upcasts the logits first, logits.float(), and
// shifts the labels, not the logits), and the sum of any other output.
//
// Worked example, GPT-2's logits [4 512 50257] under autocast (float16,
// 196 MiB): the forward upcasts them (393 MiB float32), makes the
// log-softmax (393 MiB, which nll_loss's backward reads), the shifted
// labels (16 KiB of int64) and the loss and its total weight (4 bytes
// each), and frees the upcast copy when the loss function returns. The
// backward makes nll_loss_backward's gradient (zeros, 393 MiB), then
// log_softmax_backward's (393 MiB) and frees the first and the saved
// log-softmax; ToCopyBackward makes the logits' float16 gradient (196
// MiB), dense, and frees the float32 one.
//
// Sources: derivatives.yaml's _log_softmax (result) and nll_loss_forward
// (self, target, total_weight); aten/src/ATen/native/cuda/Loss.cu.

// crossEntropy is the generic family's schedule.Loss.
type crossEntropy struct{}

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
// the backward frees: the log-softmax, the targets and the total weight,
// then the loss term, or the sum alone.
func (crossEntropy) Forward(t schedule.Tape, in schedule.LossInput) []schedule.Buf {
	var saved []schedule.Buf
	for _, o := range in.Outputs {
		if !logits(o) {
			saved = append(saved, t.Alloc(4, "sum"))
			continue
		}
		n := elems(o.Dims)
		rows := n / o.Dims[len(o.Dims)-1]
		up := schedule.Buf(-1)
		if o.DType.Size() < 4 {
			up = t.Alloc(n*4, "logits.float()")
		}
		lsm := t.Alloc(n*4, "log_softmax")
		tgt := t.Alloc(rows*8, "targets")
		loss, tw := t.Alloc(4, "loss"), t.Alloc(4, "total_weight")
		if up >= 0 {
			t.Free(up)
		}
		saved = append(saved, lsm, tgt, tw, loss)
	}
	return saved
}

// Backward records each output's gradient, in output order: a dense one
// for logits (DenseGrad), the expanded seed of a sum otherwise.
func (crossEntropy) Backward(t schedule.Tape, in schedule.LossInput, saved []schedule.Buf) []schedule.Buf {
	grads := make([]schedule.Buf, len(in.Outputs))
	k := 0
	for i, o := range in.Outputs {
		if !logits(o) {
			grads[i] = saved[k] // the seed: a 4-byte tensor expanded
			k++
			continue
		}
		lsm, tgt, tw, loss := saved[k], saved[k+1], saved[k+2], saved[k+3]
		k += 4
		n := elems(o.Dims)
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
// ema, an EMA copy (a generic training loop keeps none by default).
func (Family) Recipe(opt schedule.Optimizer, ema bool, boxes int64) *schedule.Train {
	return &schedule.Train{Loss: crossEntropy{}, Boxes: boxes, Optimizer: opt, EMA: ema, GradScaler: true}
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
