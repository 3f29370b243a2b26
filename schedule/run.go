package schedule

import (
	"math"
	"slices"

	"github.com/onnxmem/onnxmem/ir"
)

// viewable reports whether a reshape of x to dims d is a view: x is dense
// and computeStride finds strides for d (layout.go), or x is strided and
// the reshape only splits dims.
func (fp *forwardPass) viewable(x ir.ValueID, d []int64) bool {
	if st := fp.denseStrides(x); st != nil {
		_, ok := viewStrides(fp.s.Dims[x], st, d)
		return ok
	}
	return splitsOnly(fp.s.Dims[x], d)
}

// splitsOnly reports whether a reshape from dims in to dims out only splits
// dims (and adds or drops dims of size 1): each dim of out of size above 1
// lies within one dim of in. Such a reshape is a view whatever the
// strides, as at::detail::computeStride finds: a split dim takes strides
// from its own. MultiheadAttention's q.view(bsz, num_heads, tgt_len,
// head_dim) of a transposed q splits its first dim.
func splitsOnly(in, out []int64) bool {
	if slices.Contains(in, 0) {
		return true // no elements: any view
	}
	i, rest := 0, int64(1) // rest: what is left of in[i] to split
	for _, d := range out {
		if d == 1 {
			continue
		}
		for rest == 1 && i < len(in) {
			rest = in[i]
			i++
		}
		if rest%d != 0 {
			return false
		}
		rest /= d
	}
	return true
}

// paramBehind returns the parameter that value v is, or views without a
// copy (an expand, reshape or unsqueeze of it, as ViT's
// class_token.expand(n, -1, -1)), or ir.NoValue.
func (bp *backwardPass) paramBehind(v ir.ValueID) ir.ValueID {
	for v != ir.NoValue {
		if bp.param[v] {
			return v
		}
		p := bp.g.Values[v].Producer
		if p < 0 || bp.data[v] {
			return ir.NoValue
		}
		switch bp.g.Nodes[p].OpType {
		case "Expand", "Unsqueeze", "Reshape", "Squeeze", "Identity":
			v = bp.g.Nodes[p].Inputs[0]
		default:
			return ir.NoValue
		}
	}
	return ir.NoValue
}

