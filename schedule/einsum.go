package schedule

import (
	"fmt"

	"github.com/onnxmem/onnxmem/ir"
)

// torch.einsum of two operands, as eager PyTorch runs it
// (aten/src/ATen/native/Linear.cpp: einsum, then sumproduct_pair): each
// operand is permuted and reshaped to a batch of matrices, one bmm makes
// the result, and the output is a view of it. A reshape that no strides
// can address copies the operand (reshape's clone), and bmm saves its two
// matrices for the backward: the copies, or the operands themselves.
//
// Worked example, MaxViT's first attention scores "B G H I D, B G H J D
// -> B G H I J" at batch 2 (G = 64 windows of I = J = 49 positions, H = 2
// heads of D = 32): the labels in both operands and the output, B G H, are
// the batch (lro, 256 matrices); I is left's own (lo), J right's (ro), D
// is summed. q, a head-split slice of the qkv projection, permuted, is
// read as [256, 49, 32]: its strides cannot merge B, G and H, so it is
// copied; so is k·scale, which TensorIterator laid out in k's order. bmm
// writes [256, 49, 49] and saves both copies; its backward makes q's
// gradient [256, 49, 32] and k's [256, 32, 49], each in the operand's
// permuted order.

// einsumPlan is how einsum runs one node: the operands' dims in the order
// bmm reads them and the matrices' dims, and the output's strides.
type einsumPlan struct {
	order [2][]int    // by operand: its dims as [lro, lo, sum] (left) or [lro, sum, ro] (right); dims of size 1 left out
	mat   [2][3]int64 // by operand: the bmm matrices' dims
	out   []int64     // the output's strides: a view of bmm's [lro, lo, ro]
	dims  [2][]int64  // the operands' dims
}

// planEinsum returns the plan of an Einsum node of two operands of dims
// da and db, or an error for an equation that einsum does not run as one
// bmm: another count of operands, a label repeated within an operand (a
// diagonal), or a summed label that only one operand has (einsum sums it
// first).
func planEinsum(equation string, da, db []int64) (einsumPlan, error) {
	ops, out, err := ir.EinsumLabels(equation, 2)
	if err != nil {
		return einsumPlan{}, err
	}
	var p einsumPlan
	p.dims = [2][]int64{da, db}
	var size [2][128]int64 // by operand and label; 1 for a label it lacks
	var at [2][128]int     // by operand and label: its dim, or -1
	for k, labels := range ops {
		d := p.dims[k]
		if len(d) != len(labels) {
			return p, fmt.Errorf("equation %q: operand %d has %d dims", equation, k, len(d))
		}
		for l := range size[k] {
			size[k][l], at[k][l] = 1, -1
		}
		for j, l := range labels {
			if at[k][l] >= 0 {
				return p, fmt.Errorf("equation %q: label %c twice in operand %d (a diagonal) is not simulated", equation, l, k)
			}
			size[k][l], at[k][l] = d[j], j
		}
	}
	// Output labels in the output's order, then summed labels in
	// alphabetical order, upper case first: einsum's permuted order.
	inOut := [128]bool{}
	for _, l := range out {
		inOut[l] = true
	}
	var lro, lo, ro, sum []byte
	for _, l := range out {
		switch a, b := size[0][l] != 1, size[1][l] != 1; {
		case a && b:
			lro = append(lro, l)
		case a:
			lo = append(lo, l)
		default:
			ro = append(ro, l)
		}
	}
	for l := range 128 {
		if inOut[l] || (at[0][l] < 0 && at[1][l] < 0) {
			continue
		}
		switch a, b := size[0][l] != 1, size[1][l] != 1; {
		case a && b:
			sum = append(sum, byte(l))
		case a || b:
			return p, fmt.Errorf("equation %q: label %c, summed, is in one operand only (einsum sums it first): not simulated", equation, l)
		}
	}
	prod := func(k int, ls []byte) int64 {
		n := int64(1)
		for _, l := range ls {
			n *= size[k][l]
		}
		return n
	}
	place := func(k int, groups ...[]byte) {
		for _, g := range groups {
			for _, l := range g {
				if j := at[k][l]; j >= 0 && size[k][l] != 1 {
					p.order[k] = append(p.order[k], j)
				}
			}
		}
	}
	place(0, lro, lo, sum)
	place(1, lro, sum, ro)
	p.mat[0] = [3]int64{prod(0, lro), prod(0, lo), prod(0, sum)}
	p.mat[1] = [3]int64{prod(1, lro), prod(1, sum), prod(1, ro)}
	// bmm's result is [lro, lo, ro] contiguous; the output's dims are
	// those labels in the output's order.
	stride := map[byte]int64{}
	acc := int64(1)
	seq := append(append(append([]byte(nil), lro...), lo...), ro...)
	for k := len(seq) - 1; k >= 0; k-- {
		l := seq[k]
		stride[l] = acc
		acc *= max(size[0][l], size[1][l])
	}
	for _, l := range out {
		p.out = append(p.out, stride[l])
	}
	return p, nil
}

// viewable reports whether operand k of strides st reshapes to its bmm
// matrix as a view; unknown strides (nil) say no.
func (p *einsumPlan) viewable(k int, st []int64) bool {
	if st == nil {
		return false
	}
	var pd, pst []int64
	for _, j := range p.order[k] {
		pd = append(pd, p.dims[k][j])
		pst = append(pst, st[j])
	}
	_, ok := viewStrides(pd, pst, p.mat[k][:])
	return ok
}

