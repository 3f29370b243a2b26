package schedule

import (
	"fmt"

	"github.com/onnxmem/onnxmem/ir"
)

// A linear layer, as aten::linear runs it: addmm(b, x, W.t()) on a matrix
// input, mm without a bias, and on a strided input of more than two dims
// matmul(x, W.t()) then add_(b). derivatives.yaml's addmm saves mat1 when
// mat2 needs a gradient and mat2 (the weight's transposed view, or its
// float16 cast under autocast) when mat1 does; AddmmBackward0 makes mat1's
// gradient grad·W and the weight's grad.t()·mat1, each an mm, and sums the
// gradient into the bias's.
//
// Worked example, fc of 512 to 1000 with a bias on a float32 x of [32 512]
// (64 KiB) in float32: the output [32 1000] (125 KiB), then, at the first
// matrix product of the thread, its cuBLAS workspace and, addmm running
// through cuBLASLt with a bias vector, its cuBLASLt workspace, both kept
// to the end of the process (Program.Persistent). x is saved for the weight's
// gradient. The backward makes x's gradient (if x needs one) and the
// weight's .grad (2 MiB), and the bias's .grad, the sum of the incoming
// gradient over its 32 rows, whose reduction stages nothing at 32 rows.

// linearForward emits linear(x, W, b) as eager PyTorch runs it:
// addmm(b, x, W.t()), or mm without a bias. Under autocast the bias, the
// weight and a float32 x are cast to float16 first (right to left, as GCC
// evaluates the cast arguments), the weight's and the bias's copies
// cached. Then the output, and the cuBLAS workspaces the product's thread
// does not have yet: through cuBLASLt when the bias is a vector of the
// output's columns and the weight has more than one row and column
// (gemmLt), plain cuBLAS otherwise (the bias is first copied into the
// output, which allocates nothing). addmm saves mat1 when the weight needs
// a gradient and mat2 (a view of the weight or its cast) when mat1 does.
func linearForward(o *fwdOp) {
	n := o.n
	x, w, y := n.Inputs[0], n.Inputs[1], n.Outputs[0]
	bias := ir.NoValue
	if len(n.Inputs) > 2 && n.Inputs[2] != ir.NoValue {
		bias = n.Inputs[2]
	}
	xcast := int32(-1)
	if o.lower {
		if bias != ir.NoValue {
			o.castParam(bias)
		}
		o.castParam(w)
		o.dt[y] = o.low()
		if o.dt[x] != o.low() {
			xcast = o.alloc(o.s.Elems(x)*o.low().Size(), Cast, x)
		}
	}
	// A linear on a strided input (a transposed view, or a reshape of one,
	// as attention's output before its projection) gets a contiguous copy
	// (matmul's reshape, or the module's own .contiguous()): the product
	// saves the copy, and a cast made for it goes when autocast's wrapper
	// returns, after the output (calibration/results/vit_steps.json). A
	// matrix with rows or columns of stride 1 (ViT's class token x[:, 0])
	// goes to cuBLAS as it is.
	if !o.contig[x] && !blasMatrix(o.s.Dims[x], o.denseStrides(x)) {
		size := o.s.Elems(x) * o.dt[x].Size()
		if xcast >= 0 {
			size = o.s.Elems(x) * o.low().Size()
		}
		c := o.alloc(size, Copy, x)
		if xcast >= 0 {
			o.deferred = append(o.deferred, xcast)
		}
		xcast = c
	}
	if o.needsGrad(w) {
		if xcast >= 0 {
			o.own(xcast)
		} else {
			o.save(x)
		}
	} else if xcast >= 0 {
		o.deferred = append(o.deferred, xcast)
	}
	if st := o.castOf(w); st >= 0 && o.needsGrad(x) {
		o.ref(st)
		o.own(st)
	}
	o.vst[y] = o.alloc(o.bytes(y), Activation, y)
	o.setLayout(y, nil)
	o.blasWorkspaces(gemmLt(n, o.s) && (len(o.s.Dims[x]) == 2 || o.contig[x]))
}

