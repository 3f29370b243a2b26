package schedule_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// TestViewGradientSum checks how the gradients of a tensor two ops read
// are summed when the first to arrive is a view of another gradient: a =
// block(x) feeds a conv and, through two reshapes run after it, an Add
// whose sum a last conv reads. The reshapes' backward runs first and gives
// a (the block's output) a view of the Add's gradient, which keeps its
// base (a ViewInfo), so InputBuffer cannot sum the conv's gradient into it
// in place (can_accumulate_inplace: storage use_count 2): the sum is a
// third tensor, as DaViT's blocks make it on the device (calibration §35).
// Without the reshapes the Add's gradient itself arrives first and takes
// the sum in place.
func TestViewGradientSum(t *testing.T) {
	build := func(views bool) *onnxbuild.Builder {
		b := onnxbuild.New("viewgrad")
		x := b.Input("x", 8)
		a := b.Layer(0).Block(x, 16, 3, 1)
		c := b.Layer(1).Conv(a, 16, 3, 1)
		r := a
		if views {
			m := b.Layer(2)
			flat := m.Node("Reshape", []string{a.Name, m.Ints(0, 16, -1)}, 1)[0]
			back := m.Node("Reshape", []string{flat, m.Ints(0, 16, 16, 16)}, 1)[0]
			r = onnxbuild.T{Name: back, C: 16}
		}
		b.Output(b.Layer(4).Conv(b.Layer(3).Add(r, c), 16, 1, 1))
		return b
	}
	for _, c := range []struct {
		views bool
		want  int // gradients of a allocated
	}{
		{false, 1}, // the conv's dX, summed into the Add's gradient
		{true, 2},  // the conv's dX and the sum
	} {
		if n, ev := blockGrads(t, build(c.views)); n != c.want {
			t.Errorf("views %v: %d gradients of the block's output allocated, want %d: %v", c.views, n, c.want, ev)
		}
	}
}

// blockGrads builds b's training program at batch 2 and counts the
// gradients its backward allocates for the first layer's block output
// (/model.0/act/Mul_output_0); it returns the backward's events too.
func blockGrads(t *testing.T, b *onnxbuild.Builder) (int, []string) {
	t.Helper()
	p := program(t, load(t, b), 2, schedule.Config{Workspace: fakeWorkspace})
	ev := events(p, p.BackwardStart, p.BackwardEnd, nil)
	n := 0
	for _, e := range ev {
		if e == "+grad /model.0/act/Mul_output_0" {
			n++
		}
	}
	return n, ev
}

// TestSliceBackwardGroups checks which Slices of one tensor share one
// autograd node. chunk(2, 1), as the exporter writes it (each piece starts
// at the value the one before ends at), is one SplitBackward: one gradient
// of its input. Slices with literal bounds that meet are taken for a
// chunk whose shape arithmetic was folded. Python's own slices, whose
// bounds are computed apart (rotate_half's x[..., :d // 2] and
// x[..., d // 2:]), run a SliceBackward0 each: zeros of the input's size
// with the piece's gradient copied in: two gradients, the second summed
// into the first in place (calibration/results/hf_fp32_traces.jsonl.gz).
func TestSliceBackwardGroups(t *testing.T) {
	half := func(m onnxbuild.Scope, x onnxbuild.T) string { // Shape → Gather → Div: C // 2
		shape := m.Node("Shape", []string{x.Name}, 1)[0]
		c := m.Node("Gather", []string{shape, m.Ints(1)}, 1, onnxbuild.IntAttr("axis", 0))[0]
		return m.Node("Div", []string{c, m.Ints(2)}, 1)[0]
	}
	build := func(kind string) *onnxbuild.Builder {
		b := onnxbuild.New("slices")
		a := b.Layer(0).Block(b.Input("x", 8), 16, 3, 1)
		m := b.Layer(1)
		var p, q onnxbuild.T
		switch kind {
		case "chunk":
			p, q = m.Chunk2(a)
		case "literal":
			p, q = m.Slice(a, 0, 8), m.Slice(a, 8, 16)
		case "python":
			axis := m.Ints(1)
			p = onnxbuild.T{Name: m.Node("Slice", []string{a.Name, m.Ints(0), half(m, a), axis}, 1)[0], C: 8}
			q = onnxbuild.T{Name: m.Node("Slice", []string{a.Name, half(m, a), m.Ints(1 << 62), axis}, 1)[0], C: 8}
		}
		c1, c2 := b.Layer(2).Conv(p, 8, 1, 1), b.Layer(3).Conv(q, 8, 1, 1)
		b.Output(b.Layer(4).Conv(b.Layer(5).Concat(c1, c2), 8, 1, 1))
		return b
	}
	for _, c := range []struct {
		kind string
		want int // gradients of a allocated
	}{
		{"chunk", 1},
		{"literal", 1},
		{"python", 2}, // each slice's; the second summed into the first in place
	} {
		if n, ev := blockGrads(t, build(c.kind)); n != c.want {
			t.Errorf("%s: %d gradients of the sliced tensor allocated, want %d: %v", c.kind, n, c.want, ev)
		}
	}
}