// run emits the forward of one eager op: its allocations in the order the
// kernels make them, the frees of scratch buffers, and the references that
// autograd's saved tensors take.
func (fp *forwardPass) run(n *ir.Node, k ir.Eager) {
	s := fp.s
	i := n.ID
	reads := fp.readsOf(i)
	// Under autocast the op's class says its compute type.
	lower := fp.autocast() && fp.class[i] == ir.AutocastLower
	fp32 := fp.autocast() && fp.class[i].Float32()
	for _, v := range reads {
		if fp.rg[v] {
			fp.markRG(n)
			break
		}
	}
	for _, v := range n.Inputs {
		if v != ir.NoValue && fp.param[v] {
			fp.markRG(n)
		}
	}
	out := func(j int) ir.ValueID { return n.Outputs[j] }
	// Outputs take the widest type of the inputs, as type promotion does;
	// ops that autocast lowers set theirs before allocating.
	wide := ir.Undefined
	for _, v := range reads {
		if wide == ir.Undefined || fp.dt[v].Size() > wide.Size() {
			wide = fp.dt[v]
		}
	}
	switch k {
	case ir.EagerAdd, ir.EagerSub, ir.EagerMul, ir.EagerDiv, ir.EagerCat:
		// A parameter operand, or one computed from parameters alone,
		// takes part in type promotion too (ViT's cat of its float32
		// class token with float16 patches, x + pos_embedding, ConvNeXt's
		// layer_scale * x, Swin's gathered relative position bias, Swin
		// V2's logit_scale.exp(): float32 under autocast); the operands
		// listed in reads are only activations.
		// A 0-dim one does not (a dimensioned tensor's category wins).
		for _, v := range n.Inputs {
			if v != ir.NoValue && !fp.data[v] && (fp.param[v] || fp.derived[v]) && len(s.Dims[v]) > 0 && wide != ir.Undefined && fp.dt[v].Size() > wide.Size() {
				wide = fp.dt[v]
			}
		}
	}
	for _, v := range n.Outputs {
		if fp.data[v] && wide != ir.Undefined {
			fp.dt[v] = wide
		}
	}
	newOut := func(j int, kind Kind) {
		v := out(j)
		fp.vst[v] = fp.alloc(fp.bytes(v), kind, v)
		fp.setLayout(v, nil)
	}
	save := func(v ir.ValueID) {
		if !fp.data[v] {
			return
		}
		if fp.noSave {
			fp.cp.hadSave[i] = true
			return
		}
		st := fp.vst[v]
		fp.ref(st)
		fp.saved[i] = append(fp.saved[i], st)
	}
	// inPlace gives output 0 the storage of input 0, which the op
	// overwrites (relu_, add_, …): it allocates nothing.
	ip := fp.inplace != nil && fp.inplace[i]
	inPlace := func() {
		x, _ := fp.overwrites(i)
		v := out(0)
		fp.vst[v], fp.dt[v], fp.contig[v], fp.str[v] = fp.vst[x], fp.dt[x], fp.contig[x], fp.str[x]
		fp.ref(fp.vst[x])
	}
	// copyIn makes the contiguous copy that a kernel takes of a strided input.
	copyIn := func(v ir.ValueID) int32 { return fp.copyIf(!fp.contig[v], fp.bytes(v)) }
	freeCopy := fp.freeScratch
	switch k {
	case ir.EagerConv:
		x := n.Inputs[0]
		c, xcast := int32(-1), int32(-1)
		if lower {
			// Autocast casts the bias, then the weight (both cached until
			// autocast exits), then an input of another type (a fresh
			// contiguous copy, which conv saves in place of the input).
			if len(n.Inputs) > 2 && n.Inputs[2] != ir.NoValue {
				fp.castParam(n.Inputs[2])
			}
			fp.castParam(n.Inputs[1])
			fp.dt[out(0)] = fp.low()
			if fp.dt[x] != fp.low() {
				xcast = fp.alloc(s.Elems(x)*fp.low().Size(), Cast, x)
			}
		}
		// Autograd packs the inputs it saves before the kernel runs.
		if xcast >= 0 {
			fp.own(i, xcast)
		} else {
			save(x)
		}
		if st := fp.castOf(n.Inputs[1]); st >= 0 {
			fp.ref(st)
			fp.own(i, st)
		}
		if fp.stopAt == i {
			return
		}
		cl := fp.channelsLast(x)
		if xcast < 0 && !cl {
			c = copyIn(x)
		}
		newOut(0, Activation)
		if cl {
			// cuDNN takes a channels-last input as it is and writes a
			// channels-last output (cudnn_conv_suggest_memory_format).
			fp.setLayout(out(0), channelsLastStrides(s.Dims[out(0)]))
		}
		fp.workspace(fp.convCall(n, Forward, "fwd"))
		freeCopy(c)
	case ir.EagerBatchNorm, ir.EagerBatchNormEval:
		x := n.Inputs[0]
		newOut(0, Activation)
		save(x)
		if k == ir.EagerBatchNorm && fp.cfg.Eval == nil {
			ch := int64(1)
			if d := s.Dims[x]; len(d) > 1 {
				ch = d[1]
			}
			for j := 0; j < 2; j++ { // save_mean, save_invstd: fp32 whatever the input
				fp.own(i, fp.alloc(ch*4, Stats, ir.NoValue))
			}
		}
	case ir.EagerSiLU:
		if ip {
			// silu_ overwrites its input, which its derivative
			// (silu_backward(grad, self)) needs: autograd saves a clone
			// of it made before the op, and the op's result is the
			// input's storage (calibration/silu_saved.py; the ground
			// truth's traces free the block batch norm allocated when a
			// Conv's output is dropped). Under no_grad, or on an input
			// that needs no gradient, there is no clone.
			if x := fp.siluIn[i]; fp.cfg.Eval == nil && fp.rg[x] {
				fp.own(i, fp.alloc(fp.bytes(x), Activation, x))
			}
			if fp.stopAt == i {
				return
			}
			inPlace()
			break
		}
		save(fp.siluIn[i])
		if fp.stopAt == i {
			return
		}
		newOut(0, Activation)
	case ir.EagerSavesResult, ir.EagerSoftmax:
		if ip {
			// relu_ saves its result: the input's storage, overwritten.
			inPlace()
			save(out(0))
			break
		}
		if fp32 {
			fp.dt[out(0)] = ir.Float32 // autocast runs softmax in float32
		}
		newOut(0, Activation)
		save(out(0))
	case ir.EagerSavesInput:
		x := n.Inputs[0]
		if ip {
			// hardswish_ needs the input it overwrites: autograd keeps a
			// copy of it, made before the op (no copy without autograd, in
			// the eval step's no_grad).
			if fp.cfg.Eval == nil {
				fp.own(i, fp.alloc(fp.bytes(x), Activation, x))
			}
			if fp.stopAt == i {
				return
			}
			inPlace()
			break
		}
		save(x)
		if fp.stopAt == i {
			return
		}
		newOut(0, Activation)
	case ir.EagerDropout:
		x := n.Inputs[0]
		if !fp.dropoutTrains(n) {
			// Eval mode or p = 0: the input itself; no mask.
			one := *n
			one.Outputs = n.Outputs[:1]
			fp.view(&one)
			break
		}
		if ip {
			// dropout_: noise = empty_like(x).bernoulli_(1-p).div_(1-p),
			// then x.mul_(noise), whose backward keeps the noise.
			fp.own(i, fp.alloc(fp.bytes(x), Mask, ir.NoValue))
			inPlace()
			break
		}
		// native_dropout (dropout_cuda): its bool mask, which it saves,
		// then the output.
		fp.own(i, fp.alloc(s.Elems(x), Mask, ir.NoValue))
		newOut(0, Activation)
	case ir.EagerMean, ir.EagerPad:
		// adaptive_avg_pool2d to 1×1 runs as x.mean((-1, -2), keepdim=True);
		// constant_pad_nd writes a new tensor, a clone of the input when
		// no pad is positive (Swin's windows at 224).
		newOut(0, Activation)
	case ir.EagerLinear:
		fp.gemm(n, lower, save)
	case ir.EagerEinsum:
		fp.einsum(n, lower)
	case ir.EagerLayerNorm:
		// Autocast runs layer_norm in float32: a float32 copy of a half
		// input first, in the input's layout, which it saves. The kernel
		// makes a strided input contiguous for itself (freed when it
		// returns), then writes the output, the mean and rstd (float32,
		// one per normalized row). calibration/convnext_vit_ops.py.
		x := n.Inputs[0]
		elem := fp.dt[x].Size()
		if fp32 && fp.dt[x] != ir.Float32 {
			xc := fp.alloc(s.Elems(x)*4, Cast, x)
			fp.own(i, xc)
			elem = 4
		} else {
			save(x)
		}
		if fp.stopAt == i {
			return
		}
		c := fp.copyIf(!fp.contig[x], s.Elems(x)*elem)
		if fp32 {
			fp.dt[out(0)] = ir.Float32
		}
		newOut(0, Activation)
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
		for j := 0; j < 2; j++ {
			fp.own(i, fp.alloc(rows*4, Stats, ir.NoValue))
		}
		freeCopy(c)
	case ir.EagerNorm:
		// linalg_vector_norm saves its input and its result. Autocast
		// calls it with dtype float32 (fp32_set_opt_dtype): the kernel
		// reads a half input as it is and writes a float32 result.
		x := n.Inputs[0]
		save(x)
		if fp.stopAt == i {
			return
		}
		if fp32 {
			fp.dt[out(0)] = ir.Float32
		}
		newOut(0, Activation)
		save(out(0))
	case ir.EagerMul:
		a, c := n.Inputs[0], n.Inputs[1]
		// Stochastic depth's noise, torch.empty(B, 1, 1, 1) in the
		// input's type, bernoulli_ and div_ in place, is a tensor of its
		// own that the product saves (torchvision.ops.stochastic_depth).
		for _, v := range []ir.ValueID{a, c} {
			if !fp.data[v] && fp.Drawn(v) && (fp.needsGrad(a) || fp.needsGrad(c)) {
				st := fp.alloc(s.Elems(v)*fp.dt[out(0)].Size(), Stats, ir.NoValue)
				fp.own(i, st)
			}
		}
		if fp.needsGrad(a) {
			save(c)
		}
		if fp.needsGrad(c) && a != c {
			save(a)
		}
		if fp.stopAt == i {
			return
		}
		newOut(0, Activation)
	case ir.EagerDiv:
		// DivBackward0 saves self when other needs a gradient, and other
		// when either does (both formulas read it), never the result
		// (derivatives.yaml: saving it would break an in-place use of
		// it). F.normalize's x / denom saves both.
		if fp.needsGrad(n.Inputs[1]) {
			save(n.Inputs[0])
		}
		if fp.needsGrad(n.Inputs[0]) || fp.needsGrad(n.Inputs[1]) {
			save(n.Inputs[1])
		}
		newOut(0, Activation)
	case ir.EagerSum:
		if fp32 {
			fp.dt[out(0)] = ir.Float32 // sum accumulates and returns float32 under autocast
		}
		newOut(0, Activation)
		// An input past 32-bit indexing (2^31-1 bytes) makes the CUDA
		// reduction split into sub-iterators (aten/src/ATen/native/cuda/
		// Reduce.cuh, gpu_reduce_kernel); a half-precision output cannot
		// carry the float32 partial sums between them, so the kernel
		// accumulates into a float32 buffer of the output's elements
		// while it runs (calibration/half_sum.py: from exactly that size).
		if x, y := n.Inputs[0], out(0); fp.dt[y].Size() == 2 && s.Elems(x)*fp.dt[x].Size() > math.MaxInt32 {
			fp.freeScratch(fp.scratch(s.Elems(y)*4, Copy))
		}
	case ir.EagerAdd, ir.EagerSub, ir.EagerCat:
		if ip {
			inPlace() // x += y
			break
		}
		newOut(0, Activation)
	case ir.EagerMaxPool:
		x := n.Inputs[0]
		newOut(0, Activation)
		idx := fp.alloc(s.Elems(out(0))*8, Indices, ir.NoValue)
		freeCopy(copyIn(x))
		save(x)
		fp.own(i, idx)
	case ir.EagerAvgPool:
		x := n.Inputs[0]
		save(x)
		if fp.stopAt == i {
			return
		}
		c := copyIn(x)
		newOut(0, Activation)
		freeCopy(c)
	case ir.EagerUpsample:
		x := n.Inputs[0]
		if fp32 && fp.dt[x] != ir.Float32 {
			// Autocast runs upsampling in float32: a float32 copy of the
			// input, then a float32 output.
			c := fp.scratch(s.Elems(x)*4, Cast)
			fp.dt[out(0)] = ir.Float32
			newOut(0, Activation)
			freeCopy(c)
			break
		}
		// upsample_nearest2d is a structured kernel: its output exists
		// before the kernel runs, which copies a strided input to a
		// contiguous one only when it resizes; at the input's own size
		// it is output.copy_(input) (aten/src/ATen/native/cuda/
		// UpSampleNearest2d.cu, upsample_nearest2d_out_cuda_template).
		newOut(0, Activation)
		if !slices.Equal(s.Dims[x], s.Dims[out(0)]) {
			freeCopy(copyIn(x))
		}
	case ir.EagerContiguous:
		if x := n.Inputs[0]; !fp.contig[x] {
			newOut(0, Activation) // clone(memory_format=contiguous)
			break
		}
		fp.view(n)
	case ir.EagerView, ir.EagerReshape, ir.EagerFlatten, ir.EagerTranspose, ir.EagerExpand, ir.EagerSlice, ir.EagerSplit, ir.EagerSelect:
		if x := n.Inputs[0]; (n.OpType == "Reshape" || n.OpType == "Flatten") && fp.data[x] && !fp.contig[x] && !fp.viewable(x, s.Dims[out(0)]) {
			// reshape of a permuted view that no strides can address (a
			// channel shuffle's transpose, a window partition) copies: a
			// clone whose gradient passes through.
			newOut(0, Activation)
			break
		}
		fp.view(n)
	case ir.EagerAttention:
		// scaled_dot_product_attention on a CUDA device: under autocast the
		// flash kernel (half inputs), which first draws its two 8-byte
		// philox seeds and returns the output and a float32 logsumexp of
		// B·H·L; in float32 memory-efficient attention, whose logsumexp
		// rows are padded to 32 queries. Both save q, k, v, the output and
		// the logsumexp (calibration/convnext_vit_ops.py, the encoder).
		q, k, v := n.Inputs[0], n.Inputs[1], n.Inputs[2]
		for _, x := range []ir.ValueID{q, k, v} {
			save(x)
		}
		if lower {
			fp.dt[out(0)] = fp.low()
			for j := 0; j < 2; j++ {
				fp.own(i, fp.alloc(8, Stats, ir.NoValue))
			}
		}
		newOut(0, Activation)
		save(out(0))
		// The flash kernel writes its output in q's memory order, (L, B,
		// H, D) for a MultiheadAttention's heads, so the transpose back
		// to (L, B, ·) is contiguous and the projection copies nothing;
		// memory-efficient attention writes (B, L, H, D).
		if d := s.Dims[out(0)]; lower {
			if st := fp.denseStrides(q); dense(s.Dims[q], st) {
				fp.setLayout(out(0), st) // empty_like(q) keeps a dense q's strides
			}
		} else if len(d) == 4 {
			fp.setLayout(out(0), permuteStrides(rowMajor([]int64{d[0], d[2], d[1], d[3]}), []int64{0, 2, 1, 3}))
		}
		rows := s.Elems(q) / max(s.Dims[q][len(s.Dims[q])-1], 1)
		if !lower {
			l := s.Dims[q][len(s.Dims[q])-2]
			rows = rows / max(l, 1) * ((l + 31) / 32 * 32)
		}
		fp.own(i, fp.alloc(rows*4, Stats, ir.NoValue))
	}
	// An element-wise op's new output takes the memory order of its first
	// operand of the output's own shape (TensorIterator: the first operand
	// whose strides order two dims decides; a broadcast one does not):
	// ViT's x + input after MultiheadAttention's transpose back to batch
	// first keeps the (L, B, E) order, and the next layer norm copies it.
	switch k {
	case ir.EagerAdd, ir.EagerSub, ir.EagerMul, ir.EagerDiv, ir.EagerSavesResult, ir.EagerSiLU, ir.EagerSavesInput, ir.EagerDropout, ir.EagerBatchNorm, ir.EagerBatchNormEval:
		if y := out(0); fp.data[y] && fp.contig[y] {
			for _, x := range reads {
				if slices.Equal(s.Dims[x], s.Dims[y]) {
					if !fp.contig[x] && fp.str[x] != nil && fp.vst[y] != fp.vst[x] {
						// Dense in x's order of strides, which a
						// strided x (a permuted slice, MaxViT's k before
						// its scaling) decides too.
						fp.setLayout(y, denseInOrder(s.Dims[x], fp.str[x]))
					}
					break
				}
			}
		}
	}
	// What only a suppressed save held goes when the op returns.
	for _, st := range fp.deferred {
		fp.unref(st)
	}
	fp.deferred = fp.deferred[:0]
	// Other outputs (batch norm's running statistics, updated in place) hold
	// no new memory.
	for _, v := range n.Outputs {
		if fp.vst[v] < 0 {
			fp.noData(v)
		}
	}
}

