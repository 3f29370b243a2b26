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
	bp.countCastUses()
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
		if !k.RunsOnData() || leader[i] != int32(i) {
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
			bp.castUnreached(n)
		} else {
			bp.node = int32(i)
			if c >= 0 && !bp.cp.chunks[c].recomputed && bp.cp.hadSave[i] {
				bp.cp.recompute(c)
			}
			bp.back(n, k, outs)
			bp.derivedGrads(n)
			for _, st := range bp.untilDerived {
				bp.freeScratch(st)
			}
			bp.untilDerived = bp.untilDerived[:0]
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

// setSlot stores t as the first gradient of v.
func (bp *backwardPass) setSlot(v ir.ValueID, t gradT) {
	bp.grads = append(bp.grads, t)
	bp.slot[v] = int32(len(bp.grads) - 1)
}

// sliceGroups maps each node to the node whose autograd node it belongs to:
// Slices of one tensor along one axis that chunk() made are one call, whose
// SplitBackward runs once for all pieces. The exporter writes chunk() as
// Slices that each start at the value the piece before ends at
// (prim::ConstantChunk's symbolic: a CSP block's chunk(2, 1),
// ShuffleNet's), or, its shape arithmetic folded, at the same constant.
// Python's own slices with bounds computed from a shape (a rotary
// embedding's x[..., :d // 2] and x[..., d // 2:]) compute each piece's
// bounds apart, and each runs a SliceBackward0 of its own: zeros of the
// input's size with the piece's gradient copied in
// (calibration/results/hf_fp32_traces.jsonl.gz, Llama's rotate_half).
// Slices with literal bounds that meet are taken for a chunk(), and so are
// those whose bounds are attributes (opset 9).
func (bp *backwardPass) sliceGroups() []int32 {
	g := bp.g
	leader := make([]int32, len(g.Nodes))
	first := map[[2]int64]int32{} // by input and axis, for bounds in attributes
	ends := map[[3]int64]int32{}  // by input, axis and end value: the group
	lits := map[[3]int64]int32{}  // by input, axis and a literal end
	literal := func(v ir.ValueID) (int64, bool) {
		if d := g.Values[v].Data; len(d) == 1 && g.Values[v].Kind != ir.Activation {
			return d[0], true
		}
		return 0, false
	}
	for i := range g.Nodes {
		leader[i] = int32(i)
		n := &g.Nodes[i]
		if bp.kind[i] != ir.EagerSlice {
			continue
		}
		x, axis := int64(n.Inputs[0]), int64(bp.axisOf(n))
		if len(n.Inputs) < 3 {
			key := [2]int64{x, axis}
			if l, ok := first[key]; ok {
				leader[i] = l
			} else {
				first[key] = int32(i)
			}
			continue
		}
		start, end := n.Inputs[1], n.Inputs[2]
		if l, ok := ends[[3]int64{x, axis, int64(start)}]; ok {
			leader[i] = l
		} else if c, ok := literal(start); ok {
			if l, ok := lits[[3]int64{x, axis, c}]; ok {
				leader[i] = l
			}
		}
		ends[[3]int64{x, axis, int64(end)}] = leader[i]
		if c, ok := literal(end); ok {
			lits[[3]int64{x, axis, c}] = leader[i]
		}
	}
	return leader
}

// grad allocates a fresh gradient of value v: contiguous, or in the node's
// fresh layout (freshLayout) when v has its dims.
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

// paramGradAdd gives parameter v its .grad, as paramGrad does, or, when v
// has one already (a weight two ops read, such as a language model's head
// tied to its token embedding), allocates the new contribution and sums
// the two as InputBuffer::accumulate does (torch/csrc/autograd/
// input_buffer.cpp): in place into the first, unless the first is a view
// that shares its storage (a linear weight's grad.t() in float32, whose
// view keeps its base), which can_accumulate_inplace refuses: then
// old + new is a third tensor, and both go. view says the gradient this
// call gives is such a view.
func (bp *backwardPass) paramGradAdd(v ir.ValueID, view bool) {
	if v == ir.NoValue || !bp.param[v] {
		return
	}
	if bp.viewGrad == nil {
		bp.viewGrad = make([]bool, len(bp.paramGrads))
	}
	old := bp.paramGrads[v]
	if old < 0 {
		bp.paramGrad(v)
		bp.viewGrad[v] = view
		return
	}
	add := bp.alloc(bp.bytes(v), Grad, v)
	if bp.viewGrad[v] {
		sum := bp.newBuf(bp.bytes(v), ParamGrad, v)
		bp.emit(sum, false)
		bp.paramGrads[v], bp.viewGrad[v] = sum, false
		bp.emit(old, true)
	}
	bp.unref(add)
}

// derivedGrads gives each parameter behind an input of node n that is
// computed from parameters alone (Swin V2's logit_scale.exp() and bias
// MLP, a weight-normed convolution's weight) its .grad, once: the gradient
// that reaches such an input flows back through its ops to them. The ops'
// own transients, of the parameters' sizes, are not counted, but for a
// convolution's standardised weight (convBackward's untilDerived).
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

// back emits the backward of one autograd node, of kind k, which takes the
// gradients of outs: its kind's backward (kinds.go) makes its inputs'
// gradients, then back releases its incoming gradients and its saved
// tensors and hands the new gradients on.
func (bp *backwardPass) back(n *ir.Node, k ir.Eager, outs []ir.ValueID) {
	s := bp.s
	r := &kindRules[k]
	o := &bp.op
	*o = bwdOp{backwardPass: bp, n: n, k: k, outs: outs, give: bp.give[:0]}
	if bp.data[outs[0]] && bp.slot[outs[0]] >= 0 {
		o.gy = bp.grads[bp.slot[outs[0]]]
	}
	bp.freshLayout(nil, nil)
	// An element-wise op's input gradient follows the incoming one's
	// layout.
	if gy := o.gy; r.elementwise && gy.whole && !gy.contig && dense(s.Dims[outs[0]], gy.str) {
		bp.freshLayout(gy.str, s.Dims[outs[0]])
	}
	r.backward(o)
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
	for _, v := range outs {
		if bp.data[v] && bp.slot[v] >= 0 {
			bp.unref(bp.grads[bp.slot[v]].st)
			bp.slot[v] = -1
		}
	}
	for _, st := range bp.saved[n.ID] {
		bp.unref(st)
	}
	bp.saved[n.ID] = nil
	if c := bp.cp.chunkOf[n.ID]; c >= 0 && bp.cp.hadSave[n.ID] && bp.cp.firstSaver(c) == n.ID {
		bp.cp.releaseFrame(c)
	}
	for _, d := range o.give {
		bp.accumulate(d.v, d.t)
	}
	for _, f := range o.post {
		f()
	}
	bp.give = o.give[:0]
	bp.freshLayout(nil, nil)
}

// bwdOp is the backward of one autograd node as its kind's backward runs
// it.
type bwdOp struct {
	*backwardPass
	n    *ir.Node
	k    ir.Eager
	outs []ir.ValueID // the outputs whose gradients the node takes
	gy   gradT        // the incoming gradient of outs[0], if any
	// give are the gradients that the node hands on once it has released
	// its inputs; post runs after that: the ToCopyBackward nodes of
	// autocast's casts, which the engine runs next.
	give []delivery
	post []func()
	// copyIn, when set, stands for copyGrad: the copy that the kind's
	// kernels take of the incoming gradient in another layout, or none.
	copyIn func() int32
}

// dropIncoming releases the node's incoming gradient before the node ends,
// as the first of a composite op's inner autograd nodes does when it
// returns.
func (o *bwdOp) dropIncoming() {
	if y := o.outs[0]; o.data[y] && o.slot[y] >= 0 {
		o.unref(o.gy.st)
		o.slot[y] = -1
	}
}

// dropSaved releases storage st, one of the node's saved tensors, before
// the node ends, as an inner autograd node of a composite op drops what it
// saved when it returns.
func (o *bwdOp) dropSaved(st int32) {
	s := o.saved[o.n.ID]
	i := slices.Index(s, st)
	if i < 0 {
		panic("schedule: dropSaved: not a saved tensor of the node")
	}
	o.saved[o.n.ID] = slices.Delete(s, i, i+1)
	o.unref(st)
}

// fresh hands input v, if it needs one, a new gradient (grad).
func (o *bwdOp) fresh(v ir.ValueID) {
	if o.rg[v] {
		o.give = append(o.give, delivery{v, o.grad(v)})
	}
}

// pass hands input v, if it needs one, the incoming gradient as a view:
// all of its storage when whole, contiguous when contig (and the
// incoming gradient is). A view of another type is a new gradient.
func (o *bwdOp) pass(v ir.ValueID, contig, whole bool) {
	if !o.rg[v] {
		return
	}
	if o.dt[v] != o.dt[o.outs[0]] {
		// A view of a gradient of another type is converted: .to()
		// allocates the input's type.
		o.fresh(v)
		return
	}
	gy, s := o.gy, o.s
	o.ref(gy.st)
	t := gradT{st: gy.st, whole: whole && gy.whole, contig: contig && gy.contig, bytes: o.bytes(v), view: gy.view}
	if contig && whole && gy.whole && !gy.contig && gy.str != nil {
		// A view that keeps the layout, with the strides computeStride
		// finds for v's dims.
		if nst, ok := viewStrides(s.Dims[o.outs[0]], gy.str, s.Dims[v]); ok {
			t = withStrides(t, s.Dims[v], nst)
		}
	}
	o.give = append(o.give, delivery{v, t})
}

// contiguous makes the copy that a kernel takes of the incoming gradient
// and returns its buffer, or -1: copyIn's, else a contiguous copy of a
// strided gradient.
func (o *bwdOp) contiguous() int32 {
	if o.copyIn != nil {
		return o.copyIn()
	}
	return o.copyIf(!o.gy.whole || !o.gy.contig, o.bytes(o.outs[0]))
}

// later has ToCopyBackward turn st, a gradient of v in the op's type, into
// v's own once the node has run (toCopy).
func (o *bwdOp) later(st int32, v ir.ValueID, param bool) {
	o.post = append(o.post, o.toCopy(st, v, param))
}

// inputGrad allocates the gradient of an op's input x: under autocast, of
// its float16 cast, whose float32 gradient ToCopyBackward makes after the
// node; else x's own (fresh).
func (o *bwdOp) inputGrad(x ir.ValueID) {
	if o.autocast() && o.dt[x] != o.low() {
		o.later(o.lowGrad(x), x, false)
		return
	}
	o.fresh(x)
}

// freshBackward makes a new gradient of the input: threshold_backward,
// sigmoid_backward, hardswish_backward, hardtanh_backward,
// _softmax_backward_data, norm_backward, mean's expand / numel, the pad
// cut back, SelectBackward's zeros with the slice's gradient copied in.
// (Under autocast norm_backward's product is float32 and the engine turns
// it to the input's type; that transient is not modelled: swin_v2_t's AMP
// steps read within 1.2% without it, and no trace has shown it yet.)
//
// A formula that is not one kernel (ir.Op.GradTemps) first makes its
// temporaries, of the output's size and type, and frees them, the last
// made first, once the gradient exists: pow's backward in a Llama's
// RMSNorm allocates three [B, L, E] tensors where the gradient is one
// (calibration/results/hf_fp32_traces.jsonl.gz).
func freshBackward(o *bwdOp) {
	x := o.n.Inputs[0]
	r, _ := ir.OpOf(o.n)
	var temps []int32
	for i := 0; o.rg[x] && i < r.GradTemps; i++ {
		temps = append(temps, o.scratch(o.bytes(o.outs[0]), Grad))
	}
	o.fresh(x)
	for i := len(temps) - 1; i >= 0; i-- {
		o.freeScratch(temps[i])
	}
}

// passBackward hands the input the incoming gradient as it is: a view's
// (squeeze, unsqueeze, flatten), a view of the incoming one (markView), and
// CloneBackward's, the same tensor.
func passBackward(o *bwdOp) {
	o.pass(o.n.Inputs[0], true, true)
	o.markView()
}

// markView marks the gradient the op gave last, the incoming one's
// storage, as a view of it (gradT.view) where the op's row says its
// backward makes one (ir.Op.GradView): not where flatten merged no dim,
// which returns its input itself.
func (o *bwdOp) markView() {
	if r, _ := ir.OpOf(o.n); !r.GradView {
		return
	}
	if o.n.OpType == "Flatten" && slices.Equal(o.s.Dims[o.n.Inputs[0]], o.s.Dims[o.outs[0]]) {
		return
	}
	if n := len(o.give); n > 0 && o.give[n-1].t.st == o.gy.st {
		o.give[n-1].t.view = true
	}
}

// lowGrad allocates the low-precision gradient of v that an op under
// autocast computes for its cast input or weight.
func (bp *backwardPass) lowGrad(v ir.ValueID) int32 {
	return bp.alloc(bp.s.Elems(v)*bp.low().Size(), Grad, v)
}

// countCastUses counts, by parameter, the ops that autocast lowers and
// that read it: each takes the one float16 copy that autocast's cache
// holds, so each sends a gradient to that copy's one ToCopyBackward node
// (toCopy).
func (bp *backwardPass) countCastUses() {
	bp.castLeft, bp.castSum = nil, nil
	if !bp.autocast() {
		return
	}
	for i := range bp.g.Nodes {
		if !bp.kind[i].RunsOnData() || bp.class[i] != ir.AutocastLower {
			continue
		}
		for _, v := range bp.g.Nodes[i].Inputs {
			if v != ir.NoValue && bp.param[v] {
				if bp.castLeft == nil {
					bp.castLeft = make([]int32, len(bp.g.Values))
					bp.castSum = make([]gradT, len(bp.g.Values))
				}
				bp.castLeft[v]++
			}
		}
	}
}

// castUnreached counts off the uses of shared autocast copies by node n,
// which the backward does not reach: the engine counts only the nodes it
// reaches, so a copy's ToCopyBackward runs after the last reached use,
// and converts what the uses before sent.
func (bp *backwardPass) castUnreached(n *ir.Node) {
	if bp.castLeft == nil || bp.class[n.ID] != ir.AutocastLower {
		return
	}
	for _, v := range n.Inputs {
		if v == ir.NoValue || !bp.param[v] || bp.castLeft[v] == 0 {
			continue
		}
		bp.castLeft[v]--
		if sum := bp.castSum[v]; bp.castLeft[v] == 0 && sum.bytes > 0 {
			bp.castSum[v] = gradT{}
			bp.paramGradAdd(v, false)
			bp.unref(sum.st)
		}
	}
}

// toCopy returns what ToCopyBackward does once the op's node has run: it
// allocates v's gradient in v's type (its .grad for a parameter) from the
// one in st, of the op's type, and frees st. The engine releases a node's
// inputs when the node returns, before it adds the node's output to what
// v already has, so st is gone before that sum is allocated (the H200
// trace of gelan-c's upsampling under autocast frees it so).
//
// A parameter that several lowered ops read (ALBERT's one layer, run six
// times) has one float16 copy in autocast's cache and one ToCopyBackward:
// the copy's gradients from the uses before the last are summed in its
// input buffer, in float16 (InputBuffer::accumulate: out of place onto
// the first, a linear weight's transposed view, in place after), and the
// float32 .grad is made once, after the last
// (calibration/results/hf_third_traces.jsonl.gz, ALBERT under AMP).
func (bp *backwardPass) toCopy(st int32, v ir.ValueID, param bool) func() {
	strides, dims := bp.freshStr, bp.freshDims
	n := bp.op.n
	view := n != nil && n.OpType == "Gemm" && n.IntAttr("transB", 0) != 0 && len(n.Inputs) > 1 && n.Inputs[1] == v
	return func() {
		bp.freshLayout(strides, dims) // .to() keeps the layout
		defer bp.freshLayout(nil, nil)
		if param {
			if bp.castLeft != nil && bp.castLeft[v] > 0 {
				bp.castLeft[v]--
				sum := &bp.castSum[v]
				switch {
				case sum.bytes == 0:
					*sum = gradT{st: st, bytes: bp.s.Elems(v) * bp.low().Size(), view: view}
				case sum.view:
					acc := bp.alloc(sum.bytes, Grad, v)
					bp.unref(sum.st)
					bp.unref(st)
					*sum = gradT{st: acc, bytes: sum.bytes}
				default:
					bp.unref(st)
				}
				if bp.castLeft[v] > 0 {
					return // more uses' gradients to come
				}
				st = sum.st
				*sum = gradT{}
			}
			bp.paramGradAdd(v, false)
			bp.unref(st)
			return
		}
		g := bp.grad(v)
		bp.unref(st)
		bp.accumulate(v, g)
	}
}

// accumulate sums gradient t into v's buffer the way InputBuffer::accumulate
// does (torch/csrc/autograd/input_buffer.cpp): in place into the old gradient
// when it is dense and nothing else shares its storage (not a view, whose
// base shares it), else into a fresh tensor.
func (bp *backwardPass) accumulate(v ir.ValueID, t gradT) {
	if bp.slot[v] < 0 {
		bp.setSlot(v, t)
		return
	}
	old := bp.grads[bp.slot[v]]
	switch {
	case old.whole && (old.contig || dense(bp.s.Dims[v], old.str)) && bp.st[old.st].refs == 1 && !old.view:
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
	// one reference. Carried to the next step (Program.PrevPred), it stays.
	for j := len(b.g.Outputs) - 1; j >= 0 && len(b.p.PrevPredFrom) == 0; j-- {
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