// gemmLt reports whether addmm runs a Gemm through cuBLASLt, as PyTorch
// 2.11's isInputCompliesAddmmCudaLt decides: beta 1, a bias vector of the
// output's columns, and mat2 (the weight, K×N) with more than one row and
// column. mat1's rows do not matter: a batch of one goes through cuBLASLt
// too. A contiguous input of more dims (a transformer's [batch, tokens,
// features], ConvNeXt's channels-last [N, H, W, C]) is flattened to a
// matrix and goes through the same addmm (aten::linear's
// _flatten_nd_linear; calibration §13), which its caller checks; a strided
// one runs matmul and add_ instead.
func gemmLt(n *ir.Node, s *ir.Shapes) bool {
	if len(n.Inputs) < 3 || n.Inputs[2] == ir.NoValue {
		return false
	}
	if a, ok := n.Attr("beta"); ok && a.Kind == ir.AttrFloat && a.Float != 1 {
		return false
	}
	a, y, c := s.Dims[n.Inputs[0]], s.Dims[n.Outputs[0]], s.Dims[n.Inputs[2]]
	if len(a) < 2 || len(y) != len(a) || len(c) != 1 || c[0] != y[len(y)-1] {
		return false
	}
	k := a[len(a)-1]
	if n.IntAttr("transA", 0) != 0 {
		if len(a) != 2 {
			return false
		}
		k = a[0]
	}
	return k > 1 && y[len(y)-1] > 1
}

// linearBackward emits AddmmBackward0 (MmBackward0 without a bias): mat1's
// gradient grad·W, then the weight's (grad.t()·mat1, whose transpose is
// contiguous and becomes W.grad), the weight's first without a bias, each
// an mm that takes its own contiguous copy of a strided incoming gradient
// (prepare_matrix_for_cublas clones an expanded one) and makes the
// autograd thread's cuBLAS workspace if it has none; then validate_outputs sums the incoming gradient to the bias's
// shape. Under autocast these are float16 gradients of the casts, which
// ToCopyBackward turns into float32 ones after the node: mat1's, the
// weight's, then the bias's.
func linearBackward(o *bwdOp) {
	n, s := o.n, o.s
	x, w := n.Inputs[0], n.Inputs[1]
	bias := ir.NoValue
	if len(n.Inputs) > 2 && n.Inputs[2] != ir.NoValue {
		bias = n.Inputs[2]
	}
	gy := o.gy
	shared := int32(-1)
	// The loss's seed, a one-element tensor expanded to the output
	// (loss = out.sum() of a language model's logits): reshape views it
	// at any shape, and each mm clones it for cuBLAS, after allocating
	// its result (calibration/results/hf_amp_traces.jsonl.gz, Llama's
	// head: 250 MiB twice).
	seed := gy.st == o.seed && !gy.whole
	if y := n.Outputs[0]; len(s.Dims[y]) > 2 && !(gy.whole && gy.contig) && !seed {
		// A linear on an N-D input (addmm on its view, or matmul's
		// folded mm): UnsafeViewBackward's grad.reshape(rows, N) copies
		// a gradient no strides can view so, once for both products,
		// and the engine releases the strided gradient before the
		// product's node runs (ConvNeXt's linears, calibration/results/
		// convnext_vit_ops.json); a view cuBLAS takes as it is needs no
		// copy.
		if !blasMatrix(s.Dims[y], gradStrides(gy, s.Dims[y])) {
			shared = o.scratch(o.bytes(y), Copy)
			o.unref(gy.st)
			o.slot[y] = -1
			gy = gradT{st: shared, whole: true, contig: true, bytes: o.bytes(y)}
		}
		o.copyIn = func() int32 { return -1 }
	}
	defer o.freeScratch(shared)
	if len(s.Dims[x]) > 2 && !o.contig[x] {
		matmulBackward(o, gy)
		return
	}
	// MmBackward0 (no bias) makes the weight's gradient before mat1's,
	// AddmmBackward0 mat1's first (the same traces: Llama's bias-free
	// projections).
	if bias != ir.NoValue {
		o.linearInputGrad(x)
	}
	for _, p := range []ir.ValueID{w, bias} {
		if p == bias && p != ir.NoValue && o.derived[p] {
			// A bias computed from a parameter (Swin V2's qkv bias, a
			// clone with its k third zeroed): its gradient's reduction,
			// which then flows back to the parameter (bytes too few to
			// count).
			o.biasSum(gy)
			continue
		}
		if p == ir.NoValue || !o.param[p] {
			continue
		}
		if o.autocast() {
			o.later(o.lowGrad(p), p, true)
		} else {
			// grad.t()·mat1's transpose is a view of W.grad where the
			// product ran on W.t() (transB); GPT-2's Conv1D, which
			// takes W as it is, gets a contiguous gradient.
			o.paramGradAdd(p, p == w && n.IntAttr("transB", 0) != 0)
		}
		if p == bias {
			o.biasSum(gy)
		}
		if p == w {
			o.freeScratch(o.mm())
		}
	}
	if bias == ir.NoValue {
		o.linearInputGrad(x)
	}
}

