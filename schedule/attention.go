package schedule

import (
	"slices"

	"github.com/onnxmem/onnxmem/ir"
)

// scaled_dot_product_attention on a CUDA device, fused (the generic
// family's ScaledDotProductAttention): under autocast the flash kernel
// (_scaled_dot_product_flash_attention, half inputs), in float32, on a
// card without flash attention (below sm 8.0, Config.NoFlash) and with a
// learned bias as attn_mask (learnedBias: flash takes no mask) in any
// type, memory-efficient attention
// (_scaled_dot_product_efficient_attention).
// Both save query, key, value, the output and a float32 logsumexp for
// their backward; the flash kernel also saves the philox seed and offset
// it drew, memory-efficient attention a learned bias padded to rows of 8.
// calibration/convnext_vit_ops.py measured both, in ViT's encoder;
// calibration/results/timm_tinyvit_traces.jsonl.gz the padded bias.
//
// Worked example, vit_b_16's attention at batch 8 under autocast: q, k and
// v of [8 12 197 64] in float16 (2.3 MiB each); the forward draws the two
// 8-byte seeds, writes the float16 output in q's memory order and a
// float32 logsumexp of 8·12·197 rows (75,648 bytes). The backward makes
// the gradients of q, k and v and, while its kernel runs, one float32
// buffer for q's gradient accumulator and the rows' delta: 4,917,376
// bytes, the size calibration/results/vit_steps.json shows.

// attentionForward emits the fused attention: the saves of q, k and v,
// the flash kernel's seeds, the output, which it saves, and the
// logsumexp.
func attentionForward(o *fwdOp) {
	n, s := o.n, o.s
	y := o.out(0)
	q, k, v := n.Inputs[0], n.Inputs[1], n.Inputs[2]
	if mathKernel(n, s, o.lower, o.dt[q]) {
		mathAttentionForward(o)
		return
	}
	learned := learnedBias(o.builder, n)
	flash := o.lower && !o.cfg.NoFlash && !learned
	for _, x := range []ir.ValueID{q, k, v} {
		if flash && padded(s, x) {
			// pad_last_dim's copy, which the kernel saves instead.
			o.own(o.alloc(paddedElems(s, x)*o.low().Size(), Activation, ir.NoValue))
			continue
		}
		o.save(x)
	}
	if o.lower {
		o.dt[y] = o.low()
	}
	if flash {
		for range 2 {
			o.own(o.alloc(8, Stats, ir.NoValue))
		}
	}
	if learned {
		// The flash kernel takes no attn_mask: a learned bias runs
		// memory-efficient attention, which wants the bias's rows
		// aligned to 8 elements: preprocess_mask pads a bias whose
		// last dim is not a multiple of 8 into a new tensor (pad_bias),
		// and the kernel saves that for its backward
		// (aten/src/ATen/native/transformers/attention.cpp; TinyViT's
		// [heads, 49, 49] float32 bias at batch 1 became [heads, 49, 56],
		// calibration/results/timm_tinyvit_traces.jsonl.gz).
		if m := n.Inputs[3]; padded(s, m) {
			size := o.dt[m].Size()
			if o.lower {
				size = o.low().Size()
			}
			o.own(o.alloc(paddedElems(s, m)*size, Activation, ir.NoValue))
		}
	}
	d := s.Dims[y]
	pad := flash && padded(s, v)
	if pad {
		// The kernel writes a padded output, contiguous, and
		// post_process_flash_output returns its slice to the head
		// dim: the view keeps the padded storage, and a reshape of it
		// copies.
		o.vst[y] = o.alloc(paddedElems(s, y)*o.low().Size(), Activation, y)
	} else {
		o.newOut(0, Activation)
	}
	o.save(y)
	// The flash kernel writes its output in q's memory order, (L, B,
	// H, D) for a MultiheadAttention's heads, so the transpose back
	// to (L, B, ·) is contiguous and the projection copies nothing;
	// memory-efficient attention writes (B, L, H, D).
	// The flash kernel runs on q.transpose(1, 2) and allocates its output
	// as empty_like of that: a dense q's strides, else contiguous in (B,
	// L, H, D) order, as memory-efficient attention's output always is (a
	// q sliced from a packed qkv projection, timm's Attention, is not
	// dense).
	st := o.denseStrides(q)
	switch {
	case pad:
		o.setLayout(y, rowMajor(slices.Concat(d[:len(d)-1], []int64{padTo8(d[len(d)-1])})))
	case flash && dense(s.Dims[q], st):
		o.setLayout(y, st) // empty_like keeps a dense q's strides
	case len(d) == 4:
		o.setLayout(y, permuteStrides(rowMajor([]int64{d[0], d[2], d[1], d[3]}), []int64{0, 2, 1, 3}))
	}
	rows := s.Elems(q) / max(s.Dims[q][len(s.Dims[q])-1], 1)
	if !flash {
		l := s.Dims[q][len(s.Dims[q])-2]
		rows = rows / max(l, 1) * ((l + 31) / 32 * 32)
	}
	o.own(o.alloc(rows*4, Stats, ir.NoValue))
}

