package schedule

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/onnxmem/onnxmem/internal/onnx"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/ir"
)

// oneOp is a graph of one op to run: x, the input [2 4 16 16], which needs
// no gradient; a, c and d, 1×1 convolutions of x, activations that need
// one; and the op, in module "op", reading some of them, its outputs the
// graph's.
type oneOp struct {
	op      string // the op's type
	variant string // what the case shows, beyond the op's plain use
	// eval says the node does not train: a batch norm on its running
	// statistics, a dropout that does not drop.
	eval  bool
	build func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string
}

// unary is the graph of op on a, with attributes.
func unary(op string, attrs ...*onnx.AttributeProto) func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
	return func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
		return s.Node(op, []string{a.Name}, 1, attrs...)
	}
}

// binary is the graph of op on two of x, a, c and d, picked by pick.
func binary(op string, pick func(x, a, c onnxbuild.T) (onnxbuild.T, onnxbuild.T), attrs ...*onnx.AttributeProto) func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
	return func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
		p, q := pick(x, a, c)
		return s.Node(op, []string{p.Name, q.Name}, 1, attrs...)
	}
}

// The operands of binary ops: both need a gradient, or only one does.
func both(x, a, c onnxbuild.T) (onnxbuild.T, onnxbuild.T)      { return a, c }
func leftGrad(x, a, c onnxbuild.T) (onnxbuild.T, onnxbuild.T)  { return a, x }
func rightGrad(x, a, c onnxbuild.T) (onnxbuild.T, onnxbuild.T) { return x, a }

// withInts is the graph of op on a and a Constant of ints.
func withInts(op string, ints []int64, attrs ...*onnx.AttributeProto) func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
	return func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
		return s.Node(op, []string{a.Name, s.Ints(ints...)}, 1, attrs...)
	}
}

