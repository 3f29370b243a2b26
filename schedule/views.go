package schedule

import (
	"slices"

	"github.com/onnxmem/onnxmem/ir"
)

// The views: ops whose output is their input's storage with other sizes
// and strides (derivatives.yaml: view, permute, expand, slice, split,
// select, squeeze, unsqueeze save nothing but sizes). A reshape of a
// strided tensor that no strides can address copies (reshape's clone), as
// does x.contiguous() of a strided x. Their backwards pass the gradient on
// as a view of it, or make one of the input's size: expand's sums it back,
// split's and select's write it into zeros of the input's shape.
//
// Worked example, MultiheadAttention's q at batch 8, a contiguous [197 8
// 768]: q.view(197, 96, 64) is a view (strides 6144, 64, 1);
// .transpose(0, 1) a view of strides 64, 6144, 1; .view(8, 12, 197, 64)
// only splits its first dim, so it is a view too, of strides 768, 64,
// 6144, 1 (layout.go). None allocates; each takes a reference on q's
// storage, which lives while any of them does.

// A layout gives view v of x its strides.
type layout func(o *fwdOp, x, v ir.ValueID)

// alias gives the outputs outs the storage and type of the node's first
// input, each laid out by l.
func (o *fwdOp) alias(outs []ir.ValueID, l layout) {
	x := o.n.Inputs[0]
	for _, v := range outs {
		o.vst[v] = o.vst[x]
		o.dt[v] = o.dt[x]
		o.ref(o.vst[x])
		l(o, x, v)
	}
}

// reshapeLayout lays out a view of x in x's order: contiguous for a
// contiguous x, else the strides computeStride finds (a reshape, squeeze
// or flatten), or strided where there are none.
func reshapeLayout(o *fwdOp, x, v ir.ValueID) {
	if o.contig[x] {
		o.setLayout(v, nil)
		return
	}
	st := o.denseStrides(x)
	if st == nil {
		o.setStrided(v)
		return
	}
	nst, ok := viewStrides(o.s.Dims[x], st, o.s.Dims[v])
	if !ok {
		o.setStrided(v)
		return
	}
	o.setLayout(v, nst)
}

// viewForward emits a view in x's order: the same tensor, squeeze,
// unsqueeze.
func viewForward(o *fwdOp) { o.alias(o.n.Outputs, reshapeLayout) }

// reshapeForward emits a reshape or flatten: a view, but of a permuted
// view that no strides can address (a channel shuffle's transpose, a
// window partition) a copy, a clone whose gradient passes through.
func reshapeForward(o *fwdOp) {
	if x := o.n.Inputs[0]; o.data[x] && !o.contig[x] && !o.viewable(x, o.s.Dims[o.out(0)]) {
		o.newOut(0, Activation)
		return
	}
	o.alias(o.n.Outputs, reshapeLayout)
}

// transposeForward emits permute: a view of x's strides permuted.
func transposeForward(o *fwdOp) {
	o.alias(o.n.Outputs, func(o *fwdOp, x, v ir.ValueID) {
		st := o.denseStrides(x)
		pst := permuteStrides(st, o.n.IntsAttr("perm"))
		if st == nil || pst == nil {
			o.setStrided(v)
			return
		}
		o.setLayout(v, pst)
	})
}

// expandForward emits expand: stride 0 along the expanded dims, not dense.
// An expand to the input's own sizes is the input as it is.
func expandForward(o *fwdOp) {
	o.alias(o.n.Outputs, func(o *fwdOp, x, v ir.ValueID) {
		if slices.Equal(o.s.Dims[x], o.s.Dims[v]) {
			o.contig[v], o.str[v] = o.contig[x], o.str[x]
			return
		}
		o.setStrided(v)
	})
}

// sliceForward emits slice and split. A slice of step 1 keeps its input's
// strides (known, dense or not): contiguous when it cuts along the first
// dim of size above 1 or takes a whole dim.
func sliceForward(o *fwdOp) {
	o.alias(o.n.Outputs, func(o *fwdOp, x, v ir.ValueID) {
		if st := o.denseStrides(x); st != nil && unitSteps(o.n, o.s) {
			o.setLayout(v, st)
			return
		}
		o.setStrided(v)
	})
}

// selectForward emits select(axis, i): the axis's stride goes (a strided
// slice of a dense tensor, ViT's class token x[:, 0]).
func selectForward(o *fwdOp) {
	o.alias(o.n.Outputs, func(o *fwdOp, x, v ir.ValueID) {
		st := o.denseStrides(x)
		a := int(o.n.IntAttr("axis", 0))
		if a < 0 {
			a += len(o.s.Dims[x])
		}
		if st == nil || a < 0 || a >= len(st) {
			o.setStrided(v)
			return
		}
		o.setLayout(v, append(append([]int64(nil), st[:a]...), st[a+1:]...))
	})
}

