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

// TestDerivedValues checks values computed from parameters alone, at batch
// 2 under autocast: conv(x) · exp(p) with p a 0-dim parameter stays
// float16 (a 0-dim tensor does not promote a dimensioned one) and with p
// of [C, 1, 1] becomes float32 (Swin V2's logit_scale); either way the
// product saves conv(x) for p's gradient and p gets its .grad; and
// x / conv(x), whose divisor needs a gradient, saves the divisor, so
// conv(x) lives to the backward.
func TestDerivedValues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dims   []int64
		elem   int64 // bytes an element of the product
		divide bool
	}{
		{"0-dim scale", nil, 2, false},
		{"per-channel scale", []int64{8, 1, 1}, 4, false},
		{"divisor needs a gradient", nil, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := onnxbuild.New("derived")
			x := b.Input("x", 3)
			m := b.Module("m")
			var y onnxbuild.T
			if tc.divide {
				c := b.Module("conv").Conv(x, 3, 3, 1)
				y = onnxbuild.T{Name: m.Node("Div", []string{x.Name, c.Name}, 1)[0], C: 3}
			} else {
				c := b.Module("conv").Conv(x, 8, 3, 1)
				e := m.Node("Exp", []string{m.Param("scale", tc.dims...)}, 1)[0]
				y = onnxbuild.T{Name: m.Node("Mul", []string{c.Name, e}, 1)[0], C: 8}
			}
			b.Output(b.Module("out").Add(y, y))
			g := load(t, b)
			p := program(t, g, 2, schedule.Config{Precision: schedule.AMP})
			var prod, grads int64
			var convLive bool
			for i, e := range p.Events {
				buf := p.Buffers[e.Buf]
				if buf.Value >= 0 && g.Values[buf.Value].Name == "/m/Mul_output_0" && !e.Free && buf.Kind == schedule.Activation {
					prod = buf.Bytes
				}
				if buf.Kind == schedule.ParamGrad && buf.Value >= 0 && g.Values[buf.Value].Name == "m.scale" {
					grads++
				}
				if i == p.ForwardEnd-1 {
					convLive = liveAt(p, i, "/conv/Conv_output_0")
				}
			}
			// x is [2, 3, 16, 16]; the product [2, 8, 16, 16].
			if want := 2 * 8 * 16 * 16 * tc.elem; !tc.divide && prod != want {
				t.Errorf("product of %d bytes, want %d", prod, want)
			}
			if !tc.divide && grads != 1 {
				t.Errorf("%d .grad buffers of m.scale, want 1", grads)
			}
			if !convLive {
				t.Errorf("conv(x) freed in the forward: a saved operand")
			}
		})
	}
}

// liveAt reports whether the named value's activation buffer is live after
// event i.
func liveAt(p *schedule.Program, i int, name string) bool {
	live := false
	for _, e := range p.Events[:i+1] {
		buf := p.Buffers[e.Buf]
		if buf.Kind == schedule.Activation && buf.Value >= 0 && p.Graph.Values[buf.Value].Name == name {
			live = !e.Free
		}
	}
	return live
}

// TestAutocastOff checks that under autocast a matmul whose operands the
// code cast up to float32 itself (x.float() of a float16 tensor, a Cast
// to FLOAT in the export, seen through a transpose), and a matmul of such
// a matmul's output, run in float32 (a region with autocast disabled:
// timm's EfficientViT linear attention), while a matmul of the float16
// operands themselves runs in float16, and so does one with a single cast
// operand, or whose casts are of float32 tensors (a softmax's output,
// x.to(orig_dtype) after a float32 computation).
func TestAutocastOff(t *testing.T) {
	for _, tc := range []struct {
		name        string
		a, b        string // each operand: "cast" conv(x).float(), "cast32" softmax(conv(x)).float(), or "plain" conv(x)
		first, next int64  // bytes per element of the two matmuls' outputs
	}{
		{"both cast", "cast", "cast", 4, 4},
		{"one cast", "cast", "plain", 2, 2},
		{"none cast", "plain", "plain", 2, 2},
		{"casts of float32", "cast32", "cast32", 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := onnxbuild.New("autocastoff")
			c := b.Module("conv").Conv(b.Input("x", 3), 8, 3, 1)
			m := b.Module("attn")
			operand := func(kind string) string {
				switch kind {
				case "cast":
					return m.Node("Cast", []string{c.Name}, 1, onnxbuild.IntAttr("to", 1))[0]
				case "cast32":
					sm := m.Node("Softmax", []string{c.Name}, 1, onnxbuild.IntAttr("axis", -1))[0]
					return m.Node("Cast", []string{sm}, 1, onnxbuild.IntAttr("to", 1))[0]
				}
				return c.Name
			}
			a := operand(tc.a)
			kt := m.Node("Transpose", []string{operand(tc.b)}, 1, onnxbuild.IntsAttr("perm", 0, 1, 3, 2))[0]
			kv := m.Node("MatMul", []string{kt, a}, 1)[0]
			out := m.Node("MatMul", []string{a, kv}, 1)[0]
			b.Output(onnxbuild.T{Name: out, C: 8})
			g := load(t, b)
			p := program(t, g, 2, schedule.Config{Precision: schedule.AMP})
			got := map[string]int64{}
			for _, e := range p.Events {
				buf := p.Buffers[e.Buf]
				if buf.Value >= 0 && buf.Kind == schedule.Activation && !e.Free {
					got[g.Values[buf.Value].Name] = buf.Bytes
				}
			}
			// conv(x) is [2, 8, 16, 16]: both products are [2, 8, 16, 16].
			elems := int64(2 * 8 * 16 * 16)
			if got[kv] != elems*tc.first || got[out] != elems*tc.next {
				t.Errorf("matmul outputs of %d and %d bytes, want %d and %d", got[kv], got[out], elems*tc.first, elems*tc.next)
			}
		})
	}
}
