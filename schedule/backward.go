package schedule

import (
	"slices"
	"sort"

	"github.com/onnxmem/onnxmem/ir"
)

// loss emits loss = sum(o.sum() for o in outputs): each term and each partial
// sum is a 4-byte tensor. A graph of one output takes loss = out.sum(), the
// term itself.
func (bp *backwardPass) loss() {
	bp.phase = LossPhase
	bp.node = -1
	bp.lossSt = -1
	if len(bp.g.Outputs) == 1 {
		bp.lossSt = bp.alloc(bp.scalarBytes(), Scalar, ir.NoValue)
		return
	}
	for range bp.g.Outputs {
		term := bp.alloc(4, Scalar, ir.NoValue)
		sum := bp.alloc(4, Scalar, ir.NoValue)
		if bp.lossSt >= 0 {
			bp.unref(bp.lossSt)
		}
		bp.unref(term)
		bp.lossSt = sum
	}
}

// scalarBytes is the size of the loss and of its seed gradient: 4 bytes,
// or, for out.sum() of a graph's only output, that output's element (a
// float16 sum of a float16 output under autocast).
func (bp *backwardPass) scalarBytes() int64 {
	if len(bp.g.Outputs) == 1 {
		if sz := bp.dt[bp.g.Outputs[0]].Size(); sz > 0 {
			return sz
		}
	}
	return 4
}

// backward emits loss.backward(): the autograd nodes in reverse creation
// order. For each node: the gradients of its inputs are allocated (with any
// contiguous copy of a strided incoming gradient and any workspace), then its
// incoming gradients are released, then its saved tensors, and then the new
// gradients are summed into their targets' buffers.
func (bp *backwardPass) backward() error {
	g := bp.g
	bp.phase = Backward
	bp.node = -1
	for i := range bp.slot {
		bp.slot[i] = -1
	}
	ones := int32(-1)
	bp.seed = -1
	if bp.cfg.Train != nil && bp.cfg.Train.Loss != nil {
		if err := bp.seedFromLoss(); err != nil {
			return err
		}
	} else {
		// d(sum)/d(o) is a one-element tensor expanded to o's shape.
		ones = bp.alloc(bp.scalarBytes(), Scalar, ir.NoValue)
		bp.seed = ones
		for _, o := range g.Outputs {
			if bp.rg[o] {
				bp.ref(ones)
				bp.accumulate(o, gradT{st: ones, bytes: bp.bytes(o)})
			}
		}
	}
	leader := bp.sliceGroups()
	bp.unrun = nil
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		k := bp.kind[i]
		if k == ir.EagerMeta || k == ir.EagerSkip || leader[i] != int32(i) {
			continue
		}
		n := &g.Nodes[i]
		outs := n.Outputs
		if k == ir.EagerSlice {
			outs = nil
			for j := i; j < len(g.Nodes); j++ {
				if leader[j] == int32(i) {
					outs = append(outs, g.Nodes[j].Outputs...)
				}
			}
		}
		any := false
		for _, o := range outs {
			any = any || (bp.data[o] && bp.slot[o] >= 0)
		}
		c := bp.cp.chunkOf[i]
		if !any {
			bp.unrun = append(bp.unrun, int32(i))
		} else {
			bp.node = int32(i)
			if c >= 0 && !bp.cp.chunks[c].recomputed && bp.cp.hadSave[i] {
				bp.cp.recompute(c)
			}
			bp.back(n, k, outs)
			bp.derivedGrads(n)
		}
		if c >= 0 && bp.cp.chunks[c].nodes[0] == int32(i) {
			bp.node = int32(i)
			bp.cp.releaseFrame(c)
		}
	}
	bp.node = -1
	// The graph's root keeps the seed gradient to the end.
	if ones >= 0 {
		bp.unref(ones)
	}
	return nil
}

// firstSaver returns chunk c's first node that saved a tensor, or -1.
func (cp *checkpoints) firstSaver(c int) int32 {
	for _, i := range cp.chunks[c].nodes {
		if cp.hadSave[i] {
			return i
		}
	}
	return -1
}

// setSlot stores t as the first gradient of v.
func (bp *backwardPass) setSlot(v ir.ValueID, t gradT) {
	bp.grads = append(bp.grads, t)
	bp.slot[v] = int32(len(bp.grads) - 1)
}

// sliceGroups maps each node to the node whose autograd node it belongs to:
// Slices of one tensor along one axis are one chunk() call, whose SplitBackward
// runs once for all pieces.
func (bp *backwardPass) sliceGroups() []int32 {
	g := bp.g
	leader := make([]int32, len(g.Nodes))
	first := map[[2]int64]int32{}
	for i := range g.Nodes {
		leader[i] = int32(i)
		n := &g.Nodes[i]
		if bp.kind[i] != ir.EagerSlice {
			continue
		}
		key := [2]int64{int64(n.Inputs[0]), int64(bp.axisOf(n))}
		if l, ok := first[key]; ok {
			leader[i] = l
		} else {
			first[key] = int32(i)
		}
	}
	return leader
}

