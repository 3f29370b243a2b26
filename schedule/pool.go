package schedule

import (
	"fmt"
	"slices"

	"github.com/onnxmem/onnxmem/ir"
)

// The pools, reductions and resamplings: max_pool2d_with_indices, which
// saves its input and its int64 indices (derivatives.yaml: self, result1);
// avg_pool2d, which saves its input; and the ops that save only sizes:
// mean and sum over dims (mean.dim, sum.dim_IntList), upsample_nearest2d
// and constant_pad_nd. Their backwards make one gradient of the input.
//
// Worked example, a 3×3 max pool of stride 2 on a float16 x of [8 64 160
// 160] (25 MiB): the output [8 64 80 80] (6.25 MiB), the int64 indices of
// each output element (25 MiB), a contiguous copy of x when x is strided
// (freed when the kernel returns), and autograd saves x and the indices;
// the backward makes x's gradient, 25 MiB, and frees the indices with the
// node.

// newOutput emits an op that saves only sizes and writes a new tensor:
// adaptive_avg_pool2d to 1×1, which runs as x.mean((-1, -2),
// keepdim=True), and constant_pad_nd, a clone of the input when no pad is
// positive (Swin's windows at 224).
func newOutput(o *fwdOp) { o.newOut(0, Activation) }

// maxPoolForward emits max_pool2d_with_indices: the output, the int64
// indices, the kernel's contiguous copy of a strided input; it saves the
// input and the indices.
func maxPoolForward(o *fwdOp) {
	x := o.n.Inputs[0]
	o.newOut(0, Activation)
	idx := o.alloc(o.s.Elems(o.out(0))*8, Indices, ir.NoValue)
	o.freeScratch(o.copyIn(x))
	o.save(x)
	o.own(idx)
}

// avgPoolForward emits avg_pool2d, which saves its input: the kernel's
// contiguous copy of a strided input, and the output.
func avgPoolForward(o *fwdOp) {
	x := o.n.Inputs[0]
	o.save(x)
	if o.stopped() {
		return
	}
	c := o.copyIn(x)
	o.newOut(0, Activation)
	o.freeScratch(c)
}

// upsampleForward emits upsample_nearest2d, which saves nothing.
func upsampleForward(o *fwdOp) {
	s := o.s
	x, y := o.n.Inputs[0], o.out(0)
	if o.fp32 && o.dt[x] != ir.Float32 {
		// Autocast runs upsampling in float32: a float32 copy of the
		// input, then a float32 output.
		c := o.scratch(s.Elems(x)*4, Cast)
		o.dt[y] = ir.Float32
		o.newOut(0, Activation)
		o.freeScratch(c)
		return
	}
	// upsample_nearest2d is a structured kernel: its output exists
	// before the kernel runs, which copies a strided input to a
	// contiguous one only when it resizes; at the input's own size
	// it is output.copy_(input) (aten/src/ATen/native/cuda/
	// UpSampleNearest2d.cu, upsample_nearest2d_out_cuda_template).
	o.newOut(0, Activation)
	if !slices.Equal(s.Dims[x], s.Dims[y]) {
		o.freeScratch(o.copyIn(x))
	}
}

// sumForward emits sum over dims, which saves nothing.
func sumForward(o *fwdOp) {
	s := o.s
	x, y := o.n.Inputs[0], o.out(0)
	if o.fp32 {
		o.dt[y] = ir.Float32 // sum accumulates and returns float32 under autocast
	}
	o.newOut(0, Activation)
	// A half-precision output's float32 accumulation buffer, which the
	// input's size decides (HalfSum): a reduction call, sized anew at
	// every batch as a workspace is.
	if o.dt[y].Size() == 2 && s.Elems(y) > 0 {
		o.workspace(ConvCall{Phase: o.phase, Which: HalfSum, N: s.Elems(y), Cin: s.Elems(x) / s.Elems(y), ElemSize: o.dt[x].Size()})
	}
}

// maxPoolBackward emits max_pool2d_with_indices_backward, which reads a
// strided gradient (a concat's slice) as it is: the ground truth's traces
// of a pool whose output only a concat reads show no copy of it. A
// strided saved input is copied.
func maxPoolBackward(o *bwdOp) {
	x := o.n.Inputs[0]
	o.fresh(x)
	o.freeScratch(o.copyIf(!o.contig[x], o.bytes(x)))
}

// avgPoolBackward emits avg_pool2d_backward, which copies a strided
// incoming gradient.
func avgPoolBackward(o *bwdOp) {
	c := o.contiguous()
	o.fresh(o.n.Inputs[0])
	o.freeScratch(c)
}

// upsampleBackward emits upsample_nearest2d_backward, which reads a
// strided (even expanded) gradient as it is, or upsample_bilinear2d's and
// upsample_bicubic2d's backward, which take a contiguous copy of it first
// (grad_output_.contiguous(), UpSampleBilinear2d.cu and
// UpSampleBicubic2d.cu), freed when the kernel returns. Under autocast it
// computes the float32 gradient of the float32 copy, which ToCopyBackward
// converts.
func upsampleBackward(o *bwdOp) {
	x, y := o.n.Inputs[0], o.outs[0]
	c := int32(-1)
	if interpolating(o.n) {
		c = o.contiguous()
	}
	if o.dt[x] != o.dt[y] && o.rg[x] {
		o.later(o.alloc(o.s.Elems(x)*o.dt[y].Size(), Grad, x), x, false)
	} else {
		o.fresh(x)
	}
	o.freeScratch(c)
}

// interpolating reports whether Resize node n interpolates (mode "linear"
// or "cubic": F.interpolate's bilinear and bicubic modes) rather than
// copying the nearest pixel.
func interpolating(n *ir.Node) bool {
	a, ok := n.Attr("mode")
	return ok && (a.Str == "linear" || a.Str == "cubic")
}

// sumBackward passes the incoming gradient on, expanded to the input's
// sizes: a view.
func sumBackward(o *bwdOp) { o.pass(o.n.Inputs[0], false, false) }

// upsampleCheck accepts a Resize in nearest mode, and in linear or cubic
// mode over the two spatial dims of a 4-d input (F.interpolate's bilinear
// and bicubic; antialias, which the exporter writes as its own attribute,
// is refused: its kernels keep weight buffers of their own).
func upsampleCheck(f *Flow, n *ir.Node) (ir.Eager, error) {
	a, ok := n.Attr("mode")
	if !ok || a.Str == "nearest" {
		return ir.EagerUpsample, nil
	}
	if !interpolating(n) {
		return 0, fmt.Errorf("schedule: node %s: Resize mode %q is not supported: nearest, linear and cubic have memory rules", n.Name, a.Str)
	}
	if aa, ok := n.Attr("antialias"); ok && aa.Int != 0 {
		return 0, fmt.Errorf("schedule: node %s: Resize with antialias is not supported (F.interpolate(..., antialias=True)); open an issue with the graph to add it", n.Name)
	}
	if d := f.Shapes().Dims[n.Inputs[0]]; len(d) != 4 {
		return 0, fmt.Errorf("schedule: node %s: Resize mode %q of a %d-d input is not supported: only 4-d inputs (bilinear, bicubic) have memory rules", n.Name, a.Str, len(d))
	}
	return ir.EagerUpsample, nil
}