// linearInputGrad emits mat1's gradient of a linear's backward, grad·W,
// when x needs one. On an input of more than two dims aten::linear ran the
// product on x folded into rows (_flatten_nd_linear's reshape, matmul's
// fold), and ViewBackward0 hands x grad.reshape(x's sizes): a view of the
// product's result, which InputBuffer sums out of place (Llama's k_proj
// input gradient added to v_proj's allocates the sum:
// calibration/results/hf_fp32_traces.jsonl.gz). Under autocast the view is
// of the float16 cast's gradient, which ToCopyBackward replaces.
func (o *bwdOp) linearInputGrad(x ir.ValueID) {
	if o.rg[x] {
		n := len(o.give)
		o.inputGrad(x)
		if len(o.s.Dims[x]) > 2 && len(o.give) > n {
			o.give[len(o.give)-1].t.view = true
		}
		o.freeScratch(o.mm())
	}
}

// mm emits what one mm of a linear's backward allocates: the contiguous
// copy of a strided incoming gradient that it takes, and the autograd
// thread's cuBLAS workspace if it has none yet. It returns the copy's
// buffer, which goes when the mm returns, or -1.
func (o *bwdOp) mm() int32 {
	c := o.contiguous()
	o.blasWorkspaces(false)
	return c
}

// biasSum emits the buffers of a Linear's bias gradient: it sums a
// contiguous gy over its rows, B·L of them on a transformer's [B, L, E]. A
// strided gy is reduced along its fastest dimension, in shared memory
// (calibration/reduce_staging.py measured only the contiguous case).
func (o *bwdOp) biasSum(gy gradT) {
	if bias := o.n.Inputs[2]; gy.contig {
		o.columnSum(o.s.Elems(o.n.Outputs[0])/max(o.s.Elems(bias), 1), o.s.Elems(bias))
	}
}

// matmulBackward emits the backward of a linear on a strided input of more
// than two dims, which aten::linear runs as matmul(x, W.t()) then add_(b)
// instead of one addmm (MultiheadAttention's in-projection of the
// transposed query): AddBackward's bias gradient first, then MmBackward's
// weight gradient and the input's; autocast's ToCopyBackward nodes then
// run the input's, the weight's and the bias's (calibration/results/
// vit_steps.json and convnext_vit_ops.json).
func matmulBackward(o *bwdOp, gy gradT) {
	n := o.n
	x, w := n.Inputs[0], n.Inputs[1]
	grad := func(p ir.ValueID, param bool) func() {
		if !o.autocast() || (!param && o.dt[p] == o.low()) {
			if param {
				o.paramGradAdd(p, p == w && n.IntAttr("transB", 0) != 0)
			} else {
				o.fresh(p)
			}
			return nil
		}
		return o.toCopy(o.lowGrad(p), p, param)
	}
	var later [3]func() // the input's, the weight's, the bias's
	if len(n.Inputs) > 2 && n.Inputs[2] != ir.NoValue && o.param[n.Inputs[2]] {
		later[2] = grad(n.Inputs[2], true)
		o.biasSum(gy)
	}
	if o.param[w] {
		c := o.contiguous()
		later[1] = grad(w, true)
		o.blasWorkspaces(false)
		o.freeScratch(c)
	}
	if o.rg[x] {
		later[0] = grad(x, false)
		o.freeScratch(o.mm())
	}
	for _, f := range later {
		if f != nil {
			o.post = append(o.post, f)
		}
	}
}

// linearCheck accepts a Gemm of an activation A and a model weight B, a
// linear layer, with a weight or no bias.
func linearCheck(f *Flow, n *ir.Node) (ir.Eager, error) {
	if !f.param[n.Inputs[1]] || (len(n.Inputs) > 2 && n.Inputs[2] != ir.NoValue && f.data[n.Inputs[2]]) || f.param[n.Inputs[0]] {
		return 0, fmt.Errorf("schedule: node %s: Gemm of an activation A and a model weight B (a linear layer) has a memory rule, other Gemms do not: open an issue with the graph to add it", n.Name)
	}
	return ir.EagerLinear, nil
}
