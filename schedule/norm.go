package schedule

import "github.com/onnxmem/onnxmem/ir"

// The normalizations: batch_norm, layer_norm and linalg_vector_norm.
// derivatives.yaml: native_batch_norm saves input, weight, save_mean and
// save_invstd (float32, one per channel) in training, and input, weight
// and the running statistics on running statistics; native_layer_norm
// saves input, weight, bias, mean and rstd (float32, one per normalized
// row); linalg_vector_norm saves self and its result (norm_backward).
//
// Worked example, layer_norm over the last dim of a float16 x of [8 197
// 768] (2.3 MiB) under autocast, which runs it in float32
// (AT_FORALL_FP32): a float32 copy of x (4.6 MiB), which autograd saves,
// the float32 output (4.6 MiB), and the mean and rstd, 8·197 floats each
// (6,304 bytes). Its backward makes the float32 gradient of the copy,
// the weight's and the bias's .grad, and once the node is done
// ToCopyBackward turns the copy's gradient into x's float16 one.

// batchNormForward emits batch_norm: the output, then in training the
// batch's mean and inverse std, which autograd saves with the input. The
// output follows the input's layout, as an element-wise op's does.
func batchNormForward(o *fwdOp) {
	x := o.n.Inputs[0]
	o.newOut(0, Activation)
	o.save(x)
	ch := int64(1)
	if d := o.s.Dims[x]; len(d) > 1 {
		ch = d[1]
	}
	switch {
	case o.k == ir.EagerBatchNorm && o.cfg.Eval == nil:
		for range 2 { // save_mean, save_invstd: fp32 whatever the input
			o.own(o.alloc(ch*4, Stats, ir.NoValue))
		}
	case o.cfg.Eval != nil:
		// cuDNN's batch norm on the running statistics still returns
		// a save_mean and a save_invstd of the channels, which
		// F.batch_norm drops at once (the official code's validation
		// traces, calibration §23: two blocks of 4·C bytes after each
		// output, freed before the next op).
		a, b := o.scratch(ch*4, Stats), o.scratch(ch*4, Stats)
		o.freeScratch(a)
		o.freeScratch(b)
	}
	o.followLayout()
}

// layerNormForward emits native_layer_norm. Autocast runs layer_norm in
// float32: a float32 copy of a half input first, in the input's layout,
// which it saves. The kernel makes a strided input contiguous for itself
// (freed when it returns), then writes the output, the mean and rstd
// (float32, one per normalized row). calibration/convnext_vit_ops.py.
func layerNormForward(o *fwdOp) {
	n, s := o.n, o.s
	x := n.Inputs[0]
	elem := o.dt[x].Size()
	if o.fp32 && o.dt[x] != ir.Float32 {
		o.own(o.alloc(s.Elems(x)*4, Cast, x))
		elem = 4
	} else {
		o.save(x)
	}
	c := o.copyIf(!o.contig[x], s.Elems(x)*elem)
	if o.fp32 {
		o.dt[o.out(0)] = ir.Float32
	}
	o.newOut(0, Activation)
	rows := s.Elems(x)
	if d := s.Dims[x]; len(d) > 0 {
		axis := int(n.IntAttr("axis", -1))
		if axis < 0 {
			axis += len(d)
		}
		rows = 1
		for _, v := range d[:max(axis, 0)] {
			rows *= v
		}
	}
	for range 2 {
		o.own(o.alloc(rows*4, Stats, ir.NoValue))
	}
	o.freeScratch(c)
}

// normForward emits linalg_vector_norm, which saves its input and its
// result. Autocast calls it with dtype float32 (fp32_set_opt_dtype): the
// kernel reads a half input as it is and writes a float32 result.
func normForward(o *fwdOp) {
	o.save(o.n.Inputs[0])
	if o.fp32 {
		o.dt[o.out(0)] = ir.Float32
	}
	o.newOut(0, Activation)
	o.save(o.out(0))
}

// batchNormBackward emits native_batch_norm_backward: cuDNN writes the
// input's gradient in the input's memory format, and a strided incoming
// gradient is copied first; then the weight's and the bias's .grad.
func batchNormBackward(o *bwdOp) {
	n := o.n
	if x := n.Inputs[0]; o.channelsLast(x) {
		o.freshLayout(o.str[x], o.s.Dims[x])
	}
	c := o.contiguous()
	o.fresh(n.Inputs[0])
	o.paramGrad(n.Inputs[1])
	o.paramGrad(n.Inputs[2])
	o.freeScratch(c)
}

// layerNormBackward emits native_layer_norm_backward: the saved input made
// contiguous (when strided), the input's gradient (float32 under autocast,
// which ToCopyBackward then turns to the input's type), the weight's and
// the bias's, and the copy goes.
func layerNormBackward(o *bwdOp) {
	n, s := o.n, o.s
	x := n.Inputs[0]
	cast := o.autocast() && o.dt[x] != ir.Float32
	elem := o.dt[x].Size()
	if cast {
		elem = 4
	}
	c := o.copyIf(!o.contig[x], s.Elems(x)*elem)
	if o.rg[x] {
		if cast {
			o.later(o.alloc(s.Elems(x)*4, Grad, x), x, false)
		} else {
			o.fresh(x)
		}
	}
	for _, p := range n.Inputs[1:] {
		if p != ir.NoValue && o.param[p] {
			o.paramGrad(p)
		}
	}
	// The kernel reads dY.contiguous() (layer_norm_backward_cuda):
	// a strided gradient (MultiheadAttention's transposed query's)
	// is copied after the gradients are allocated.
	o.freeScratch(o.contiguous())
	o.freeScratch(c)
}

// batchNormCheck runs a batch norm on its running statistics (not in
// training mode) as EagerBatchNormEval.
func batchNormCheck(_ *Flow, n *ir.Node) (ir.Eager, error) {
	if !ir.BatchNormTrains(n) {
		return ir.EagerBatchNormEval, nil
	}
	return ir.EagerBatchNorm, nil
}