// attentionBackward emits the fused attention's backward: the gradients
// of q, k and v (and of a learned bias, written at the broadcast size
// first), and float32 scratch, freed when the kernel returns.
// Memory-efficient attention (float32) makes the output's gradient
// contiguous first and takes the rows' delta; the flash kernel (autocast)
// reads a dense gradient in any order of its dims (MultiheadAttention's
// arrives in (L, B, H, D) order) and takes one float32 buffer for q's
// gradient accumulator and the rows' delta, 256 bytes more
// (calibration/results/vit_steps.json: 12 such of 4,917,376 bytes at
// vit_b_16 batch 8, of 1,248,256 at vit_b_32).
func attentionBackward(o *bwdOp) {
	n, s := o.n, o.s
	y := o.outs[0]
	q := n.Inputs[0]
	rows := s.Elems(q) / max(s.Dims[q][len(s.Dims[q])-1], 1)
	learned := learnedBias(o.builder, n)
	flash := o.autocast() && !o.cfg.NoFlash && !learned
	if mathKernel(n, s, o.autocast(), o.dt[q]) {
		// As the forward decided.
		mathAttentionBackward(o)
		return
	}
	if flash && (padded(s, q) || padded(s, n.Inputs[1]) || padded(s, n.Inputs[2])) {
		paddedFlashBackward(o)
		return
	}
	c := int32(-1)
	if st := gradStrides(o.gy, s.Dims[y]); !flash || !dense(s.Dims[y], st) || st[len(st)-1] != 1 {
		c = o.scratch(s.Elems(y)*o.dt[y].Size(), Copy)
	}
	if st := o.denseStrides(q); flash && dense(s.Dims[q], st) {
		// Its gradients are empty_like of q, k and v: q's strides
		// where, as in MultiheadAttention, the three share them.
		o.freshLayout(st, s.Dims[q])
	}
	for _, v := range n.Inputs {
		o.fresh(v)
	}
	if learned {
		// Memory-efficient attention's backward writes the bias's
		// gradient at the broadcast size, [B, H, L, S] with S aligned
		// to 16 (grad_bias = at::empty(sz).slice(-1, 0, S)), which
		// autograd sums back to the bias's own shape.
		sk := s.Dims[n.Inputs[1]]
		size := o.dt[n.Inputs[3]].Size()
		if o.autocast() {
			size = o.low().Size()
		}
		l := sk[len(sk)-2]
		defer o.freeScratch(o.scratch(rows*((l+15)/16*16)*size, Grad))
	}
	var expanded []int32
	if n.IntAttr("gqa", 0) != 0 {
		// The flash kernel writes the gradients of k and v at q's
		// heads (dk_expanded, dv_expanded) and sums each group into
		// the grouped ones after it.
		for _, x := range n.Inputs[1:] {
			expanded = append(expanded, o.scratch(s.Elems(x)*int64(groups(s, n))*o.low().Size(), Grad))
		}
	}
	switch {
	case flash:
		o.freeScratch(o.scratch(s.Elems(q)*4+rows*4+256, Grad))
	case o.autocast():
		// Memory-efficient attention on half inputs (a card without
		// flash) accumulates q's gradient in a float32 workspace
		// (kernel_backward.h's workspace_elements_gq, kNeedsAccumGradQ
		// where the output type is not the accumulator's; its blocks'
		// padding not counted), beside the rows' delta: from the
		// kernel's source, not measured.
		o.freeScratch(o.scratch(rows*4, Stats))
		o.freeScratch(o.scratch(s.Elems(q)*4, Grad))
	default:
		o.freeScratch(o.scratch(rows*4, Stats))
	}
	for _, e := range expanded {
		o.freeScratch(e)
	}
	o.freeScratch(c)
}