// TestPowBackwardTemporaries checks pow's backward, grad * (exp *
// self.pow(exp - 1)) (FunctionsManual.cpp's pow_backward): self.pow(exp - 1)
// and exp times it, each of the input's size, then the gradient; the two
// go, the last made first, at the end of the full expression, before the
// node drops its incoming gradient and its saved input. A Llama's RMSNorm
// makes these three per norm (calibration/results/hf_fp32_traces.jsonl.gz).
func TestPowBackwardTemporaries(t *testing.T) {
	b := onnxbuild.New("pow")
	a := b.Layer(0).Block(b.Input("x", 8), 16, 3, 1)
	m := b.Layer(1)
	y := onnxbuild.T{Name: m.Node("Pow", []string{a.Name, m.ScalarFloat(2)}, 1)[0], C: 16}
	b.Output(b.Layer(2).Conv(y, 8, 1, 1))
	p := program(t, load(t, b), 2, schedule.Config{Workspace: fakeWorkspace})
	got := events(p, p.BackwardStart, p.BackwardEnd, atNode(p, "/model.1/Pow"))
	const size = 2 * 16 * 16 * 16 * 4 // float32 [2 16 16 16]
	want := []string{
		fmt.Sprintf("+grad %d", size), fmt.Sprintf("+grad %d", size), "+grad /model.0/act/Mul_output_0",
		fmt.Sprintf("-grad %d", size), fmt.Sprintf("-grad %d", size),
	}
	if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Errorf("pow's backward: %v, want it to open with %v", got, want)
	}
}

// TestWhereBackward checks torch.where on activations (GPT-Neo masks its
// scores so): where(condition, self, other) writes a new tensor;
// WhereBackward0 keeps the condition (a constant here, which costs
// nothing) and makes self's gradient, where(condition, grad, 0), then
// other's, where(condition, 0, grad), each a new tensor of the output's
// size; other, a [16, 1, 1] broadcast here, gets its gradient at the
// output's size first, summed to its shape after.
func TestWhereBackward(t *testing.T) {
	b := onnxbuild.New("where")
	a := b.Layer(0).Block(b.Input("x", 8), 16, 3, 1)
	m := b.Layer(1)
	cond := m.Node("Cast", []string{m.Ints(1)}, 1, onnxbuild.IntAttr("to", 9))[0]
	other := m.Node("ReduceMean", []string{a.Name, m.Ints(0, 2, 3)}, 1, onnxbuild.IntAttr("keepdims", 0))[0]
	other = m.Node("Reshape", []string{other, m.Ints(16, 1, 1)}, 1)[0]
	y := onnxbuild.T{Name: m.Node("Where", []string{cond, a.Name, other}, 1)[0], C: 16}
	b.Output(b.Layer(2).Conv(y, 8, 1, 1))
	p := program(t, load(t, b), 2, schedule.Config{Workspace: fakeWorkspace})
	fwd := events(p, 0, p.BackwardStart, atNode(p, "/model.1/Where"))
	bwd := events(p, p.BackwardStart, p.BackwardEnd, atNode(p, "/model.1/Where"))
	if len(fwd) == 0 || fwd[0] != "+activation /model.1/Where_output_0" {
		t.Errorf("where's forward: %v, want it to open with its output", fwd)
	}
	const out = 2 * 16 * 16 * 16 * 4 // the output's float32 bytes
	want := []string{"+grad /model.0/act/Mul_output_0", fmt.Sprintf("+grad %d", out), "+grad /model.1/Reshape_output_0", fmt.Sprintf("-grad %d", out)}
	if len(bwd) < len(want) || !slices.Equal(bwd[:len(want)], want) {
		t.Errorf("where's backward: %v, want it to open with %v", bwd, want)
	}
}

// TestSharedWeightCast checks a weight that two linears share under
// autocast (ALBERT's one layer run six times): autocast's cache holds one
// float16 copy, whose one ToCopyBackward sums the two float16 gradients
// (the second out of place onto the first, a transposed view) and makes
// the float32 .grad once: three float16 gradients of the weight and no
// float32 one beside the .grad, where converting each use's gradient on
// its own would add a float32 gradient to sum into the .grad.
func TestSharedWeightCast(t *testing.T) {
	b := onnxbuild.New("shared")
	x := b.Layer(0).Flatten(b.Layer(0).GlobalAvgPool(b.Layer(0).Block(b.Input("x", 8), 16, 3, 1)))
	m := b.Layer(1)
	w := m.Param("w", 16, 16)
	h := m.Node("Gemm", []string{x.Name, w}, 1, onnxbuild.IntAttr("transB", 1))[0]
	b.Output(onnxbuild.T{Name: m.Node("Gemm", []string{h, w}, 1, onnxbuild.IntAttr("transB", 1))[0], C: 16})
	g := load(t, b)
	p := program(t, g, 2, schedule.Config{Workspace: fakeWorkspace, Precision: schedule.AMP})
	var half, full, grads int
	for _, e := range p.Events[p.BackwardStart:p.BackwardEnd] {
		buf := p.Buffers[e.Buf]
		if e.Free || buf.Value == ir.NoValue || g.Values[buf.Value].Name != "model.1.w" {
			continue
		}
		switch {
		case buf.Kind == schedule.ParamGrad:
			grads++
		case buf.Bytes == 16*16*2:
			half++
		case buf.Bytes == 16*16*4:
			full++
		}
	}
	if half != 3 || full != 0 || grads != 1 {
		t.Errorf("the shared weight's backward: %d float16 gradients, %d float32 ones, %d .grad; want 3, 0 and 1", half, full, grads)
	}
}