// gemm emits linear(x, W, b) as eager PyTorch runs it: addmm(b, x, W.t()),
// or mm without a bias. Under autocast the bias, the weight and a float32
// x are cast to float16 first (right to left, as GCC evaluates the cast
// arguments), the weight's and the bias's copies cached. Then the output,
// and the cuBLAS workspaces the product's thread does not have yet: through
// cuBLASLt when the bias is a vector of the output's columns and the
// weight has more than one row and column (gemmLt), plain cuBLAS
// otherwise (the bias is first copied into the output, which allocates
// nothing). addmm saves mat1 when the weight needs a gradient and mat2 (a
// view of the weight or its cast) when mat1 does.
func (fp *forwardPass) gemm(n *ir.Node, lower bool, save func(ir.ValueID)) {
	i := n.ID
	x, w, y := n.Inputs[0], n.Inputs[1], n.Outputs[0]
	bias := ir.NoValue
	if len(n.Inputs) > 2 && n.Inputs[2] != ir.NoValue {
		bias = n.Inputs[2]
	}
	xcast := int32(-1)
	if lower {
		if bias != ir.NoValue {
			fp.castParam(bias)
		}
		fp.castParam(w)
		fp.dt[y] = fp.low()
		if fp.dt[x] != fp.low() {
			xcast = fp.alloc(fp.s.Elems(x)*fp.low().Size(), Cast, x)
		}
	}
	// A linear on a strided input (a transposed view, or a reshape of one,
	// as attention's output before its projection) gets a contiguous copy
	// (matmul's reshape, or the module's own .contiguous()): the product
	// saves the copy, and a cast made for it goes when autocast's wrapper
	// returns, after the output (calibration/results/vit_steps.json). A
	// matrix with rows or columns of stride 1 (ViT's class token x[:, 0])
	// goes to cuBLAS as it is.
	if !fp.contig[x] && !blasMatrix(fp.s.Dims[x], fp.denseStrides(x)) {
		size := fp.s.Elems(x) * fp.dt[x].Size()
		if xcast >= 0 {
			size = fp.s.Elems(x) * fp.low().Size()
		}
		c := fp.alloc(size, Copy, x)
		if xcast >= 0 {
			fp.deferred = append(fp.deferred, xcast)
		}
		xcast = c
	}
	if fp.needsGrad(w) {
		if xcast >= 0 {
			fp.own(i, xcast)
		} else {
			save(x)
		}
	} else if xcast >= 0 {
		fp.deferred = append(fp.deferred, xcast)
	}
	if st := fp.castOf(w); st >= 0 && fp.needsGrad(x) {
		fp.ref(st)
		fp.own(i, st)
	}
	if fp.stopAt == i {
		return
	}
	fp.vst[y] = fp.alloc(fp.bytes(y), Activation, y)
	fp.setLayout(y, nil)
	fp.blasWorkspaces(gemmLt(n, fp.s))
}