// Flash attention on a head dim that is not a multiple of 8
// (aten/src/ATen/native/transformers/attention.cpp,
// scaled_dot_product_attention's flash case): pad_last_dim<8, false> pads
// q, k and v with zeros to the next multiple of 8 (at::pad, a new
// contiguous tensor each), the kernel runs on the padded copies and saves
// them, not q, k and v, and post_process_flash_output slices its padded
// output back to the head dim, a view that keeps the padded storage. In
// the backward, SliceBackward writes the output's gradient into a padded
// zero tensor, the kernel makes padded gradients of q, k and v, and
// ConstantPadNdBackward narrows each into a new tensor of its own dims.
//
// Worked example: mobilevit_s at batch 32 under AMP, its first
// transformer's attention on [128, 4, 256, 36] float16: q, k and v are
// views of the qkv projection's 28.3 MB output, padded to 40 into three
// 10.5 MB copies; the output takes 10.5 MB, and timm's
// x.transpose(1, 2).reshape(B, N, C) copies its 9.4 MB slice
// (calibration/results/timm_fresh32_traces.jsonl.gz, attention.py:124
// and :139). The projection's output is then freed as the attention
// module returns, where saving q, k and v kept it: 13.7 MB more alive
// after each such layer's forward.

// padded reports whether value x's last dim is not a multiple of 8.
func padded(s *ir.Shapes, x ir.ValueID) bool {
	d := s.Dims[x]
	return len(d) > 0 && d[len(d)-1]%8 != 0
}

// padTo8 rounds n up to a multiple of 8.
func padTo8(n int64) int64 { return (n + 7) / 8 * 8 }

// paddedElems returns the elements of value x with its last dim padded
// to a multiple of 8.
func paddedElems(s *ir.Shapes, x ir.ValueID) int64 {
	d := s.Dims[x]
	last := max(d[len(d)-1], 1)
	return s.Elems(x) / last * padTo8(last)
}