// oneOps are the graphs of the ops that run on tensor data, one or more an
// op.
var oneOps = []oneOp{
	{op: "Add", build: binary("Add", both)},
	{op: "AveragePool", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string { return []string{s.AvgPool(a, 2, 2, 0).Name} }},
	{op: "BatchNormalization", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string { return []string{s.BatchNorm(a).Name} }},
	{op: "BatchNormalization", variant: "running statistics", eval: true, build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
		ins := []string{a.Name, s.Param("weight", 4), s.Param("bias", 4), s.Param("running_mean", 4), s.Param("running_var", 4)}
		return s.Node("BatchNormalization", ins, 1)
	}},
	{op: "Cast", build: unary("Cast", onnxbuild.IntAttr("to", 1))},
	{op: "Cast", variant: "to float16", build: unary("Cast", onnxbuild.IntAttr("to", 10))},
	{op: "Clip", build: unary("Clip")},
	{op: "Concat", build: binary("Concat", both, onnxbuild.IntAttr("axis", 1))},
	{op: "Contiguous", build: unary("Contiguous")},
	{op: "Conv", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
		return []string{s.Conv(a, 8, 3, 1, onnxbuild.Bias()).Name}
	}},
	{op: "Conv", variant: "on the input", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string { return []string{s.Conv(x, 8, 3, 1).Name} }},
	{op: "Div", build: binary("Div", both)},
	{op: "Div", variant: "divisor without gradient", build: binary("Div", leftGrad)},
	{op: "Div", variant: "dividend without gradient", build: binary("Div", rightGrad)},
	{op: "Dropout", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string { return []string{s.Dropout(a, 0.5).Name} }},
	{op: "Dropout", variant: "p = 0", eval: true, build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string { return []string{s.Dropout(a, 0).Name} }},
	{op: "Einsum", build: binary("Einsum", both, onnxbuild.StringAttr("equation", "bchw,bcwk->bchk"))},
	{op: "Einsum", variant: "right operand without gradient", build: binary("Einsum", leftGrad, onnxbuild.StringAttr("equation", "bchw,bcwk->bchk"))},
	{op: "Expand", build: withInts("Expand", []int64{2, 4, 16, 16})},
	{op: "Flatten", build: unary("Flatten", onnxbuild.IntAttr("axis", 1))},
	{op: "Gather", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
		return s.Node("Gather", []string{a.Name, s.Scalar(1)}, 1, onnxbuild.IntAttr("axis", 1))
	}},
	{op: "Gelu", build: unary("Gelu")},
	{op: "Gemm", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
		return s.Node("Gemm", []string{a.Name, s.Param("weight", 8, 16), s.Param("bias", 8)}, 1, onnxbuild.IntAttr("transB", 1))
	}},
	{op: "Gemm", variant: "on the input", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
		return s.Node("Gemm", []string{x.Name, s.Param("weight", 8, 16)}, 1, onnxbuild.IntAttr("transB", 1))
	}},
	{op: "GlobalAveragePool", build: unary("GlobalAveragePool")},
	{op: "HardSigmoid", build: unary("HardSigmoid")},
	{op: "HardSwish", build: unary("HardSwish")},
	{op: "Identity", build: unary("Identity")},
	{op: "LayerNormalization", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
		return s.Node("LayerNormalization", []string{a.Name, s.Param("weight", 16), s.Param("bias", 16)}, 1, onnxbuild.IntAttr("axis", -1))
	}},
	{op: "InstanceNormalization", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
		return s.Node("InstanceNormalization", []string{a.Name, s.Param("scale", 4), s.Param("bias", 4)}, 1)
	}},
	{op: "LeakyRelu", build: unary("LeakyRelu")},
	{op: "LogSoftmax", build: unary("LogSoftmax", onnxbuild.IntAttr("axis", -1))},
	{op: "MatMul", build: binary("MatMul", both)},
	{op: "MaxPool", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string { return []string{s.MaxPool(a, 2, 2, 0).Name} }},
	{op: "Mish", build: unary("Mish")},
	{op: "Mul", build: binary("Mul", both)},
	{op: "Mul", variant: "one operand without gradient", build: binary("Mul", leftGrad)},
	{op: "Mul", variant: "by a parameter", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
		return s.Node("Mul", []string{a.Name, s.Param("scale", 4, 1, 1)}, 1)
	}},
	{op: "Neg", build: unary("Neg")},
	{op: "Pow", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
		return s.Node("Pow", []string{a.Name, s.ScalarFloat(2)}, 1)
	}},
	{op: "Reciprocal", build: unary("Reciprocal")},
	{op: "Where", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
		cond := s.Node("Cast", []string{s.Ints(1)}, 1, onnxbuild.IntAttr("to", 9))[0]
		return s.Node("Where", []string{cond, a.Name, c.Name}, 1)
	}},
	{op: "Pad", build: withInts("Pad", []int64{0, 0, 1, 1, 0, 0, 1, 1})},
	{op: "ReduceL2", build: unary("ReduceL2", onnxbuild.IntsAttr("axes", -1), onnxbuild.IntAttr("keepdims", 1))},
	{op: "ReduceMean", build: unary("ReduceMean", onnxbuild.IntsAttr("axes", 2, 3), onnxbuild.IntAttr("keepdims", 1))},
	{op: "ReduceSum", build: withInts("ReduceSum", []int64{2, 3}, onnxbuild.IntAttr("keepdims", 1))},
	{op: "Relu", build: unary("Relu")},
	{op: "Reshape", build: withInts("Reshape", []int64{2, 4, 256})},
	{op: "Resize", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string { return []string{s.Upsample(a, 2).Name} }},
	{op: "ScaledDotProductAttention", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
		return s.Node("ScaledDotProductAttention", []string{a.Name, c.Name, d.Name}, 1)
	}},
	{op: "Sigmoid", build: unary("Sigmoid")},
	{op: "Slice", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string { return []string{s.Slice(a, 0, 2).Name} }},
	{op: "Softmax", build: unary("Softmax", onnxbuild.IntAttr("axis", -1))},
	{op: "Split", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
		parts := s.Split(a, 1, 3)
		return []string{parts[0].Name, parts[1].Name}
	}},
	{op: "Sqrt", build: unary("Sqrt")},
	{op: "Squeeze", build: func(s onnxbuild.Scope, x, a, c, d onnxbuild.T) []string {
		return s.Node("Squeeze", []string{s.Node("GlobalAveragePool", []string{a.Name}, 1)[0], s.Ints(3)}, 1)
	}},
	{op: "Sub", build: binary("Sub", both)},
	{op: "Tanh", build: unary("Tanh")},
	{op: "Transpose", build: unary("Transpose", onnxbuild.IntsAttr("perm", 0, 2, 3, 1))},
	{op: "Unsqueeze", build: withInts("Unsqueeze", []int64{0})},
}

