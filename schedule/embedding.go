package schedule

import "github.com/onnxmem/onnxmem/ir"

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
