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
	// A weight computed from the parameters in the forward (weight
	// standardisation: timm's StdConv2d and ScaledStdConv2d run
	// F.batch_norm over the weight before conv2d) is a new tensor every
	// step, which conv2d saves; under autocast conv2d casts it (a non-leaf
	// tensor: no cache) and saves the float16 copy, and the float32 one
	// goes when the module's forward returns, after the kernel.
	wtmp := int32(-1)
	if w := n.Inputs[1]; o.derived[w] && !o.param[w] && !o.data[w] && o.vst[w] < 0 && len(s.Dims[w]) == 4 {
		if o.lower {
			wtmp = o.scratch(s.Elems(w)*o.dt[w].Size(), Activation)
			o.own(o.alloc(s.Elems(w)*o.low().Size(), Cast, w))
		} else {
			o.own(o.alloc(s.Elems(w)*o.dt[w].Size(), Activation, w))
		}
	}
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
		o.freeScratch(wtmp)
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
	o.freeScratch(wtmp)
}

// convBackward emits convolution_backward: the input's gradient with the
// backward-data pass, the weight's with the backward-filter pass (each
// taking its own contiguous copy of a strided incoming gradient and its
// workspace), and the bias's sum. Under autocast these are float16
// gradients of the casts, which ToCopyBackward turns into float32 ones.
func convBackward(o *bwdOp) {
	n, s := o.n, o.s
	x := n.Inputs[0]
	cl := o.channelsLast(x)
	// A strided saved input is copied again for the whole backward.
	xc := int32(-1)
	if !cl {
		xc = o.copyIf(!o.contig[x], o.bytes(x))
	}
	if cl {
		// cuDNN's channels-last convolution: the incoming gradient
		// made channels-last (a copy unless it is), the input's
		// gradient written channels-last.
		o.copyIn = func() int32 {
			return o.copyIf(!gradChannelsLast(o.gy, s.Dims[o.outs[0]]), o.bytes(o.outs[0]))
		}
		o.freshLayout(channelsLastStrides(s.Dims[x]), s.Dims[x])
	}
	// Under autocast the conv computes low-precision gradients of its
	// cast input and weight; ToCopyBackward then allocates the
	// float32 ones and frees those. A depthwise conv that PyTorch runs
	// with its own kernels (ConvBackend::CudaDepthwise2d) makes the
	// weight's gradient before the input's
	// (calibration/torchvision_steps.json).
	if o.nativeDepthwise() {
		o.standardisedGrad(false)
		var params []int32 // pairs of a low-precision gradient and its parameter
		for _, w := range n.Inputs[1:] {
			switch {
			case w == ir.NoValue || !o.param[w]:
			case o.autocast():
				params = append(params, o.lowGrad(w), int32(w))
			default:
				o.paramGrad(w)
			}
		}
		if o.rg[x] {
			o.inputGrad(x)
		}
		for j := 0; j < len(params); j += 2 {
			o.later(params[j], ir.ValueID(params[j+1]), true)
		}
		o.freeScratch(xc)
		return
	}
	// The data and the filter pass each take their own contiguous
	// copy of a strided incoming gradient.
	if o.rg[x] {
		o.inputGrad(x)
		c := o.contiguous()
		o.workspace(o.convCall(n, Backward, "bwd-data"))
		o.freeScratch(c)
	}
	o.standardisedGrad(true)
	for j, w := range n.Inputs[1:] {
		if w == ir.NoValue || !o.param[w] {
			continue
		}
		c := int32(-1)
		if j == 0 {
			c = o.contiguous()
		}
		if o.autocast() {
			// The weight's cast was made after the bias's, so its
			// ToCopyBackward runs first.
			o.later(o.lowGrad(w), w, true)
		} else {
			o.paramGrad(w)
		}
		if j == 0 {
			o.workspace(o.convCall(n, Backward, "bwd-filter"))
		}
		o.freeScratch(c)
		if j == 1 {
			// The bias's gradient: a sum over N, H and W; over the
			// rows of a [N·H·W, C] matrix when the gradient is
			// channels-last (the patch embedding's, whose gradient
			// comes back through a transpose; ConvNeXt's).
			y := n.Outputs[0]
			rows := s.Elems(y) / max(s.Elems(w), 1)
			if gradChannelsLast(o.gy, s.Dims[y]) {
				o.columnSum(rows, s.Elems(w))
			} else {
				o.channelSum(rows, s.Elems(w), o.gy.st >= 0 && o.gy.st == o.seed)
			}
		}
	}
	o.freeScratch(xc)
}