// gemmLt reports whether addmm runs a Gemm through cuBLASLt, as PyTorch
// 2.11's isInputCompliesAddmmCudaLt decides: beta 1, a bias vector of the
// output's columns, and mat2 (the weight, K×N) with more than one row and
// column. mat1's rows do not matter: a batch of one goes through cuBLASLt
// too.
func gemmLt(n *ir.Node, s *ir.Shapes) bool {
	if len(n.Inputs) < 3 || n.Inputs[2] == ir.NoValue {
		return false
	}
	if a, ok := n.Attr("beta"); ok && a.Kind == ir.AttrFloat && a.Float != 1 {
		return false
	}
	a, y, c := s.Dims[n.Inputs[0]], s.Dims[n.Outputs[0]], s.Dims[n.Inputs[2]]
	if len(a) != 2 || len(y) != 2 || len(c) != 1 || c[0] != y[1] {
		return false
	}
	k := a[1]
	if n.IntAttr("transA", 0) != 0 {
		k = a[0]
	}
	return k > 1 && y[1] > 1
}

// dropoutTrains reports whether a Dropout node drops: its training_mode
// input is true (an absent one means inference), and the step is not the
// eval step, whose model.eval() makes dropout the identity.
func (fp *forwardPass) dropoutTrains(n *ir.Node) bool {
	if fp.cfg.Eval != nil || len(n.Inputs) < 3 || n.Inputs[2] == ir.NoValue {
		return false
	}
	d := fp.s.Data[n.Inputs[2]]
	if len(d) != 1 || d[0] == 0 {
		return false
	}
	// F.dropout with p = 0 returns its input (ATen's _dropout: no kernel,
	// no mask): ViT's dropout=0.0 exports as Dropout of ratio 0.
	if n.Inputs[1] != ir.NoValue {
		if r := fp.s.Data[n.Inputs[1]]; len(r) == 1 && r[0] == 0 {
			return false
		}
	}
	return true
}