// grad allocates a fresh gradient of value v: contiguous, or in the node's
// fresh layout (freshOrder) when v has its dims.
func (bp *backwardPass) grad(v ir.ValueID) gradT {
	st := bp.alloc(bp.bytes(v), Grad, v)
	t := gradT{st: st, whole: true, contig: true, bytes: bp.bytes(v)}
	if bp.freshStr != nil && slices.Equal(bp.s.Dims[v], bp.freshDims) {
		t = withStrides(t, bp.freshDims, bp.freshStr)
	}
	return t
}

// freshLayout sets the strides of the fresh gradients that the node being
// run makes: a kernel that writes its input's gradient in a layout of its
// own (cuDNN's channels-last convolution, an element-wise backward that
// follows its incoming gradient's, as TensorIterator's output does, the
// flash kernel's empty_like(q)) gives the gradients of dims like dims
// those strides; nil strides make them contiguous.
func (bp *backwardPass) freshLayout(st, dims []int64) {
	bp.freshStr, bp.freshDims = st, dims
}

// paramGrad allocates the .grad of parameter v, which outlives the step.
func (bp *backwardPass) paramGrad(v ir.ValueID) {
	if v == ir.NoValue || !bp.param[v] || bp.paramGrads[v] >= 0 {
		return
	}
	buf := bp.newBuf(bp.bytes(v), ParamGrad, v)
	bp.emit(buf, false)
	bp.paramGrads[v] = buf
}

// derivedGrads gives each parameter behind an input of node n that is
// computed from parameters alone (Swin V2's logit_scale.exp() and bias
// MLP, a weight-normed convolution's weight) its .grad, once: the gradient
// that reaches such an input flows back through its ops to them. The ops'
// own transients, of the parameters' sizes, are not counted.
func (bp *backwardPass) derivedGrads(n *ir.Node) {
	var seen []ir.ValueID // the values walked: a table's subgraph is small
	var walk func(v ir.ValueID)
	walk = func(v ir.ValueID) {
		if v == ir.NoValue || slices.Contains(seen, v) {
			return
		}
		seen = append(seen, v)
		switch {
		case bp.param[v]:
			bp.paramGrad(v)
		case bp.derived[v]:
			if p := bp.g.Values[v].Producer; p >= 0 {
				for _, in := range bp.g.Nodes[p].Inputs {
					walk(in)
				}
			}
		}
	}
	for _, v := range n.Inputs {
		if v != ir.NoValue && bp.derived[v] {
			walk(v)
		}
	}
}

type delivery struct {
	v ir.ValueID
	t gradT
}