// contiguousForward emits x.contiguous(): x itself, or for a strided x
// clone(memory_format=contiguous).
func contiguousForward(o *fwdOp) {
	if x := o.n.Inputs[0]; !o.contig[x] {
		o.newOut(0, Activation)
		return
	}
	o.alias(o.n.Outputs, reshapeLayout)
}

// unitSteps reports whether a Slice or Split node takes every element
// along its axes (steps of 1, or none given).
func unitSteps(n *ir.Node, s *ir.Shapes) bool {
	if n.OpType != "Slice" || len(n.Inputs) < 5 || n.Inputs[4] == ir.NoValue {
		return true
	}
	steps := s.Data[n.Inputs[4]]
	if steps == nil {
		return false
	}
	for _, st := range steps {
		if st != 1 {
			return false
		}
	}
	return true
}

// paramBehind returns the parameter that value v is, or views without a
// copy (an expand, reshape or unsqueeze of it, as ViT's
// class_token.expand(n, -1, -1)), or ir.NoValue.
func (bp *backwardPass) paramBehind(v ir.ValueID) ir.ValueID {
	for v != ir.NoValue {
		if bp.param[v] {
			return v
		}
		p := bp.g.Values[v].Producer
		if p < 0 || bp.data[v] {
			return ir.NoValue
		}
		switch r, _ := ir.OpOf(&bp.g.Nodes[p]); r.Eager {
		case ir.EagerExpand, ir.EagerView, ir.EagerReshape:
			v = bp.g.Nodes[p].Inputs[0]
		default:
			return ir.NoValue
		}
	}
	return ir.NoValue
}

// reshapeBackward emits view's backward, grad.reshape to the input's
// sizes: a view of the gradient where strides address it, else a copy.
func reshapeBackward(o *bwdOp) {
	s, gy, y := o.s, o.gy, o.outs[0]
	x := o.n.Inputs[0]
	viewable := gy.whole && gy.contig // a contiguous gradient reshapes as a view
	if !viewable {
		viewable = splitsOnly(s.Dims[y], s.Dims[x])
		if st := gradStrides(gy, s.Dims[y]); st != nil {
			_, viewable = viewStrides(s.Dims[y], st, s.Dims[x])
		}
	}
	if !viewable {
		o.fresh(x)
		return
	}
	o.pass(x, true, true)
	if o.gnReshape == nil || !o.gnReshape[o.node] {
		// A view, but for an exported GroupNorm's Reshapes, which eager
		// PyTorch never runs: native_group_norm's backward gives a
		// tensor of its own.
		o.markView()
	}
}

// transposeBackward transposes the gradient back: a view of it.
func transposeBackward(o *bwdOp) {
	s, gy, y := o.s, o.gy, o.outs[0]
	x := o.n.Inputs[0]
	switch {
	case !o.rg[x]:
	case o.dt[x] != o.dt[y]:
		o.fresh(x)
	default:
		t := gradT{st: gy.st, whole: gy.whole, bytes: o.bytes(x)}
		if st := gradStrides(gy, s.Dims[y]); st != nil {
			t = withStrides(t, s.Dims[x], permuteStrides(st, inversePerm(o.n.IntsAttr("perm"))))
		}
		o.ref(gy.st)
		o.give = append(o.give, delivery{x, t})
		o.markView()
	}
}

// expandBackward emits ExpandBackward: the gradient summed to the input's
// sizes, a new tensor; an expand to the input's own sizes passes it on as
// it is.
func expandBackward(o *bwdOp) {
	if x := o.n.Inputs[0]; slices.Equal(o.s.Dims[x], o.s.Dims[o.outs[0]]) {
		o.pass(x, true, true)
		return
	}
	freshBackward(o)
}

// splitBackward emits split_backward: zeros for each piece that got no
// gradient, then the cat of all pieces, of the input's shape.
func splitBackward(o *bwdOp) {
	var zeros []int32
	for _, v := range o.outs {
		if o.data[v] && o.slot[v] < 0 {
			zeros = append(zeros, o.scratch(o.bytes(v), Grad))
		}
	}
	o.fresh(o.n.Inputs[0])
	for _, z := range zeros {
		o.emit(z, true)
	}
}

// selectCheck accepts a Gather of one index on tensor data, a select, and
// a Gather of integer ids from a parameter's rows, an embedding; other
// Gathers are shape arithmetic only.
func selectCheck(f *Flow, n *ir.Node) (ir.Eager, error) {
	if embeddingCheck(f, n) {
		return ir.EagerEmbedding, nil
	}
	if len(n.Inputs) != 2 || len(f.shapes.Dims[n.Inputs[1]]) != 0 || !f.data[n.Inputs[0]] {
		return 0, unsupported(n)
	}
	return ir.EagerSelect, nil
}
