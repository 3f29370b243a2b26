package schedule

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/ir"
)

// TestConvStandardisedWeight checks a convolution whose weight is computed
// from a parameter in the forward (BiT's StdConv2d standardises it with
// F.batch_norm; a product stands for that here) on the graph's input,
// which needs no gradient: its output needs one all the same, so the
// backward reaches it, and the backward-filter pass writes the derived
// weight's gradient in the conv's type (float32 under autocast, after the
// float16 one), alive while the parameter's .grad is made; a depthwise
// conv that PyTorch runs with its own kernels (float32) alike.
func TestConvStandardisedWeight(t *testing.T) {
	for _, tc := range []struct {
		groups int64 // 4: depthwise, which PyTorch runs with its own kernels in float32
		prec   Precision
		want   []string
	}{
		{1, FP32, []string{"alloc grad 1152", "alloc param-grad 1152", "free grad 1152"}},
		{1, AMP, []string{"alloc grad 576", "alloc grad 1152", "free grad 576", "alloc param-grad 1152", "free grad 1152"}},
		{4, FP32, []string{"alloc grad 288", "alloc param-grad 288", "free grad 288"}},
	} {
		g, s, _, _, _ := oneOpGraphAt(t, oneOp{op: "Conv", build: func(m onnxbuild.Scope, x, _, _, _ onnxbuild.T) []string {
			w := m.Param("w", 8, 4/tc.groups, 3, 3)
			return m.Node("Conv", []string{x.Name, m.Node("Mul", []string{w, w}, 1)[0]}, 1,
				onnxbuild.IntsAttr("pads", 1, 1, 1, 1), onnxbuild.IntAttr("group", tc.groups))
		}}, ir.Binding{Batch: 2, Height: 16, Width: 16})
		w := 8 * 4 / tc.groups * 3 * 3
		p, err := Build(g, s, Config{Precision: tc.prec})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range p.Events[p.BackwardStart:p.BackwardEnd] {
			buf := p.Buffers[e.Buf]
			if buf.Node < 0 || g.Nodes[buf.Node].Name != "/op/Conv" || buf.Bytes%w != 0 || buf.Kind != Grad && buf.Kind != ParamGrad {
				continue
			}
			verb := "alloc"
			if e.Free {
				verb = "free"
			}
			got = append(got, fmt.Sprintf("%s %s %d", verb, buf.Kind, buf.Bytes))
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("groups %d %v: the weight's gradients differ (-want +got):\n%s", tc.groups, tc.prec, diff)
		}
	}
}