// back emits the backward of one autograd node.
func (bp *backwardPass) back(n *ir.Node, k ir.Eager, outs []ir.ValueID) {
	s := bp.s
	var gy gradT
	if bp.data[outs[0]] && bp.slot[outs[0]] >= 0 {
		gy = bp.grads[bp.slot[outs[0]]]
	}
	give := bp.give[:0]
	defer func() { bp.give = give[:0] }()
	bp.freshLayout(nil, nil)
	defer bp.freshLayout(nil, nil)
	switch k {
	case ir.EagerAdd, ir.EagerSub, ir.EagerMul, ir.EagerDiv, ir.EagerSavesResult, ir.EagerSiLU, ir.EagerSavesInput, ir.EagerDropout:
		// The input's gradient follows the incoming one's layout.
		if gy.whole && !gy.contig && dense(s.Dims[outs[0]], gy.str) {
			bp.freshLayout(gy.str, s.Dims[outs[0]])
		}
	case ir.EagerBatchNorm, ir.EagerBatchNormEval:
		// cuDNN's batch norm writes the input's gradient in the input's
		// memory format.
		if x := n.Inputs[0]; bp.channelsLast(x) {
			bp.freshLayout(bp.str[x], s.Dims[x])
		}
	}
	// post runs after the node has released its inputs: the ToCopyBackward
	// nodes of autocast's casts, which the engine runs next.
	var post []func()
	fresh := func(v ir.ValueID) {
		if bp.rg[v] {
			give = append(give, delivery{v, bp.grad(v)})
		}
	}
	pass := func(v ir.ValueID, contig, whole bool) {
		if bp.rg[v] && bp.dt[v] != bp.dt[outs[0]] {
			// A view of a gradient of another type is converted: .to()
			// allocates the input's type.
			fresh(v)
			return
		}
		if bp.rg[v] {
			bp.ref(gy.st)
			t := gradT{st: gy.st, whole: whole && gy.whole, contig: contig && gy.contig, bytes: bp.bytes(v)}
			if contig && whole && gy.whole && !gy.contig && gy.str != nil {
				st := gy.str
				// A view that keeps the layout, with the strides
				// computeStride finds for v's dims.
				if nst, ok := viewStrides(s.Dims[outs[0]], st, s.Dims[v]); ok {
					t = withStrides(t, s.Dims[v], nst)
				}
			}
			give = append(give, delivery{v, t})
		}
	}
	// contiguous makes the copy a kernel takes of a strided incoming gradient.
	contiguous := func() int32 { return bp.copyIf(!gy.whole || !gy.contig, bp.bytes(outs[0])) }
	freeCopy := bp.freeScratch
	switch k {
	case ir.EagerConv:
		x := n.Inputs[0]
		cl := bp.channelsLast(x)
		// A strided saved input is copied again for the whole backward.
		xc := int32(-1)
		if !cl {
			xc = bp.copyIf(!bp.contig[x], bp.bytes(x))
		}
		if cl {
			// cuDNN's channels-last convolution: the incoming gradient
			// made channels-last (a copy unless it is), the input's
			// gradient written channels-last.
			contiguous = func() int32 {
				return bp.copyIf(!gradChannelsLast(gy, s.Dims[outs[0]]), bp.bytes(outs[0]))
			}
			bp.freshLayout(channelsLastStrides(s.Dims[x]), s.Dims[x])
		}
		// Under autocast the conv computes low-precision gradients of its
		// cast input and weight; ToCopyBackward then allocates the
		// float32 ones and frees those.
		low := bp.lowGrad
		toCopy := func(st int32, v ir.ValueID, param bool) { post = append(post, bp.toCopy(st, v, param)) }
		inputGrad := func(x ir.ValueID) { post = bp.inputGrad(x, fresh, post) }
		// A depthwise conv that PyTorch runs with its own kernels
		// (ConvBackend::CudaDepthwise2d) makes the weight's gradient
		// before the input's (calibration/torchvision_steps.json).
		if bp.nativeDepthwise(n) {
			var params []int32
			for _, w := range n.Inputs[1:] {
				switch {
				case w == ir.NoValue || !bp.param[w]:
				case bp.autocast():
					params = append(params, low(w), int32(w))
				default:
					bp.paramGrad(w)
				}
			}
			if bp.rg[x] {
				inputGrad(x)
			}
			for j := 0; j < len(params); j += 2 {
				toCopy(params[j], ir.ValueID(params[j+1]), true)
			}
			freeCopy(xc)
			break
		}
		// The data and the filter pass each take their own contiguous
		// copy of a strided incoming gradient.
		if bp.rg[x] {
			inputGrad(x)
			c := contiguous()
			bp.workspace(bp.convCall(n, Backward, "bwd-data"))
			freeCopy(c)
		}
		var params []int32
		for j, w := range n.Inputs[1:] {
			if w == ir.NoValue || !bp.param[w] {
				continue
			}
			c := int32(-1)
			if j == 0 {
				c = contiguous()
			}
			if bp.autocast() {
				params = append(params, low(w), int32(w))
			} else {
				bp.paramGrad(w)
			}
			if j == 0 {
				bp.workspace(bp.convCall(n, Backward, "bwd-filter"))
			}
			freeCopy(c)
			if j == 1 {
				// The bias's gradient: a sum over N, H and W; over the
				// rows of a [N·H·W, C] matrix when the gradient is
				// channels-last (the patch embedding's, whose gradient
				// comes back through a transpose; ConvNeXt's).
				y := n.Outputs[0]
				rows := bp.s.Elems(y) / max(bp.s.Elems(w), 1)
				if gradChannelsLast(gy, s.Dims[y]) {
					bp.columnSum(rows, bp.s.Elems(w))
				} else {
					bp.channelSum(rows, bp.s.Elems(w), gy.st >= 0 && gy.st == bp.seed)
				}
			}
		}
		// The weight's cast was made after the bias's, so its
		// ToCopyBackward runs first.
		for j := 0; j < len(params); j += 2 {
			toCopy(params[j], ir.ValueID(params[j+1]), true)
		}
		freeCopy(xc)
	case ir.EagerNorm:
		// norm_backward: self · (grad / norm), the input's gradient, and
		// scratch of the norm's size. (Under autocast the product is
		// float32 and the engine turns it to the input's type; that
		// transient is not modelled: swin_v2_t's AMP steps read within
		// 1.2% without it, and no trace has shown it yet.)
		x := n.Inputs[0]
		if bp.rg[x] {
			fresh(x)
		}
	case ir.EagerBatchNorm, ir.EagerBatchNormEval:
		c := contiguous()
		fresh(n.Inputs[0])
		bp.paramGrad(n.Inputs[1])
		bp.paramGrad(n.Inputs[2])
		freeCopy(c)
	case ir.EagerSiLU:
		fresh(bp.siluIn[n.ID])
	case ir.EagerSavesResult, ir.EagerSoftmax, ir.EagerSavesInput, ir.EagerMean, ir.EagerPad:
		// threshold_backward, hardswish_backward, hardtanh_backward, mean's expand / numel: a
		// new gradient of the input.
		fresh(n.Inputs[0])
	case ir.EagerDropout:
		if bp.fw.dropoutTrains(n) {
			fresh(n.Inputs[0])
		} else {
			pass(n.Inputs[0], true, true)
		}
	case ir.EagerLinear:
		post = bp.gemmBack(n, gy, fresh, contiguous, post)
	case ir.EagerEinsum:
		give, post = bp.einsumBack(n, gy, give, post)
	case ir.EagerSelect:
		// SelectBackward: a zero gradient of the whole input, the slice's
		// gradient copied in.
		fresh(n.Inputs[0])
	case ir.EagerAttention:
		// The fused attention's backward: the gradients of q, k and v,
		// and float32 scratch, freed when the kernel returns. Memory-
		// efficient attention (float32) makes the output's gradient
		// contiguous first and takes the rows' delta; the flash kernel
		// (autocast) reads a dense gradient in any order of its dims
		// (MultiheadAttention's arrives in (L, B, H, D) order) and takes
		// one float32 buffer for q's gradient accumulator and the rows'
		// delta, 256 bytes more (calibration/results/vit_steps.json: 12
		// such of 4,917,376 bytes at vit_b_16 batch 8, of 1,248,256 at
		// vit_b_32).
		q := n.Inputs[0]
		rows := s.Elems(q) / max(s.Dims[q][len(s.Dims[q])-1], 1)
		flash := bp.autocast()
		c := int32(-1)
		if st := gradStrides(gy, s.Dims[outs[0]]); !flash || !dense(s.Dims[outs[0]], st) || st[len(st)-1] != 1 {
			c = bp.scratch(s.Elems(outs[0])*bp.dt[outs[0]].Size(), Copy)
		}
		if st := bp.denseStrides(q); flash && dense(s.Dims[q], st) {
			// Its gradients are empty_like of q, k and v: q's strides
			// where, as in MultiheadAttention, the three share them.
			bp.freshLayout(st, s.Dims[q])
		}
		for _, v := range n.Inputs {
			fresh(v)
		}
		if flash {
			bp.freeScratch(bp.scratch(s.Elems(q)*4+rows*4+256, Grad))
		} else {
			bp.freeScratch(bp.scratch(rows*4, Stats))
		}
		bp.freeScratch(c)
	case ir.EagerLayerNorm:
		// native_layer_norm_backward: the saved input made contiguous
		// (when strided), the input's gradient (float32 under autocast,
		// which ToCopyBackward then turns to the input's type), the
		// weight's and the bias's, and the copy goes.
		x := n.Inputs[0]
		cast := bp.autocast() && bp.dt[x] != ir.Float32
		elem := bp.dt[x].Size()
		if cast {
			elem = 4
		}
		c := bp.copyIf(!bp.contig[x], s.Elems(x)*elem)
		if bp.rg[x] {
			if cast {
				post = append(post, bp.toCopy(bp.alloc(s.Elems(x)*4, Grad, x), x, false))
			} else {
				fresh(x)
			}
		}
		for _, p := range n.Inputs[1:] {
			if p != ir.NoValue && bp.param[p] {
				bp.paramGrad(p)
			}
		}
		// The kernel reads dY.contiguous() (layer_norm_backward_cuda):
		// a strided gradient (MultiheadAttention's transposed query's)
		// is copied after the gradients are allocated.
		freeCopy(contiguous())
		bp.freeScratch(c)
	case ir.EagerMul, ir.EagerDiv:
		ins := n.Inputs[:2]
		// A broadcast operand's gradient (the squeeze-excitation scale of
		// scale * x) is first a product of the output's size, which
		// validate_outputs sums to the operand's shape once the node's
		// gradients are made; then the product goes. MulBackward0 computes
		// other's gradient before self's (calibration/torchvision_ops.py,
		// se_mul), which only a broadcast operand makes visible.
		broadcast := false
		for _, v := range ins {
			broadcast = broadcast || (k == ir.EagerMul && v != ir.NoValue && bp.rg[v] && s.Elems(v) < s.Elems(outs[0]))
		}
		if broadcast {
			ins = []ir.ValueID{n.Inputs[1], n.Inputs[0]}
		}
		var tmp []int32
		var small []ir.ValueID
		for j, v := range ins {
			if v == ir.NoValue || (j == 1 && v == ins[0]) {
				continue
			}
			if broadcast && bp.rg[v] && s.Elems(v) < s.Elems(outs[0]) {
				tmp = append(tmp, bp.scratch(s.Elems(outs[0])*bp.dt[outs[0]].Size(), Grad))
				small = append(small, v)
				continue
			}
			if bp.data[v] && bp.rg[v] && bp.dt[v] != bp.dt[outs[0]] {
				// A promoted product (ConvNeXt's float32 layer_scale * a
				// half x under autocast): x's gradient is computed in the
				// output's type, and the engine's validate_outputs turns it
				// to x's once the node's gradients are made.
				post = append(post, bp.toCopy(bp.alloc(s.Elems(v)*bp.dt[outs[0]].Size(), Grad, v), v, false))
				continue
			}
			if bp.data[v] {
				fresh(v)
			}
		}
		for j, v := range small {
			fresh(v)
			bp.freeScratch(tmp[j])
		}
		// A parameter operand (a layer scale) gets its .grad: for a
		// broadcast one, the product of the output's size first, reduced
		// to the parameter's shape, then the product goes.
		for _, v := range n.Inputs[:2] {
			if v == ir.NoValue || !bp.param[v] || bp.paramGrads[v] >= 0 || k != ir.EagerMul {
				continue
			}
			var tmp int32 = -1
			if s.Elems(v) < s.Elems(outs[0]) {
				tmp = bp.scratch(s.Elems(outs[0])*bp.dt[outs[0]].Size(), Grad)
			}
			bp.paramGrad(v)
			if tmp >= 0 {
				// The product's sum to a per-channel parameter ([C, 1, 1],
				// ConvNeXt's layer scale) is the reduction of a conv bias's
				// gradient: over N·H·W rows of C columns when the product
				// is channels-last, as it follows the gradient's layout.
				if y := outs[0]; len(s.Dims[y]) == 4 && s.Elems(v) == s.Dims[y][1] {
					rows := s.Elems(y) / max(s.Elems(v), 1)
					if gradChannelsLast(gy, s.Dims[y]) {
						bp.columnSum(rows, s.Elems(v))
					} else {
						bp.channelSum(rows, s.Elems(v), false)
					}
				}
				bp.freeScratch(tmp)
			}
		}
	case ir.EagerAdd, ir.EagerSub:
		// A parameter operand (a position embedding) gets its .grad, the
		// output's gradient summed to its shape.
		for _, v := range n.Inputs[:2] {
			if v != ir.NoValue && bp.param[v] && k == ir.EagerAdd {
				bp.paramGrad(v)
			}
		}
		for j, v := range n.Inputs[:2] {
			if v == ir.NoValue || !bp.data[v] || (j == 1 && v == n.Inputs[0]) {
				continue
			}
			if s.Elems(v) != s.Elems(outs[0]) || (k == ir.EagerSub && j == 1) {
				fresh(v) // a broadcast operand's gradient is reduced; sub negates
			} else {
				pass(v, true, true)
			}
		}
	case ir.EagerCat:
		axis := bp.axisOf(n)
		for _, v := range n.Inputs {
			if v != ir.NoValue && bp.data[v] {
				pass(v, sliceContiguous(s.Dims[outs[0]], axis), false)
			}
		}
		// A parameter concatenated through an expand (ViT's class token)
		// gets the sum of its slice, ExpandBackward's, as its .grad.
		for _, v := range n.Inputs {
			if p := bp.paramBehind(v); p != ir.NoValue && !bp.data[v] {
				bp.paramGrad(p)
			}
		}
	case ir.EagerSum:
		pass(n.Inputs[0], false, false) // an expanded view
	case ir.EagerMaxPool:
		// max_pool2d_with_indices_backward reads a strided gradient (a
		// concat's slice) as it is: the ground truth's traces of a pool
		// whose output only a concat reads show no copy of it.
		fresh(n.Inputs[0])
		freeCopy(bp.copyIf(!bp.contig[n.Inputs[0]], bp.bytes(n.Inputs[0])))
	case ir.EagerAvgPool:
		c := contiguous()
		fresh(n.Inputs[0])
		freeCopy(c)
	case ir.EagerUpsample:
		// upsample_nearest2d_backward reads a strided (even expanded)
		// gradient as it is. Under autocast it computes the float32
		// gradient of the float32 copy, which ToCopyBackward converts.
		x := n.Inputs[0]
		if bp.dt[x] != bp.dt[outs[0]] && bp.rg[x] {
			st := bp.alloc(s.Elems(x)*bp.dt[outs[0]].Size(), Grad, x)
			post = append(post, bp.toCopy(st, x, false))
			break
		}
		fresh(x)
	case ir.EagerContiguous:
		pass(n.Inputs[0], true, true) // CloneBackward: the gradient as it is
	case ir.EagerView, ir.EagerReshape, ir.EagerFlatten, ir.EagerTranspose, ir.EagerExpand, ir.EagerSlice, ir.EagerSplit:
		switch n.OpType {
		case "Expand":
			// ExpandBackward: the gradient summed to the input's sizes,
			// a new tensor; an expand to the input's own sizes passes it
			// on as it is.
			if x := n.Inputs[0]; slices.Equal(s.Dims[x], s.Dims[outs[0]]) {
				pass(x, true, true)
			} else {
				fresh(x)
			}
		case "Slice", "Split":
			// split_backward: zeros for each piece that got no gradient,
			// then the cat of all pieces, of the input's shape.
			var zeros []int32
			for _, o := range outs {
				if bp.data[o] && bp.slot[o] < 0 {
					zeros = append(zeros, bp.scratch(bp.bytes(o), Grad))
				}
			}
			fresh(n.Inputs[0])
			for _, z := range zeros {
				bp.emit(z, true)
			}
		case "Transpose":
			// transpose's backward transposes the gradient back.
			x := n.Inputs[0]
			if bp.rg[x] && bp.dt[x] != bp.dt[outs[0]] {
				fresh(x)
				break
			}
			if bp.rg[x] {
				t := gradT{st: gy.st, whole: gy.whole, bytes: bp.bytes(x)}
				if st := gradStrides(gy, s.Dims[outs[0]]); st != nil {
					t = withStrides(t, s.Dims[x], permuteStrides(st, inversePerm(n.IntsAttr("perm"))))
				}
				bp.ref(gy.st)
				give = append(give, delivery{x, t})
			}
		case "Reshape":
			x := n.Inputs[0]
			viewable := gy.whole && gy.contig // a contiguous gradient reshapes as a view
			if !viewable {
				viewable = splitsOnly(s.Dims[outs[0]], s.Dims[x])
				if st := gradStrides(gy, s.Dims[outs[0]]); st != nil {
					_, viewable = viewStrides(s.Dims[outs[0]], st, s.Dims[x])
				}
			}
			if !viewable {
				// The gradient's reshape to the input's sizes copies a
				// gradient no strides can address (view's backward is
				// grad.reshape).
				fresh(x)
				break
			}
			pass(x, true, true)
		default:
			pass(n.Inputs[0], true, true)
		}
	}
	// Incoming gradients go first, then the saved tensors, which
	// release_variables drops in order. A recomputed node's saved tensors
	// are different: unpacking hands them over to apply, whose locals die
	// last-made first before the engine drops the incoming gradients.
	if bp.cp.chunkOf[n.ID] >= 0 {
		for j := len(bp.saved[n.ID]) - 1; j >= 0; j-- {
			bp.unref(bp.saved[n.ID][j])
		}
		bp.saved[n.ID] = nil
	}
	for _, o := range outs {
		if bp.data[o] && bp.slot[o] >= 0 {
			bp.unref(bp.grads[bp.slot[o]].st)
			bp.slot[o] = -1
		}
	}
	for _, st := range bp.saved[n.ID] {
		bp.unref(st)
	}
	bp.saved[n.ID] = nil
	if c := bp.cp.chunkOf[n.ID]; c >= 0 && bp.cp.hadSave[n.ID] && bp.cp.firstSaver(c) == n.ID {
		bp.cp.releaseFrame(c)
	}
	for _, d := range give {
		bp.accumulate(d.v, d.t)
	}
	for _, f := range post {
		f()
	}
}