// TestSavedTensors builds each op that runs on tensor data on a graph of
// its own (oneOps), in float32 and under autocast, and checks the buffers
// that autograd saves for its backward against what the op's row in ir's
// op table declares (ir.Op.Saves): their number, their order, which input
// or output each one is, and their bytes in the type the row's autocast
// policy gives them; a mask, indices or statistics by kind and element
// type.
func TestSavedTensors(t *testing.T) {
	for _, tc := range oneOps {
		if r, ok := ir.OpOf(&ir.Node{OpType: tc.op}); !ok || !r.Eager.RunsOnData() {
			t.Errorf("oneOps has %s, which does not run on tensor data", tc.op)
		}
	}
	for _, r := range ir.Ops() {
		if !r.Eager.RunsOnData() {
			continue
		}
		found := false
		for _, tc := range oneOps {
			if tc.op != r.Type {
				continue
			}
			found = true
			for _, prec := range []Precision{FP32, AMP} {
				name := r.Type
				if tc.variant != "" {
					name += " " + tc.variant
				}
				t.Run(name+" "+prec.String(), func(t *testing.T) {
					checkSaved(t, r, tc, prec)
				})
			}
		}
		if !found {
			t.Errorf("%s runs on tensor data and has no graph in oneOps: add one", r.Type)
		}
	}
}

// savedBuf is one buffer that autograd saves: the node's input or result
// that it holds ("input 1", "result 0"), or the kind of buffer the op made
// for its backward ("mask", "indices", "stats"), and its bytes; for
// statistics, whose number the row does not say, minus the bytes of an
// element.
type savedBuf struct {
	Role  string
	Bytes int64
}

// oneOpGraph builds tc's graph: three 1×1 convs a, c and d of an input x
// of 4 channels, and the op of tc on them (the module "op"), as its
// outputs; shaped at batch 2 and 16×16.
func oneOpGraph(t *testing.T, tc oneOp) (g *ir.Graph, s *ir.Shapes, a, c, d onnxbuild.T) {
	t.Helper()
	return oneOpGraphAt(t, tc, ir.Binding{Batch: 2, Height: 16, Width: 16})
}

// oneOpGraphAt is oneOpGraph with the input's dims bound to at.
func oneOpGraphAt(t *testing.T, tc oneOp, at ir.Binding) (g *ir.Graph, s *ir.Shapes, a, c, d onnxbuild.T) {
	t.Helper()
	bd := onnxbuild.New(tc.op)
	x := bd.Input("x", 4)
	a, c, d = bd.Module("a").Conv(x, 4, 1, 1), bd.Module("c").Conv(x, 4, 1, 1), bd.Module("d").Conv(x, 4, 1, 1)
	for _, o := range tc.build(bd.Module("op"), x, a, c, d) {
		bd.Output(onnxbuild.T{Name: o})
	}
	data, err := bd.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if g, err = ir.Load(data); err != nil {
		t.Fatal(err)
	}
	if s, err = g.Infer(at); err != nil {
		t.Fatal(err)
	}
	return g, s, a, c, d
}