// view gives the outputs of a view op the storage of its input.
func (fp *forwardPass) view(n *ir.Node) {
	x := n.Inputs[0]
	in := fp.s.Dims[x]
	for _, v := range n.Outputs {
		fp.vst[v] = fp.vst[x]
		fp.dt[v] = fp.dt[x]
		fp.ref(fp.vst[x])
		switch n.OpType {
		case "Expand":
			// Stride 0 along the expanded dims: not dense. An expand to
			// the input's own sizes is the input as it is.
			if slices.Equal(in, fp.s.Dims[v]) {
				fp.contig[v], fp.str[v] = fp.contig[x], fp.str[x]
			} else {
				fp.setStrided(v)
			}
			continue
		case "Slice", "Split":
			// A slice of step 1 keeps its input's strides (known, dense
			// or not): contiguous when it cuts along the first dim of
			// size above 1 or takes a whole dim.
			if st := fp.denseStrides(x); st != nil && fp.unitSteps(n) {
				fp.setLayout(v, st)
			} else {
				fp.setStrided(v)
			}
			continue
		case "Transpose", "Gather":
		default:
			if fp.contig[x] {
				fp.setLayout(v, nil) // a view of a contiguous tensor in its order
				continue
			}
		}
		st := fp.denseStrides(x)
		switch n.OpType {
		case "Transpose":
			pst := permuteStrides(st, n.IntsAttr("perm"))
			if st == nil || pst == nil {
				fp.setStrided(v)
				break
			}
			fp.setLayout(v, pst)
		case "Gather":
			// select(axis, i): the axis's stride goes (a strided slice
			// of a dense tensor, ViT's class token x[:, 0]).
			a := int(n.IntAttr("axis", 0))
			if a < 0 {
				a += len(in)
			}
			if st == nil || a < 0 || a >= len(st) {
				fp.setStrided(v)
				break
			}
			fp.setLayout(v, append(append([]int64(nil), st[:a]...), st[a+1:]...))
		default:
			// A reshape, squeeze or flatten: the strides computeStride
			// finds (run.go copies where there are none).
			if st == nil {
				fp.setStrided(v)
				break
			}
			nst, ok := viewStrides(in, st, fp.s.Dims[v])
			if !ok {
				fp.setStrided(v)
				break
			}
			fp.setLayout(v, nst)
		}
	}
}