// nativeDepthwise reports whether conv node n is a depthwise convolution (a
// group per input channel) that PyTorch runs with its own CUDA kernels
// rather than cuDNN's: ConvParams::use_cudnn_depthwise sends only float16
// ones of at least 32 channels, square strides and no dilation to cuDNN,
// and of those the ones check_cudnn_depthwise_workload_with_filter (cuDNN
// 8.2 and later) accepts: every stride-1 conv with a square 1×1, 3×3 or 5×5
// filter on an input at least 7 wide, and at stride 2 at batch 1 a 3×3 or
// 5×5 filter (or 1×1 on at most 28 wide), at larger batches a 3×3 or 5×5
// filter on 512 or more channels or on 256 or more at least 28 wide, or a
// 1×1 one at batch 16 or less on 128 or more channels at most 7 wide.
func (bp *backwardPass) nativeDepthwise(n *ir.Node) bool {
	if bp.channelsLast(n.Inputs[0]) {
		return false // use_cudnn_depthwise: always cuDNN for channels-last
	}
	x, w := bp.s.Dims[n.Inputs[0]], bp.s.Dims[n.Inputs[1]]
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
		if bp.dt[n.Inputs[0]] != ir.Float16 || x[1] < 32 {
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

// lowGrad allocates the low-precision gradient of v that an op under
// autocast computes for its cast input or weight.
func (bp *backwardPass) lowGrad(v ir.ValueID) int32 {
	return bp.alloc(bp.s.Elems(v)*bp.low().Size(), Grad, v)
}

// inputGrad allocates the gradient of an op's input x: under autocast, of
// its float16 cast, whose float32 gradient ToCopyBackward makes after the
// node (added to post); else x's own (fresh).
func (bp *backwardPass) inputGrad(x ir.ValueID, fresh func(ir.ValueID), post []func()) []func() {
	if bp.autocast() && bp.dt[x] != bp.low() {
		return append(post, bp.toCopy(bp.lowGrad(x), x, false))
	}
	fresh(x)
	return post
}

// toCopy returns what ToCopyBackward does once the op's node has run: it
// allocates v's gradient in v's type (its .grad for a parameter) from the
// one in st, of the op's type, and frees st. The engine releases a node's
// inputs when the node returns, before it adds the node's output to what
// v already has, so st is gone before that sum is allocated (the H200
// trace of gelan-c's upsampling under autocast frees it so).
func (bp *backwardPass) toCopy(st int32, v ir.ValueID, param bool) func() {
	strides, dims := bp.freshStr, bp.freshDims
	return func() {
		bp.freshLayout(strides, dims) // .to() keeps the layout
		defer bp.freshLayout(nil, nil)
		if param {
			bp.paramGrad(v)
			bp.unref(st)
			return
		}
		g := bp.grad(v)
		bp.unref(st)
		bp.accumulate(v, g)
	}
}

// gemmBack emits AddmmBackward0 (MmBackward0 without a bias): mat1's
// gradient grad·W, then the weight's (grad.t()·mat1, whose transpose is
// contiguous and becomes W.grad), each an mm that takes its own contiguous
// copy of a strided incoming gradient (prepare_matrix_for_cublas clones an
// expanded one) and makes the autograd thread's cuBLAS workspace if it has
// none; then validate_outputs sums the incoming gradient to the bias's
// shape. Under autocast these are float16 gradients of the casts, which
// ToCopyBackward turns into float32 ones after the node: mat1's, the
// weight's, then the bias's.
func (bp *backwardPass) gemmBack(n *ir.Node, gy gradT, fresh func(ir.ValueID), contiguous func() int32, post []func()) []func() {
	x, w := n.Inputs[0], n.Inputs[1]
	bias := ir.NoValue
	if len(n.Inputs) > 2 && n.Inputs[2] != ir.NoValue {
		bias = n.Inputs[2]
	}
	low := bp.lowGrad
	toCopy := func(st int32, v ir.ValueID, param bool) { post = append(post, bp.toCopy(st, v, param)) }
	inputGrad := func(x ir.ValueID) { post = bp.inputGrad(x, fresh, post) }
	shared := int32(-1)
	if y := n.Outputs[0]; len(bp.s.Dims[y]) > 2 && !(gy.whole && gy.contig) {
		// A linear on an N-D input (addmm on its view, or matmul's
		// folded mm): UnsafeViewBackward's grad.reshape(rows, N) copies
		// a gradient no strides can view so, once for both products,
		// and the engine releases the strided gradient before the
		// product's node runs (ConvNeXt's linears, calibration/results/
		// convnext_vit_ops.json); a view cuBLAS takes as it is needs no
		// copy.
		if !blasMatrix(bp.s.Dims[y], gradStrides(gy, bp.s.Dims[y])) {
			shared = bp.scratch(bp.bytes(y), Copy)
			bp.unref(gy.st)
			bp.slot[y] = -1
			gy = gradT{st: shared, whole: true, contig: true, bytes: bp.bytes(y)}
		}
		contiguous = func() int32 { return -1 }
	}
	defer bp.freeScratch(shared)
	if len(bp.s.Dims[x]) > 2 && !bp.contig[x] {
		return bp.matmulBack(n, gy, fresh, contiguous, post)
	}
	if bp.rg[x] {
		inputGrad(x)
		c := contiguous()
		bp.blasWorkspaces(false)
		bp.freeScratch(c)
	}
	for _, p := range []ir.ValueID{w, bias} {
		if p == bias && p != ir.NoValue && bp.derived[p] {
			// A bias computed from a parameter (Swin V2's qkv bias, a
			// clone with its k third zeroed): its gradient's reduction,
			// which then flows back to the parameter (bytes too few to
			// count).
			bp.biasSum(n, gy)
			continue
		}
		if p == ir.NoValue || !bp.param[p] {
			continue
		}
		if bp.autocast() {
			toCopy(low(p), p, true)
		} else {
			bp.paramGrad(p)
		}
		if p == bias {
			bp.biasSum(n, gy)
		}
		if p == w {
			c := contiguous()
			bp.blasWorkspaces(false)
			bp.freeScratch(c)
		}
	}
	return post
}

// biasSum emits the buffers of a Linear's bias gradient: it sums a
// contiguous gy over its rows, B·L of them on a transformer's [B, L, E]. A
// strided gy is reduced along its fastest dimension, in shared memory
// (calibration/reduce_staging.py measured only the contiguous case).
func (bp *backwardPass) biasSum(n *ir.Node, gy gradT) {
	if bias := n.Inputs[2]; gy.contig {
		bp.columnSum(bp.s.Elems(n.Outputs[0])/max(bp.s.Elems(bias), 1), bp.s.Elems(bias))
	}
}

// matmulBack emits the backward of a linear on a strided input of more than
// two dims, which aten::linear runs as matmul(x, W.t()) then add_(b)
// instead of one addmm (MultiheadAttention's in-projection of the
// transposed query): AddBackward's bias gradient first, then MmBackward's
// weight gradient and the input's; autocast's ToCopyBackward nodes then
// run the input's, the weight's and the bias's (calibration/results/
// vit_steps.json and convnext_vit_ops.json).
func (bp *backwardPass) matmulBack(n *ir.Node, gy gradT, fresh func(ir.ValueID), contiguous func() int32, post []func()) []func() {
	x, w := n.Inputs[0], n.Inputs[1]
	grad := func(p ir.ValueID, param bool) func() {
		if !bp.autocast() || (!param && bp.dt[p] == bp.low()) {
			if param {
				bp.paramGrad(p)
			} else {
				fresh(p)
			}
			return nil
		}
		return bp.toCopy(bp.lowGrad(p), p, param)
	}
	var later [3]func() // the input's, the weight's, the bias's
	if len(n.Inputs) > 2 && n.Inputs[2] != ir.NoValue && bp.param[n.Inputs[2]] {
		later[2] = grad(n.Inputs[2], true)
		bp.biasSum(n, gy)
	}
	if bp.param[w] {
		c := contiguous()
		later[1] = grad(w, true)
		bp.blasWorkspaces(false)
		bp.freeScratch(c)
	}
	if bp.rg[x] {
		later[0] = grad(x, false)
		c := contiguous()
		bp.blasWorkspaces(false)
		bp.freeScratch(c)
	}
	for _, f := range later {
		if f != nil {
			post = append(post, f)
		}
	}
	return post
}

// accumulate sums gradient t into v's buffer the way InputBuffer::accumulate
// does (torch/csrc/autograd/input_buffer.cpp): in place into the old gradient
// when it is dense and nothing else shares its storage, else into a fresh
// tensor.
func (bp *backwardPass) accumulate(v ir.ValueID, t gradT) {
	if bp.slot[v] < 0 {
		bp.setSlot(v, t)
		return
	}
	old := bp.grads[bp.slot[v]]
	switch {
	case old.whole && (old.contig || dense(bp.s.Dims[v], old.str)) && bp.st[old.st].refs == 1:
		bp.unref(t.st)
	default:
		sum := bp.grad(v)
		bp.unref(old.st)
		bp.unref(t.st)
		bp.grads[bp.slot[v]] = sum
	}
}

// cleanup ends the step as the caller does: the outputs, the loss and the
// input are dropped, along with the graph of any node the backward never
// reached. The parameters' .grad buffers stay.
func (b *builder) cleanup() {
	b.phase = Cleanup
	b.node = -1
	for _, i := range b.bw.unrun {
		for _, st := range b.saved[i] {
			b.unref(st)
		}
		b.saved[i] = nil
	}
	if b.cfg.Eval == nil && (b.cfg.Train == nil || b.cfg.Train.Loss == nil) {
		b.unref(b.bw.lossSt)
	}
	for j := len(b.fw.decoded) - 1; j >= 0; j-- {
		b.unref(b.fw.decoded[j])
	}
	// The list of outputs dies last item first; a value listed twice holds
	// one reference. Carried to the next step, it stays.
	for j := len(b.g.Outputs) - 1; j >= 0 && len(b.p.CarriedFrom) == 0; j-- {
		o := b.g.Outputs[j]
		first := true
		for _, p := range b.g.Outputs[:j] {
			first = first && p != o
		}
		if first && b.vst[o] >= 0 {
			b.unref(b.vst[o])
		}
	}
	b.p.StepEnd = len(b.p.Events)
	b.unref(b.vst[b.g.Inputs[0]])
	var pg []int32
	for v, buf := range b.bw.paramGrads {
		if buf >= 0 {
			_ = v
			pg = append(pg, buf)
		}
	}
	// Parameter order is the resident order, which is value order.
	sort.Slice(pg, func(i, j int) bool { return b.p.Buffers[pg[i]].Value < b.p.Buffers[pg[j]].Value })
	b.p.ParamGrads = pg
}
