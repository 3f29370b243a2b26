package schedule

import (
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

// run emits the forward of one eager op, of kind k: its allocations in the
// order the kernels make them, the frees of scratch buffers, and the
// references that autograd's saved tensors take. The kind's forward
// (kinds.go) does the op's own; run does what every op does around it.
func (fp *forwardPass) run(n *ir.Node, k ir.Eager) {
	s := fp.s
	i := n.ID
	r := &kindRules[k]
	o := &fp.op
	*o = fwdOp{forwardPass: fp, n: n, i: i, k: k, reads: fp.readsOf(i)}
	// Under autocast the op's class says its compute type.
	o.lower = fp.autocast() && fp.class[i] == ir.AutocastLower && !fp.float32Region(i)
	o.fp32 = fp.autocast() && fp.class[i].Float32()
	o.ip = fp.inplace != nil && fp.inplace[i]
	for _, v := range o.reads {
		if fp.rg[v] {
			fp.markRG(n)
			break
		}
	}
	for _, v := range n.Inputs {
		// A parameter, or a value computed from parameters alone that
		// training updates (a standardised weight: BiT's StdConv2d,
		// NFNet's ScaledStdConv2d), makes the output need a gradient.
		if v != ir.NoValue && (fp.param[v] || fp.trained[v]) {
			fp.markRG(n)
		}
	}
	// Outputs take the widest type of the inputs, as type promotion does;
	// ops that autocast lowers set theirs before allocating.
	wide := ir.Undefined
	for _, v := range o.reads {
		if wide == ir.Undefined || fp.dt[v].Size() > wide.Size() {
			wide = fp.dt[v]
		}
	}
	if r.promotes {
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
	r.forward(o)
	if o.stopped() {
		return
	}
	if r.elementwise {
		o.followLayout()
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

// float32Region reports whether matmul node i, under autocast, reads only
// activations that the code cast up to float32 itself, directly or through
// views (x.float() of a float16 tensor, which the exporter writes as a
// Cast to FLOAT), or that such a matmul wrote. Under an enabled autocast
// the matmul would cast them straight back to float16, so code writes
// those casts inside a region with autocast disabled, where the matmul
// computes in float32 (a view of a cast shares its storage, so the test
// looks at the storage's maker):
//
//	with torch.autocast(device_type="cuda", enabled=False):
//	    kv = k.float().transpose(-1, -2) @ v.float()  # float32 out
//	    out = q.float() @ kv
//
// as timm's EfficientViT linear attention (efficientvit_mit.py's LiteMLA)
// does. The graph does not show the region. A Cast to FLOAT of a tensor
// that is float32 already (x.to(orig_dtype) after a float32 computation)
// does not count, nor does an op with a parameter operand (a Linear or a
// Conv, whose weight autocast would cast).
func (fp *forwardPass) float32Region(i int32) bool {
	if fp.kind[i] != ir.EagerEinsum {
		return false
	}
	if fp.off == nil {
		fp.off = make([]bool, len(fp.g.Nodes))
	}
	// castUp reports whether v is float32 and its storage, which views
	// share, was made by such a cast or by a matmul of the region.
	castUp := func(v ir.ValueID) bool {
		if fp.dt[v] != ir.Float32 || fp.vst[v] < 0 {
			return false
		}
		p := fp.p.Buffers[fp.st[fp.vst[v]].buf].Node
		if p < 0 {
			return false
		}
		n := &fp.g.Nodes[p]
		return fp.off[p] || n.OpType == "Cast" && fp.dt[n.Inputs[0]].Size() == 2
	}
	read := false
	for _, v := range fp.g.Nodes[i].Inputs {
		if v == ir.NoValue || !isFloat(fp.s.DTypes[v]) {
			continue
		}
		if !fp.data[v] || !castUp(v) {
			read = false
			break
		}
		read = true
	}
	fp.off[i] = read
	return read
}

// fwdOp is the forward of one node as its kind's forward runs it.
type fwdOp struct {
	*forwardPass
	n     *ir.Node
	i     int32 // the node's ID
	k     ir.Eager
	reads []ir.ValueID // the data values it reads (Flow.Reads)
	lower bool         // autocast lowers it to float16
	fp32  bool         // autocast runs it in float32
	ip    bool         // it runs in place on its first data input (Holds.InPlace)
}

// out returns the node's output j.
func (o *fwdOp) out(j int) ir.ValueID { return o.n.Outputs[j] }

// newOut allocates output j, contiguous, as a buffer of the given kind.
func (o *fwdOp) newOut(j int, kind Kind) {
	v := o.out(j)
	o.vst[v] = o.alloc(o.bytes(v), kind, v)
	o.setLayout(v, nil)
}

// save has autograd keep value v for the node's backward: a reference to
// its storage, or, inside a checkpointed range or under no_grad, only the
// note that the node would have kept one. A parameter is resident: save
// takes nothing.
func (o *fwdOp) save(v ir.ValueID) {
	if !o.data[v] {
		return
	}
	if o.noSave {
		o.cp.hadSave[o.i] = true
		return
	}
	st := o.vst[v]
	o.ref(st)
	o.saved[o.i] = append(o.saved[o.i], st)
}

// own hands the node's saved set the reference to storage st that the op
// made for it: kept for the backward, or, inside a checkpointed range or
// under no_grad, dropped when the op returns.
func (o *fwdOp) own(st int32) {
	if o.noSave {
		o.cp.hadSave[o.i] = true
		o.deferred = append(o.deferred, st)
		return
	}
	o.saved[o.i] = append(o.saved[o.i], st)
}

// inPlace gives output 0 the storage of the input that the op overwrites
// (relu_, add_, …): it allocates nothing.
func (o *fwdOp) inPlace() {
	x, _ := o.overwrites(o.i)
	v := o.out(0)
	o.vst[v], o.dt[v], o.contig[v], o.str[v] = o.vst[x], o.dt[x], o.contig[x], o.str[x]
	o.ref(o.vst[x])
}

// copyIn makes the contiguous copy that a kernel takes of a strided input
// v, and returns its buffer, or -1 for a contiguous v.
func (o *fwdOp) copyIn(v ir.ValueID) int32 { return o.copyIf(!o.contig[v], o.bytes(v)) }

// stopped reports whether a recomputation stops at this node once its
// inputs are packed, before its kernel runs (checkpoints.recompute).
func (o *fwdOp) stopped() bool { return o.stopAt == o.i }

// followLayout gives an element-wise op's new output the memory order of
// its first operand of the output's own shape (TensorIterator: the first
// operand whose strides order two dims decides; a broadcast one does not):
// ViT's x + input after MultiheadAttention's transpose back to batch first
// keeps the (L, B, E) order, and the next layer norm copies it.
func (o *fwdOp) followLayout() {
	s := o.s
	y := o.out(0)
	if !o.data[y] || !o.contig[y] {
		return
	}
	for _, x := range o.reads {
		if slices.Equal(s.Dims[x], s.Dims[y]) {
			if !o.contig[x] && o.str[x] != nil && o.vst[y] != o.vst[x] {
				// Dense in x's order of strides, which a strided x (a
				// permuted slice, MaxViT's k before its scaling) decides
				// too.
				o.setLayout(y, denseInOrder(s.Dims[x], o.str[x]))
			}
			return
		}
	}
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