// paddedFlashBackward emits the backward of flash attention on padded
// head dims (above), in the order of mobilevit_s's trace: SliceBackward's
// padded gradient of the output; _flash_attention_backward's contiguous
// copies of it and of the saved padded output (both strided in the
// kernel's (B, L, H, D) order), the kernel's padded gradients of q, k and
// v (of all three: autograd drops those no input needs), its rows' delta
// and its float32 accumulator of q's gradient (the head dim rounded up to
// 32; FlashAttention-2 may round the rows to 128 too, which mobilevit_s's
// 256 tokens cannot show), and the expanded k and v gradients of
// grouped-query attention; then, once the node has let its saved tensors
// go, ConstantPadNdBackward narrows v's, k's and q's padded gradients,
// each into a new one of its own dims.
func paddedFlashBackward(o *bwdOp) {
	n, s := o.n, o.s
	y := o.outs[0]
	q := n.Inputs[0]
	size := o.low().Size()
	gy := o.scratch(paddedElems(s, y)*size, Grad)
	// SliceBackward lets the unpadded incoming gradient go once it has
	// copied it in.
	if o.data[y] && o.slot[y] >= 0 {
		o.unref(o.grads[o.slot[y]].st)
		o.slot[y] = -1
	}
	copies := []int32{o.scratch(paddedElems(s, y)*size, Copy), o.scratch(paddedElems(s, y)*size, Copy)}
	// The kernel makes all three padded gradients; autograd drops those
	// of inputs that need none once the node returns.
	grads := make([]int32, 3)
	var dropped []int32
	for j, x := range n.Inputs[:3] {
		grads[j] = -1
		switch {
		case !padded(s, x):
			o.fresh(x)
		case o.rg[x]:
			grads[j] = o.alloc(paddedElems(s, x)*size, Grad, x)
		default:
			dropped = append(dropped, o.scratch(paddedElems(s, x)*size, Grad))
		}
	}
	d := s.Dims[q]
	rows := s.Elems(q) / max(d[len(d)-1], 1)
	delta := o.scratch(rows*4, Stats)
	acc := o.scratch(rows*((padTo8(d[len(d)-1])+31)/32*32)*4, Grad)
	var expanded []int32
	if n.IntAttr("gqa", 0) != 0 {
		for _, x := range n.Inputs[1:3] {
			expanded = append(expanded, o.scratch(paddedElems(s, x)*int64(groups(s, n))*size, Grad))
		}
	}
	for _, b := range slices.Concat([]int32{acc, delta}, expanded, copies, []int32{gy}, dropped) {
		o.freeScratch(b)
	}
	for j := 2; j >= 0; j-- {
		if grads[j] >= 0 {
			o.later(grads[j], n.Inputs[j], false)
		}
	}
}

// learnedBias reports whether attention node n adds a bias that is a
// parameter or is computed from parameters (TinyViT's and BEiT's relative
// position biases, passed as the kernel's attn_mask), not a mask of
// positions made from shapes, which transformers turn into is_causal or
// drop.
func learnedBias(b *builder, n *ir.Node) bool {
	if len(n.Inputs) < 4 || n.Inputs[3] == ir.NoValue {
		return false
	}
	m := n.Inputs[3]
	return b.param[m] || b.derived[m]
}

// groups returns the query heads a key head of grouped-query attention
// node n serves: q's heads over k's.
func groups(s *ir.Shapes, n *ir.Node) int {
	q, k := s.Dims[n.Inputs[0]], s.Dims[n.Inputs[1]]
	if len(q) < 3 || len(k) < 3 || k[len(k)-3] == 0 {
		return 1
	}
	return int(max(q[len(q)-3]/k[len(k)-3], 1))
}

// Grouped-query attention in float32 (enable_gqa with fewer key heads
// than query heads): neither the flash kernel (half types only) nor
// memory-efficient attention (no enable_gqa) takes it, and
// scaled_dot_product_attention runs _scaled_dot_product_attention_math
// (aten/src/ATen/native/transformers/attention.cpp): q·√s, k and v
// repeat_interleave'd to q's heads, k·√s, the L×S scores, an is_causal
// mask's float bias, _safe_softmax, and a matmul with v, each an eager op
// that autograd records. calibration/results/hf_fp32_traces.jsonl.gz
// (Llama, 12 query and 4 key heads, batch 1, 512 tokens) shows the 12 MiB
// scores twice and the saved softmax per layer.
//
// Worked example, that layer: q [1 12 512 64] float32 (1.5 MiB), k and v
// [1 4 512 64]. The forward keeps q·√s, k repeated and scaled, v repeated
// (1.5 MiB each) and the softmax (12 MiB); the scores before it (12 MiB)
// and the mask's bias (1 MiB) go when the op returns.