// unitSteps reports whether a Slice or Split node takes every element
// along its axes (steps of 1, or none given).
func (fp *forwardPass) unitSteps(n *ir.Node) bool {
	if n.OpType != "Slice" || len(n.Inputs) < 5 || n.Inputs[4] == ir.NoValue {
		return true
	}
	steps := fp.s.Data[n.Inputs[4]]
	if steps == nil {
		return false
	}
	for _, st := range steps {
		if st != 1 {
			return false
		}
	}
	return true
}

// needsGrad reports whether v is a value whose gradient the backward computes.
func (fp *forwardPass) needsGrad(v ir.ValueID) bool {
	return v != ir.NoValue && (fp.rg[v] || fp.param[v] || fp.derived[v])
}

func (fp *forwardPass) markRG(n *ir.Node) {
	for _, v := range n.Outputs {
		if fp.data[v] {
			fp.rg[v] = true
		}
	}
}

// castParam makes autocast's low-precision copy of parameter p, unless its
// cache already holds one. The cache keeps it until autocast exits.
func (fp *forwardPass) castParam(p ir.ValueID) {
	if !fp.param[p] || fp.cast[p] >= 0 {
		return
	}
	fp.cast[p] = fp.alloc(fp.s.Elems(p)*fp.low().Size(), Cast, p)
	fp.casts = append(fp.casts, p)
}

// castOf returns the storage of parameter p's autocast copy, or -1.
func (fp *forwardPass) castOf(p ir.ValueID) int32 {
	if p == ir.NoValue {
		return -1
	}
	return fp.cast[p]
}

// exitAutocast clears autocast's cache: each copy that no saved tensor holds
// is freed.
func (fp *forwardPass) exitAutocast() {
	for _, p := range fp.casts {
		fp.unref(fp.cast[p])
	}
}

// own hands node i's saved set a reference to storage st: kept for the
// backward, or, inside a checkpointed range, dropped when the op returns.
func (fp *forwardPass) own(i int32, st int32) {
	if fp.noSave {
		fp.cp.hadSave[i] = true
		fp.deferred = append(fp.deferred, st)
		return
	}
	fp.saved[i] = append(fp.saved[i], st)
}