// checkSaved runs tc's forward at batch 2 in precision prec and compares
// what its node saves with row r.
func checkSaved(t *testing.T, r ir.Op, tc oneOp, prec Precision) {
	g, s, a, c, d := oneOpGraph(t, tc)
	b, err := newBuilder(g, s, Config{Precision: prec})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.fw.forward(); err != nil {
		t.Fatal(err)
	}
	var n *ir.Node
	for i := range g.Nodes {
		if g.Nodes[i].Name == "/op/"+tc.op {
			n = &g.Nodes[i]
		}
	}
	if n == nil {
		t.Fatalf("no node /op/%s", tc.op)
	}
	// What needs a gradient: a parameter, or a, c and d.
	grad := func(v ir.ValueID) bool {
		if v == ir.NoValue {
			return false
		}
		name := g.Values[v].Name
		return b.param[v] || name == a.Name || name == c.Name || name == d.Name
	}
	var want []savedBuf
	for _, sv := range r.Saves {
		if w, ok := expected(b, n, r, sv, prec == AMP, !tc.eval, grad); ok {
			want = append(want, w)
		}
	}
	var got []savedBuf
	for j, st := range b.saved[n.ID] {
		buf := b.p.Buffers[b.st[st].buf]
		sb := savedBuf{Role: roleOf(n, buf), Bytes: buf.Bytes}
		if j < len(want) && want[j].Bytes < 0 && buf.Kind == Stats && buf.Bytes > 0 && buf.Bytes%-want[j].Bytes == 0 {
			sb.Bytes = want[j].Bytes
		}
		got = append(got, sb)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s saves other buffers than its row declares (-row +program):\n%s", n.Name, diff)
	}
}

// expected returns the buffer that saved tensor sv of node n's row r is
// in the program, and false when it takes none: a condition that does not
// hold, or a resident parameter. amp says autocast is on, training that
// the node trains, grad which values need a gradient.
func expected(b *builder, n *ir.Node, r ir.Op, sv ir.Saved, amp, training bool, grad func(ir.ValueID) bool) (savedBuf, bool) {
	switch sv.If {
	case ir.SaveInTraining:
		if !training {
			return savedBuf{}, false
		}
	case ir.SaveIfPartnerGrad:
		if !grad(n.Inputs[1-sv.Index]) {
			return savedBuf{}, false
		}
	case ir.SaveUnderAutocast:
		if !amp {
			return savedBuf{}, false
		}
	}
	s := b.s
	// elem is the bytes of an element of a tensor that the op computes
	// under autocast's policy, or of its input without it.
	elem := func() int64 {
		switch {
		case amp && r.Autocast == ir.AutocastLower:
			return 2
		case amp && r.Autocast.Float32():
			return 4
		}
		return b.dt[n.Inputs[0]].Size()
	}
	switch sv.Of {
	case ir.SavedInput, ir.SavedWeight:
		v := n.Inputs[sv.Index]
		role := fmt.Sprintf("input %d", sv.Index)
		switch {
		case b.param[v] && amp && r.Autocast == ir.AutocastLower:
			return savedBuf{role, s.Elems(v) * 2}, true // autocast's cached copy
		case b.param[v] || !b.data[v]:
			return savedBuf{}, false // resident, or a constant
		case sv.Of == ir.SavedWeight:
			return savedBuf{role + " (an activation, where the row says a weight)", 0}, true
		case !(amp && r.Autocast == ir.AutocastLower) && !(amp && r.Autocast == ir.AutocastFP32):
			return savedBuf{role, s.Elems(v) * b.dt[v].Size()}, true // as it is
		}
		return savedBuf{role, s.Elems(v) * elem()}, true
	case ir.SavedResult:
		v := n.Outputs[sv.Index]
		return savedBuf{fmt.Sprintf("result %d", sv.Index), s.Elems(v) * elem()}, true
	case ir.SavedMask:
		return savedBuf{Mask.String(), s.Elems(n.Inputs[0]) * sv.DType.Size()}, true
	case ir.SavedIndices:
		return savedBuf{Indices.String(), s.Elems(n.Outputs[0]) * sv.DType.Size()}, true
	case ir.SavedSeed:
		return savedBuf{Stats.String(), sv.DType.Size()}, true
	}
	return savedBuf{Stats.String(), -sv.DType.Size()}, true
}

// roleOf names what buffer buf, which node n saved, holds: one of its
// inputs or outputs, or else the kind of buffer.
func roleOf(n *ir.Node, buf Buffer) string {
	for k, v := range n.Inputs {
		if v != ir.NoValue && v == buf.Value {
			return fmt.Sprintf("input %d", k)
		}
	}
	for k, v := range n.Outputs {
		if v == buf.Value {
			return fmt.Sprintf("result %d", k)
		}
	}
	return buf.Kind.String()
}