// mathKernel reports whether scaled_dot_product_attention node n runs
// _scaled_dot_product_attention_math: grouped-query attention in float32
// outside autocast (above), or q, k and v of other than four dims (timm's
// Twins runs its windows' attention on [B, windows, heads, L, D]): every
// fused kernel takes 4-d inputs only (check_tensor_shapes,
// aten/src/ATen/native/transformers/sdp_utils_cpp.h). autocast says
// whether the node runs under it, dq is q's type.
func mathKernel(n *ir.Node, s *ir.Shapes, autocast bool, dq ir.DType) bool {
	if n.IntAttr("gqa", 0) != 0 && !autocast && dq == ir.Float32 {
		return true
	}
	for _, v := range n.Inputs[:3] {
		if len(s.Dims[v]) != 4 {
			return true
		}
	}
	return false
}

// mathBytes are the sizes of the math kernel's tensors: q scaled, k and v
// repeated to q's heads, the L×S scores, the mask's bias, the output; el
// the bytes of their elements.
type mathBytes struct{ q, k, v, scores, bias, out, el int64 }

// mathSizes returns the math kernel's tensor sizes for node n in types dt.
// On half inputs the kernel computes in float32: unless
// torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True) was set,
// it casts q, k and v up first (query_.to(at::kFloat), attention.cpp) and
// casts the output back to their type at the end.
func mathSizes(n *ir.Node, s *ir.Shapes, dt []ir.DType) mathBytes {
	q, k, v := n.Inputs[0], n.Inputs[1], n.Inputs[2]
	rep, el := int64(mathGroups(s, n)), int64(4)
	if dt[q] == ir.Float64 {
		el = 8
	}
	dq, sk := s.Dims[q], s.Dims[k][len(s.Dims[k])-2]
	rows := s.Elems(q) / max(dq[len(dq)-1], 1)
	dv := s.Dims[v]
	return mathBytes{q: s.Elems(q) * el, k: s.Elems(k) * rep * el, v: s.Elems(v) * rep * el,
		scores: rows * sk * el, bias: dq[len(dq)-2] * sk * el, out: rows * dv[len(dv)-1] * el, el: el}
}

// mathGroups returns the query heads that a key head serves in the math
// kernel: groups' for grouped-query attention (enable_gqa), else 1 (a k
// of fewer batch rows is broadcast as a view, not repeated).
func mathGroups(s *ir.Shapes, n *ir.Node) int {
	if n.IntAttr("gqa", 0) == 0 {
		return 1
	}
	return groups(s, n)
}

// upcast reports whether the math kernel casts node n's inputs up: they
// are half, or the node runs under autocast, whose wrapper casts them to
// float16 first (those casts are not simulated).
func upcast(n *ir.Node, dt []ir.DType, autocast bool) bool {
	return autocast || dt[n.Inputs[0]].Size() == 2
}

