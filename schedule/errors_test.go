package schedule_test

import (
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// buildErr loads b, infers it at batch 2 and returns Build's error.
func buildErr(t *testing.T, b *onnxbuild.Builder) error {
	t.Helper()
	g := load(t, b)
	s, err := g.Infer(ir.Binding{Batch: 2, Height: 16, Width: 16})
	if err != nil {
		t.Fatal(err)
	}
	_, err = schedule.Build(g, s, schedule.Config{})
	return err
}

// TestBuildErrors checks that Build refuses what it has no memory rule for,
// with an error that starts "schedule: " and names the node and the op.
func TestBuildErrors(t *testing.T) {
	opOnActivations := func(op string) *onnxbuild.Builder {
		b := onnxbuild.New("bad")
		b.Output(b.Layer(1).Op(op, b.Layer(0).Block(b.Input("x", 3), 8, 3, 1)))
		return b
	}
	linear := onnxbuild.New("linear")
	l1 := linear.Layer(1)
	y := l1.Node("Resize", []string{linear.Layer(0).Block(linear.Input("x", 3), 8, 3, 1).Name, "", l1.Floats(1, 1, 2, 2)}, 1,
		onnxbuild.StringAttr("mode", "linear"), onnxbuild.IntAttr("antialias", 1))
	linear.Output(onnxbuild.T{Name: y[0], C: 8})
	gemm2 := onnxbuild.New("gemm2")
	f := gemm2.Layer(0).Flatten(gemm2.Layer(0).GlobalAvgPool(gemm2.Layer(0).Block(gemm2.Input("x", 3), 8, 3, 1)))
	gemm2.Output(onnxbuild.T{Name: gemm2.Layer(1).Node("Gemm", []string{f.Name, f.Name}, 1, onnxbuild.IntAttr("transB", 1))[0], C: 2})
	einsum1 := onnxbuild.New("einsum1")
	e := einsum1.Layer(0).Block(einsum1.Input("x", 3), 8, 3, 1)
	einsum1.Output(onnxbuild.T{Name: einsum1.Layer(1).Node("Einsum", []string{e.Name}, 1, onnxbuild.StringAttr("equation", "bchw->bhwc"))[0], C: 8})
	for _, c := range []struct {
		name  string
		b     *onnxbuild.Builder
		parts []string
	}{
		{"Sin", opOnActivations("Sin"), []string{"node /model.1/Sin", "unsupported op Sin"}},
		{"Einsum of one operand", einsum1, []string{"node /model.1/Einsum", "Einsum of two activations has a memory rule"}},
		{"Gemm of two activations", gemm2, []string{"node /model.1/Gemm", "Gemm of an activation A and a model weight B"}},
		{"Resize linear with antialias", linear, []string{"node /model.1/Resize", "antialias"}},
	} {
		err := buildErr(t, c.b)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if !strings.HasPrefix(err.Error(), "schedule: ") {
			t.Errorf("%s: error %q does not start with %q", c.name, err, "schedule: ")
		}
		for _, p := range c.parts {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("%s: error %q does not contain %q", c.name, err, p)
			}
		}
	}
	// A graph without an input has no step to build.
	if _, err := schedule.Build(&ir.Graph{Name: "empty"}, &ir.Shapes{}, schedule.Config{}); err == nil || !strings.HasPrefix(err.Error(), "schedule: ") {
		t.Errorf("graph without input: error %v", err)
	}
}

// TestResizeInterpolating checks bilinear upsampling (Resize in linear
// mode: F.interpolate(mode="bilinear")) against nearest on the same graph:
// the forward is the same, and the backward of the bilinear kernel takes a
// contiguous copy of its incoming gradient (upsample_bilinear2d_backward:
// grad_output_.contiguous()), here the expanded gradient of out.sum(), one
// buffer of the output's size that nearest's kernel reads as it is.
func TestResizeInterpolating(t *testing.T) {
	build := func(mode string) *schedule.Program {
		b := onnxbuild.New("up")
		l1 := b.Layer(1)
		y := l1.Node("Resize", []string{b.Layer(0).Block(b.Input("x", 3), 8, 3, 1).Name, "", l1.Floats(1, 1, 2, 2)}, 1,
			onnxbuild.StringAttr("mode", mode))
		b.Output(onnxbuild.T{Name: y[0], C: 8})
		g := load(t, b)
		s, err := g.Infer(ir.Binding{Batch: 2, Height: 16, Width: 16})
		if err != nil {
			t.Fatal(err)
		}
		p, err := schedule.Build(g, s, schedule.Config{})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		return p
	}
	// The Resize node's backward allocations, by size.
	backward := func(p *schedule.Program) []int64 {
		var out []int64
		for _, e := range p.Events[p.BackwardStart:p.BackwardEnd] {
			if !e.Free && e.Node >= 0 && p.Graph.Nodes[e.Node].OpType == "Resize" {
				out = append(out, p.Buffers[e.Buf].Bytes)
			}
		}
		return out
	}
	nearest, linear := build("nearest"), build("linear")
	const out, in = 2 * 8 * 32 * 32 * 4, 2 * 8 * 16 * 16 * 4 // the output's and the input's bytes
	if got := backward(nearest); len(got) != 1 || got[0] != in {
		t.Errorf("nearest: the backward allocates %v, want the input's gradient [%d]", got, in)
	}
	if got := backward(linear); len(got) != 2 || got[0] != out || got[1] != in {
		t.Errorf("linear: the backward allocates %v, want the gradient's copy and the input's gradient [%d %d]", got, out, in)
	}
	if len(nearest.Events[:nearest.ForwardEnd]) != len(linear.Events[:linear.ForwardEnd]) {
		t.Errorf("the forwards differ: %d events for nearest, %d for linear", nearest.ForwardEnd, linear.ForwardEnd)
	}
}
