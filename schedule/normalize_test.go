package schedule_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/schedule"
)

// normalizeNet is F.normalize(conv(x), dim=-1) as the exporter writes it
// (ReduceL2 over the last axis, Clip at eps, Expand back to the input's
// shape, Div), then y + y, whose AddBackward saves nothing.
func normalizeNet() *onnxbuild.Builder {
	b := onnxbuild.New("normalize")
	c := b.Module("conv").Conv(b.Input("x", 3), 8, 3, 1)
	m := b.Module("norm")
	n := m.Node("ReduceL2", []string{c.Name}, 1, onnxbuild.IntsAttr("axes", -1), onnxbuild.IntAttr("keepdims", 1))[0]
	cl := m.Node("Clip", []string{n}, 1)[0] // clamp_min(eps); the bound does not matter here
	shape := m.Node("Shape", []string{c.Name}, 1)[0]
	e := m.Node("Expand", []string{cl, shape}, 1)[0]
	y := onnxbuild.T{Name: m.Node("Div", []string{c.Name, e}, 1)[0], C: 8}
	b.Output(b.Module("out").Add(y, y))
	return b
}

// TestNormalize checks F.normalize's ops at batch 2 in float32
// (tools/autograd/derivatives.yaml): the norm allocates its [N, C, H, 1]
// result and saves its input and result; clamp_min allocates its own and
// saves its input; expand_as is a view; the division allocates its output
// and saves self and other (the expanded view: the clamp's storage), never
// its result, so the normalized tensor is freed once y + y has read it.
// The backward makes the gradients of the division's operands (other's of
// the expanded size, summed back by ExpandBackward to the clamp's), of the
// clamp's input, and of the norm's input.
func TestNormalize(t *testing.T) {
	g := load(t, normalizeNet())
	p := program(t, g, 2, schedule.Config{})
	fwd := func(node string) []string { return events(p, 0, p.ForwardEnd, atNode(p, node)) }
	diff(t, "norm forward", fwd("/norm/ReduceL2"), []string{"+activation /norm/ReduceL2_output_0"})
	diff(t, "clamp forward", fwd("/norm/Clip"), []string{"+activation /norm/Clip_output_0"})
	diff(t, "expand forward", fwd("/norm/Expand"), nil)
	diff(t, "div forward", fwd("/norm/Div"), []string{"+activation /norm/Div_output_0"})
	// The division's output is freed in the forward, after y + y.
	diff(t, "add forward", fwd("/out/Add"), []string{"+activation /out/Add_output_0", "-activation /norm/Div_output_0"})
	checkBalanced(t, p)
}