// mathAttentionForward emits the math kernel's forward: on half inputs
// their float32 copies (q_acc, k_acc, v_acc, locals until it returns),
// q·√s and k·√s (saved by the scores' matmul), the scores, the softmax
// (saved), the float32 output and its cast back, and the softmax's cast
// (the tuple's second tensor, which scaled_dot_product_attention drops);
// in float32 the same without the casts, v itself saved; with grouped
// heads, k and v repeated first.
//
// Worked example, Twins-SVT-S's first windowed attention at batch 8 under
// autocast: q, k and v [8 64 2 49 32] float16 (1.6 MiB each). The kernel
// casts each to float32 (3.2 MiB), keeps q·√s, k·√s, v's copy and the
// float32 softmax [8 64 2 49 49] (4.9 MiB) for its backward, where the
// flash kernel would have kept the float16 inputs, output and a logsumexp.
func mathAttentionForward(o *fwdOp) {
	n := o.n
	q, k, v, y := n.Inputs[0], n.Inputs[1], n.Inputs[2], o.out(0)
	m := mathSizes(n, o.s, o.dt)
	up := upcast(n, o.dt, o.lower)
	o.dt[y] = o.dt[q]
	if o.lower {
		o.dt[y] = o.low()
	}
	rep := int64(mathGroups(o.s, n))
	var acc []int32 // q_acc, k_acc (and v_acc where repeated): locals until it returns
	va := int32(-1)
	if up {
		acc = append(acc, o.alloc(m.q, Cast, q), o.alloc(m.k/rep, Cast, k))
		va = o.alloc(m.v/rep, Cast, v)
	}
	o.own(o.alloc(m.q, Activation, ir.NoValue)) // q·√s
	var bias int32 = -1
	if n.IntAttr("masked", 0) != 0 {
		// is_causal's float bias: a bool L×S of ones, its tril, and
		// convert_boolean_attn_mask's where() between two scalars
		// (calibration/results/hf_fp32_traces.jsonl.gz).
		ls := m.bias / m.el
		ones := o.alloc(ls, Activation, ir.NoValue)
		tril := o.alloc(ls, Activation, ir.NoValue)
		o.unref(ones)
		zero := o.alloc(m.el, Scalar, ir.NoValue)
		inf := o.alloc(m.el, Scalar, ir.NoValue)
		bias = o.alloc(m.bias, Activation, ir.NoValue)
		o.unref(inf)
		o.unref(zero)
		o.unref(tril)
	}
	kr := int32(-1) // k repeated: a local until the kernel returns
	if rep > 1 {
		kr = o.alloc(m.k, Activation, ir.NoValue)
		o.own(o.alloc(m.v, Activation, ir.NoValue)) // v repeated
		o.own(o.alloc(m.k, Activation, ir.NoValue)) // k·√s
		if va >= 0 {
			acc = append(acc, va)
		}
	} else {
		o.own(o.alloc(m.k, Activation, ir.NoValue)) // k·√s
		switch {
		case va >= 0:
			o.own(va)
		case o.contig[v]:
			o.save(v)
		default:
			// matmul folds v's batch dims for bmm: a strided v (a
			// view of a packed projection) is copied (reshape), and
			// bmm saves the copy, not v.
			o.own(o.alloc(m.v, Activation, ir.NoValue))
		}
	}
	sc := o.alloc(m.scores, Activation, ir.NoValue)
	o.own(o.alloc(m.scores, Activation, ir.NoValue)) // the softmax
	// _safe_softmax then finds the rows the mask emptied: scores ==
	// -inf (a bool of the scores' size), all() along the row, a zero
	// scalar, and zeroes those rows of the softmax
	// (calibration/results/hf_fp32_traces.jsonl.gz: 3 MiB of bool
	// beside Llama's 12 MiB scores).
	el := m.scores / m.el
	masked := o.alloc(el, Activation, ir.NoValue)
	rows := o.alloc(el/max(o.s.Dims[k][len(o.s.Dims[k])-2], 1), Activation, ir.NoValue)
	o.unref(o.alloc(m.el, Scalar, ir.NoValue))
	o.unref(rows)
	o.unref(masked)
	o.unref(sc)
	if up {
		// make_tuple(matmul(attn, v).to(origin), attn.to(origin)):
		// its arguments evaluated right to left, as GCC does.
		a := o.alloc(m.scores/m.el*o.dt[y].Size(), Cast, ir.NoValue)
		y32 := o.alloc(m.out, Activation, ir.NoValue)
		o.newOut(0, Activation)
		o.unref(y32)
		o.unref(a)
		for _, st := range acc {
			o.unref(st)
		}
	} else {
		o.newOut(0, Activation)
	}
	if kr >= 0 {
		o.unref(kr)
	}
	if bias >= 0 {
		o.unref(bias)
	}
}

