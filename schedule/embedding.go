package schedule

import (
	"fmt"

	"github.com/onnxmem/onnxmem/ir"
)

// An embedding, as torch.nn.functional.embedding runs it: the rows of a
// [num_embeddings, dim] weight that integer ids pick, a new tensor of the
// weight's type (autocast lists no embedding: it stays float32 under AMP).
// derivatives.yaml's embedding saves the indices, and its backward,
// embedding_dense_backward (aten/src/ATen/native/cuda/Embedding.cu), sorts
// them (a sorted copy and the original positions, int64 each, with cub's
// temporary storage) and scatters the incoming gradient into a dense
// gradient of the whole weight: the weight's .grad.
//
// Worked example, GPT-2's token embedding wte [50257 768] read by ids of
// [8 512]: the forward allocates the output [8 512 768] in float32
// (12 MiB) and keeps the ids; the backward allocates 32 KiB of int64 twice
// for the sort, then the dense gradient of the weight, 147 MiB. The LM
// head reads the same weight (tied embeddings, one parameter): its
// gradient from the head came first and is wte's .grad already, so the
// embedding's is a second contribution, which the autograd engine's
// InputBuffer adds into the first in place and frees (paramGradAdd), as
// the H200 trace of BERT shows (calibration/results/hf_traces.jsonl.gz).

// embeddingCheck accepts a Gather of integer ids from the rows of a
// parameter of rank 2 on tensor data, an embedding.
func embeddingCheck(f *Flow, n *ir.Node) bool {
	if len(n.Inputs) != 2 || n.IntAttr("axis", 0) != 0 {
		return false
	}
	w, ids := n.Inputs[0], n.Inputs[1]
	return f.param[w] && len(f.shapes.Dims[w]) == 2 && f.data[ids] && !isFloat(f.shapes.DTypes[ids])
}

// embeddingForward emits embedding(weight, ids): the output in the
// weight's type; it keeps the ids for the backward.
func embeddingForward(o *fwdOp) {
	w, ids, y := o.n.Inputs[0], o.n.Inputs[1], o.n.Outputs[0]
	o.dt[y] = o.dt[w]
	if o.needsGrad(w) {
		o.save(ids)
	}
	o.vst[y] = o.alloc(o.bytes(y), Activation, y)
	o.setLayout(y, nil)
}

// embeddingBackward emits embedding_dense_backward: the sort's two int64
// copies of the ids, then the weight's dense gradient, its .grad or a
// second contribution to it.
func embeddingBackward(o *bwdOp) {
	w, ids := o.n.Inputs[0], o.n.Inputs[1]
	if !o.param[w] {
		return
	}
	k := 8 * o.s.Elems(ids)
	sorted, orig := o.scratch(k, Indices), o.scratch(k, Indices)
	o.paramGradAdd(w, false)
	o.freeScratch(sorted)
	o.freeScratch(orig)
}

// paramGradAdd gives parameter v its .grad, as paramGrad does, or, when v
// has one already (a weight two ops read, such as a language model's head
// tied to its token embedding), allocates the new contribution and sums
// the two as InputBuffer::accumulate does (torch/csrc/autograd/
// input_buffer.cpp): in place into the first, unless the first is a view
// that shares its storage (a linear weight's grad.t() in float32, whose
// view keeps its base), which can_accumulate_inplace refuses: then
// old + new is a third tensor, and both go. view says the gradient this
// call gives is such a view.
func (bp *backwardPass) paramGradAdd(v ir.ValueID, view bool) {
	if v == ir.NoValue || !bp.param[v] {
		return
	}
	if bp.viewGrad == nil {
		bp.viewGrad = make([]bool, len(bp.paramGrads))
	}
	old := bp.paramGrads[v]
	if old < 0 {
		bp.paramGrad(v)
		bp.viewGrad[v] = view
		return
	}
	add := bp.alloc(bp.bytes(v), Grad, v)
	if bp.viewGrad[v] {
		sum := bp.newBuf(bp.bytes(v), ParamGrad, v)
		bp.emit(sum, false)
		bp.paramGrads[v], bp.viewGrad[v] = sum, false
		bp.emit(old, true)
	}
	bp.unref(add)
}

// castForward emits x.to(dtype), the exporter's Cast of a float tensor: x
// itself when eager PyTorch already holds it in that type (RMSNorm's
// hidden_states.to(torch.float32) of a float32 residual stream), else a
// copy in the new type.
func castForward(o *fwdOp) {
	x, y := o.n.Inputs[0], o.n.Outputs[0]
	to := ir.DType(o.n.IntAttr("to", 0))
	if to == o.dt[x] {
		o.alias(o.n.Outputs, reshapeLayout)
		return
	}
	o.dt[y] = to
	o.newOut(0, Activation)
}

// castBackward emits ToCopyBackward: nothing for a cast that changed no
// type, else the input's gradient in its own type.
func castBackward(o *bwdOp) {
	if x := o.n.Inputs[0]; o.dt[x] == o.dt[o.outs[0]] {
		passBackward(o)
		return
	}
	freshBackward(o)
}

// castCheck accepts a Cast of a float tensor to a float type; a cast of
// token ids or of a mask is shape arithmetic (Flow.classify), and other
// casts on tensor data have no rule.
func castCheck(f *Flow, n *ir.Node) (ir.Eager, error) {
	if _, ok := n.Attr("to"); !ok {
		return 0, fmt.Errorf("schedule: node %s: Cast has no \"to\" attribute, which ONNX requires: export the model again", n.Name)
	}
	to := ir.DType(n.IntAttr("to", 0))
	if !isFloat(f.shapes.DTypes[n.Inputs[0]]) || !isFloat(to) {
		return 0, unsupported(n)
	}
	return ir.EagerCast, nil
}
