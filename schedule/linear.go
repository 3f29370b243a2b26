package schedule

import "github.com/onnxmem/onnxmem/ir"

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
// to the end of the process (Program.Once). x is saved for the weight's
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
	o.blasWorkspaces(gemmLt(n, o.s))
}

// gemmLt reports whether addmm runs a Gemm through cuBLASLt, as PyTorch
// 2.11's isInputCompliesAddmmCudaLt decides: beta 1, a bias vector of the
// output's columns, and mat2 (the weight, K×N) with more than one row and
// column. mat1's rows do not matter: a batch of one goes through cuBLASLt
// too.
func gemmLt(n *ir.Node, s *ir.Shapes) bool {
	if len(n.Inputs) < 3 || n.Inputs[2] == ir.NoValue {
		return false
	}
	if a, ok := n.Attr("beta"); ok && a.Kind == ir.AttrFloat && a.Float != 1 {
		return false
	}
	a, y, c := s.Dims[n.Inputs[0]], s.Dims[n.Outputs[0]], s.Dims[n.Inputs[2]]
	if len(a) != 2 || len(y) != 2 || len(c) != 1 || c[0] != y[1] {
		return false
	}
	k := a[1]
	if n.IntAttr("transA", 0) != 0 {
		k = a[0]
	}
	return k > 1 && y[1] > 1
}