// mathAttentionBackward emits the math kernel's backward, its ops' own in
// autograd's order: the output's cast back (on half inputs), the gradients
// of the softmax and of v (the second matmul), of the scores, of q·√s and
// k·√s (the first matmul), of k and then q (the scalings), and the casts
// down to v's, k's and q's types; with grouped heads, the repeated heads'
// gradients summed back to k's and v's.
func mathAttentionBackward(o *bwdOp) {
	n := o.n
	q, k, v := n.Inputs[0], n.Inputs[1], n.Inputs[2]
	m := mathSizes(n, o.s, o.dt)
	if mathGroups(o.s, n) > 1 {
		mathGroupedBackward(o, m)
		return
	}
	if !upcast(n, o.dt, o.autocast()) {
		ga := o.scratch(m.scores, Grad)
		o.fresh(v)
		gs := o.scratch(m.scores, Grad)
		o.freeScratch(ga)
		gq := o.scratch(m.q, Grad)
		gk := o.scratch(m.k, Grad)
		o.freeScratch(gs)
		o.fresh(k)
		o.freeScratch(gk)
		o.fresh(q)
		o.freeScratch(gq)
		return
	}
	g32 := o.scratch(m.out, Grad)
	ga := o.scratch(m.scores, Grad)
	gv := o.scratch(m.v, Grad)
	o.freeScratch(g32)
	gs := o.scratch(m.scores, Grad)
	o.freeScratch(ga)
	gqs := o.scratch(m.q, Grad)
	gks := o.scratch(m.k, Grad)
	o.freeScratch(gs)
	gk := o.scratch(m.k, Grad)
	o.freeScratch(gks)
	gq := o.scratch(m.q, Grad)
	o.freeScratch(gqs)
	o.fresh(v)
	o.freeScratch(gv)
	o.fresh(k)
	o.freeScratch(gk)
	o.fresh(q)
	o.freeScratch(gq)
}

// mathGroupedBackward emits the math kernel's backward on grouped heads
// (float32 inputs outside autocast, the only grouped case mathKernel
// sends here), node by node as calibration/results/hf_fp32_traces.jsonl.gz
// shows it (Llama, each layer): each bmm's backward makes mat2's gradient
// before self's; the softmax's backward takes a transient of the scores'
// size besides its result; and each inner node drops its incoming
// gradient and what it saved when it returns (the second matmul v
// repeated, the softmax its result, the first q·√s and k·√s), before the
// next one runs. The repeated heads' gradients are summed back to k's and
// v's.
func mathGroupedBackward(o *bwdOp, m mathBytes) {
	n := o.n
	q, k, v := n.Inputs[0], n.Inputs[1], n.Inputs[2]
	saved := slices.Clone(o.saved[n.ID]) // q·√s, v repeated, k·√s, the softmax (mathAttentionForward)
	drop := func(i ...int) {
		if len(saved) != 4 {
			return // not the forward's four: released as the node returns
		}
		for _, j := range i {
			o.dropSaved(saved[j])
		}
	}
	gv := o.scratch(m.v, Grad)      // attnᵀ·g
	ga := o.scratch(m.scores, Grad) // g·vᵀ
	o.dropIncoming()
	drop(1)
	gs := o.scratch(m.scores, Grad) // _softmax_backward_data
	o.freeScratch(o.scratch(m.scores, Grad))
	o.freeScratch(ga)
	drop(3)
	gks := o.scratch(m.k, Grad) // (k·√s)ᵀ's
	gqs := o.scratch(m.q, Grad) // q·√s's
	o.freeScratch(gs)
	drop(0, 2)
	gk := o.scratch(m.k, Grad) // the repeated k's, √s·gks
	o.freeScratch(gks)
	o.fresh(v)
	o.freeScratch(gv)
	o.fresh(k)
	o.freeScratch(gk)
	o.fresh(q)
	o.freeScratch(gqs)
}
