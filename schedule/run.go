package schedule

import (
	"github.com/onnxmem/onnxmem/ir"
)

// run emits the forward of one eager op: its allocations in the order the
// kernels make them, the frees of scratch buffers, and the references that
// autograd's saved tensors take.
func (b *builder) run(n *ir.Node, k opKind) {
	s := b.s
	i := n.ID
	reads := b.readsOf(i)
	for _, v := range reads {
		if b.rg[v] {
			b.markRG(n)
			break
		}
	}
	for _, v := range n.Inputs {
		if v != ir.NoValue && b.param[v] {
			b.markRG(n)
		}
	}
	out := func(j int) ir.ValueID { return n.Outputs[j] }
	newOut := func(j int, kind Kind) {
		v := out(j)
		b.vst[v] = b.alloc(s.Bytes(v), kind, v)
		b.contig[v] = true
	}
	save := func(v ir.ValueID) {
		if b.data[v] {
			st := b.vst[v]
			b.ref(st)
			b.saved[i] = append(b.saved[i], st)
		}
	}
	// copyIn makes the contiguous copy that a kernel takes of a strided input.
	copyIn := func(v ir.ValueID) int32 {
		if b.contig[v] {
			return -1
		}
		return b.scratch(s.Bytes(v), Copy)
	}
	freeCopy := func(buf int32) {
		if buf >= 0 {
			b.emit(buf, true)
		}
	}
	switch k {
	case opConv:
		x := n.Inputs[0]
		c := copyIn(x)
		newOut(0, Activation)
		b.workspace(b.convCall(n, Forward, "fwd"))
		freeCopy(c)
		save(x)
	case opBatchNorm, opBatchNormEval:
		x := n.Inputs[0]
		newOut(0, Activation)
		save(x)
		if k == opBatchNorm {
			ch := int64(1)
			if d := s.Dims[x]; len(d) > 1 {
				ch = d[1]
			}
			for j := 0; j < 2; j++ { // save_mean, save_invstd: fp32 whatever the input
				st := b.alloc(ch*4, Stats, ir.NoValue)
				b.saved[i] = append(b.saved[i], st)
			}
		}
	case opSiLU:
		newOut(0, Activation)
		save(b.siluIn[i])
	case opSigmoid, opSoftmax:
		newOut(0, Activation)
		save(out(0))
	case opMul:
		newOut(0, Activation)
		a, c := n.Inputs[0], n.Inputs[1]
		if b.needsGrad(a) {
			save(c)
		}
		if b.needsGrad(c) && a != c {
			save(a)
		}
	case opDiv:
		newOut(0, Activation)
		if b.needsGrad(n.Inputs[1]) {
			save(n.Inputs[0])
			save(out(0))
		}
	case opAdd, opSub, opConcat, opReduceSum:
		newOut(0, Activation)
	case opMaxPool:
		x := n.Inputs[0]
		newOut(0, Activation)
		idx := b.alloc(s.Elems(out(0))*8, Indices, ir.NoValue)
		freeCopy(copyIn(x))
		save(x)
		b.saved[i] = append(b.saved[i], idx)
	case opAvgPool:
		x := n.Inputs[0]
		c := copyIn(x)
		newOut(0, Activation)
		freeCopy(c)
		save(x)
	case opResize:
		newOut(0, Activation)
		freeCopy(copyIn(n.Inputs[0]))
	case opView:
		b.view(n)
	}
	// Other outputs (batch norm's running statistics, updated in place) hold
	// no new memory.
	for _, v := range n.Outputs {
		if b.vst[v] < 0 {
			b.data[v] = false
		}
	}
}

// view gives the outputs of a view op the storage of its input.
func (b *builder) view(n *ir.Node) {
	x := n.Inputs[0]
	in := b.s.Dims[x]
	for _, v := range n.Outputs {
		b.vst[v] = b.vst[x]
		b.ref(b.vst[x])
		switch n.OpType {
		case "Slice", "Split":
			a := b.axisOf(n)
			od := b.s.Dims[v]
			whole := a < len(in) && a < len(od) && in[a] == od[a]
			b.contig[v] = b.contig[x] && (whole || sliceContiguous(in, a))
		case "Transpose":
			b.contig[v] = false
		default:
			b.contig[v] = b.contig[x]
		}
	}
}

// needsGrad reports whether v is a value whose gradient the backward computes.
func (b *builder) needsGrad(v ir.ValueID) bool {
	return v != ir.NoValue && (b.rg[v] || b.param[v])
}

func (b *builder) markRG(n *ir.Node) {
	for _, v := range n.Outputs {
		if b.data[v] {
			b.rg[v] = true
		}
	}
}