// standardisedGrad emits the gradient of a convolution's weight that the
// forward computed from its parameter (StdConv2d's F.batch_norm over the
// weight), if it has one: the backward-filter pass (with cuDNN's workspace
// when cudnn) writes it in the conv's type, which, under autocast,
// ToCopyBackward makes float32 once the node has let its incoming gradient
// and saved casts go, after the input cast's; batch_norm's backward then
// makes the parameter's .grad (derivedGrads) while that gradient is alive
// (calibration/results/timm_rv_traces.jsonl.gz: two float32 gradients of a
// 2048×1024 weight at once).
func (o *bwdOp) standardisedGrad(cudnn bool) {
	n, s := o.n, o.s
	w := n.Inputs[1]
	if !o.derived[w] || o.param[w] || o.data[w] || len(s.Dims[w]) != 4 {
		return
	}
	c := int32(-1)
	if cudnn {
		c = o.contiguous()
	}
	cast := o.autocast() && o.dt[w] != o.low()
	size := o.dt[w].Size()
	if cast {
		size = o.low().Size()
	}
	gw := o.scratch(s.Elems(w)*size, Grad)
	if cudnn {
		o.workspace(o.convCall(n, Backward, "bwd-filter"))
	}
	o.freeScratch(c)
	if !cast {
		o.untilDerived = append(o.untilDerived, gw)
		return
	}
	o.post = append(o.post, func() {
		g32 := o.scratch(s.Elems(w)*o.dt[w].Size(), Grad)
		o.freeScratch(gw)
		o.untilDerived = append(o.untilDerived, g32)
	})
}

// nativeDepthwise reports whether the conv is a depthwise convolution (a
// group per input channel) that PyTorch runs with its own CUDA kernels
// rather than cuDNN's: ConvParams::use_cudnn_depthwise sends only float16
// ones of at least 32 channels, square strides and no dilation to cuDNN,
// and of those the ones check_cudnn_depthwise_workload_with_filter (cuDNN
// 8.2 and later) accepts: every stride-1 conv with a square 1×1, 3×3 or 5×5
// filter on an input at least 7 wide, and at stride 2 at batch 1 a 3×3 or
// 5×5 filter (or 1×1 on at most 28 wide), at larger batches a 3×3 or 5×5
// filter on 512 or more channels or on 256 or more at least 28 wide, or a
// 1×1 one at batch 16 or less on 128 or more channels at most 7 wide.
func (o *bwdOp) nativeDepthwise() bool {
	n := o.n
	if o.channelsLast(n.Inputs[0]) {
		return false // use_cudnn_depthwise: always cuDNN for channels-last
	}
	x, w := o.s.Dims[n.Inputs[0]], o.s.Dims[n.Inputs[1]]
	g := n.IntAttr("group", 1)
	if len(x) != 4 || len(w) != 4 || g <= 1 || g != x[1] || w[0]%x[1] != 0 {
		return false
	}
	cudnn := func() bool {
		st := n.IntsAttr("strides")
		stride := int64(1)
		if len(st) == 2 {
			if st[0] != st[1] && x[2] != 1 {
				return false
			}
			stride = st[1]
		}
		for _, d := range n.IntsAttr("dilations") {
			if d != 1 {
				return false
			}
		}
		if o.dt[n.Inputs[0]] != ir.Float16 || x[1] < 32 {
			return false
		}
		if x[2] == 1 && stride == 1 {
			return true
		}
		f := w[3]
		if w[2] != f || (f != 1 && f != 3 && f != 5) || x[3] < 7 {
			return false
		}
		bs, ch, wd := x[0], x[1], x[3]
		switch {
		case stride == 1:
			return true
		case stride != 2:
			return false
		case bs == 1:
			return (f == 1 && wd <= 28) || f == 3 || f == 5
		}
		return (f == 1 && bs <= 16 && ch >= 128 && wd <= 7) || ((f == 3 || f == 5) && (ch >= 512 || (ch >= 256 && wd >= 28)))
	}
	return !cudnn()
}