// gradStrides returns the strides of operand k's gradient, which bmm's
// backward writes contiguous in the operand's permuted order.
func (p *einsumPlan) gradStrides(k int) []int64 {
	d := p.dims[k]
	st := make([]int64, len(d))
	for i := range st {
		st[i] = 1
	}
	acc := int64(1)
	for i := len(p.order[k]) - 1; i >= 0; i-- {
		j := p.order[k][i]
		st[j] = acc
		acc *= d[j]
	}
	return st
}

// einsumPlanOf returns the plan of Einsum or MatMul node n, which Flow
// made when it classified the node.
func (f *Flow) einsumPlanOf(n *ir.Node) einsumPlan { return f.plans[n.ID] }

// einsumForward emits the forward of an Einsum node: under autocast the casts of
// operands not in float16 (autocast's wrapper, freed when it returns), the
// copies of operands whose matrices no view addresses (left, then right;
// freed when sumproduct_pair returns unless bmm saves them), the output,
// and cuBLAS's workspace. bmm saves the left matrix when the right
// operand needs a gradient and the right one when the left does.
func einsumForward(o *fwdOp) {
	n := o.n
	p := o.einsumPlanOf(n)
	y := n.Outputs[0]
	var casts, mats [2]int32
	for k, x := range n.Inputs[:2] {
		casts[k] = -1
		if o.lower && o.dt[x] != o.low() {
			casts[k] = o.alloc(o.s.Elems(x)*o.low().Size(), Cast, x)
		}
	}
	if o.lower {
		o.dt[y] = o.low()
	}
	for k, x := range n.Inputs[:2] {
		d, st, elem := o.s.Dims[x], o.denseStrides(x), o.dt[x].Size()
		if casts[k] >= 0 {
			// .to(float16) keeps a dense operand's strides and makes a
			// strided one contiguous.
			if elem = o.low().Size(); !dense(d, st) {
				st = rowMajor(d)
			}
		}
		switch {
		case !p.viewable(k, st):
			mats[k] = o.alloc(o.s.Elems(x)*elem, Copy, x)
		case casts[k] >= 0:
			mats[k] = casts[k]
			o.ref(mats[k])
		default:
			mats[k] = o.vst[x]
			o.ref(mats[k])
		}
	}
	o.vst[y] = o.alloc(o.bytes(y), Activation, y)
	o.setLayout(y, p.out)
	o.blasWorkspaces(false)
	// bmm's saves: self when mat2 needs a gradient, mat2 when self does.
	for k := range mats {
		if o.needsGrad(n.Inputs[1-k]) {
			o.own(mats[k])
		} else {
			o.unref(mats[k])
		}
	}
	for _, c := range casts {
		if c >= 0 {
			o.unref(c)
		}
	}
}

// einsumBackward emits the backward of an Einsum node: the incoming
// gradient reshaped to bmm's result (a copy when no strides address it,
// freed when the node ends), then bmm's gradients, left then right, each
// in its operand's permuted order; under autocast a float16 gradient of a
// cast operand is turned to the operand's type by ToCopyBackward.
func einsumBackward(o *bwdOp) {
	n, s := o.n, o.s
	p := o.einsumPlanOf(n)
	y := n.Outputs[0]
	c := int32(-1)
	if st := gradStrides(o.gy, s.Dims[y]); st == nil || !sameStrides(s.Dims[y], st, p.out) {
		c = o.scratch(o.bytes(y), Copy)
	}
	for k, x := range n.Inputs[:2] {
		if !o.rg[x] {
			continue
		}
		gst := p.gradStrides(k)
		m := p.mat[k]
		st := o.alloc(m[0]*m[1]*m[2]*o.dt[y].Size(), Grad, x)
		if o.dt[x] != o.dt[y] {
			o.freshLayout(gst, s.Dims[x])
			o.later(st, x, false)
			o.freshLayout(nil, nil)
		} else {
			o.give = append(o.give, delivery{x, withStrides(gradT{st: st, whole: true, bytes: o.bytes(x)}, s.Dims[x], gst)})
		}
		o.blasWorkspaces(false)
	}
	o.freeScratch(c)
}

// einsumCheck accepts an Einsum or MatMul of two activations that runs as
// one bmm, and makes its plan.
func einsumCheck(f *Flow, n *ir.Node) (ir.Eager, error) {
	if len(n.Inputs) != 2 || !f.data[n.Inputs[0]] || !f.data[n.Inputs[1]] || f.param[n.Inputs[0]] || f.param[n.Inputs[1]] {
		return 0, fmt.Errorf("schedule: node %s: %s of two activations has a memory rule, other %ss (of %d inputs, or of a weight) do not: open an issue with the graph to add it", n.Name, n.OpType, n.OpType, len(n.Inputs))
	}
	eq, err := ir.EinsumEquation(n, f.shapes)
	var p einsumPlan
	if err == nil {
		p, err = planEinsum(eq, f.shapes.Dims[n.Inputs[0]], f.shapes.Dims[n.Inputs[1]])
	}
	if err != nil {
		return 0, fmt.Errorf("schedule: node %s: %w", n.Name, err)
	}
	if f.plans == nil {
		f.plans = make(map[int32]einsumPlan)
	}
	f.plans[n.ID] = p
	return ir.EagerEinsum, nil
}
