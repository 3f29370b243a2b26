package schedule

import "github.com/onnxmem/onnxmem/ir"

// Convolution, as eager PyTorch runs conv2d on a CUDA device through cuDNN
// (aten/src/ATen/native/Convolution.cpp). derivatives.yaml's convolution
// entry saves the input and the weight for convolution_backward, which
// makes the input's gradient and the weight's, each in a cuDNN call with
// a workspace of its own, and sums the gradient into the bias's.
//
// Worked example, a 3×3 conv of 64 to 128 channels with no bias on a
// float32 activation x of [8 64 80 80] (12.5 MiB) under autocast: the
// forward casts the weight to float16 (cached until autocast exits) and x
// to a float16 copy (6.25 MiB), which autograd saves with the weight's
// copy; then the float16 output, [8 128 80 80] (12.5 MiB), and cuDNN's
// workspace, freed when the kernel returns. The backward makes the
// float16 gradient of x's copy with the backward-data workspace, the
// weight's float16 gradient with the backward-filter workspace, and once
// the node has released its incoming gradient and the saved copies,
// ToCopyBackward turns each into its float32 gradient.

// convForward emits conv2d: under autocast the casts of the bias, the
// weight and the input, then the saves, a contiguous copy of a strided
// input, the output and cuDNN's forward workspace.
func convForward(o *fwdOp) {
	n, s := o.n, o.s
	x := n.Inputs[0]
	c, xcast := int32(-1), int32(-1)
	if o.lower {
		// Autocast casts the bias, then the weight (both cached until
		// autocast exits), then an input of another type (a fresh
		// contiguous copy, which conv saves in place of the input).
		if len(n.Inputs) > 2 && n.Inputs[2] != ir.NoValue {
			o.castParam(n.Inputs[2])
		}
		o.castParam(n.Inputs[1])
		o.dt[o.out(0)] = o.low()
		if o.dt[x] != o.low() {
			xcast = o.alloc(s.Elems(x)*o.low().Size(), Cast, x)
		}
	}
	// Autograd packs the inputs it saves before the kernel runs.
	if xcast >= 0 {
		o.own(xcast)
	} else {
		o.save(x)
	}
	if st := o.castOf(n.Inputs[1]); st >= 0 {
		o.ref(st)
		o.own(st)
	}
	if o.stopped() {
		return
	}
	cl := o.channelsLast(x)
	if xcast < 0 && !cl {
		c = o.copyIn(x)
	}
	o.newOut(0, Activation)
	if cl {
		// cuDNN takes a channels-last input as it is and writes a
		// channels-last output (cudnn_conv_suggest_memory_format).
		o.setLayout(o.out(0), channelsLastStrides(s.Dims[o.out(0)]))
	}
	o.workspace(o.convCall(n, Forward, "fwd"))
	o.freeScratch(c)
}
