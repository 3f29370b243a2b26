// The kinds of shape rule, their dispatch (shapeRules, from each op's row in
// optable.go), and the rules of the elementwise and network ops: the
// same-shape unary ops, broadcasting arithmetic, comparisons, Where, Cast,
// Conv, Gemm, MatMul, attention, Dropout, the pools, BatchNormalization,
// LayerNormalization, ReduceSum, Resize, Pad and Transpose. Einsum's is in
// einsum.go; the rules of the ops that rearrange tensors or compute shapes
// are in shapeops.go.

package ir

import (
	"fmt"
	"math"
	"slices"
)

// opKind is the kind of an op's shape rule, from its row in the op table,
// resolved once at Load.
type opKind uint8

// The op kinds. Ops that keep their first input's shape and dtype share one.
const (
	opUnsupported opKind = iota
	opSameShape          // Identity, Sigmoid, Softmax, Relu, …
	opBinary             // Add, Sub, Mul, Div, Pow
	opCompare            // Less, Greater, Equal: broadcast, bool
	opRandomLike         // RandomUniformLike, RandomNormalLike: the input's dims, the dtype attribute's type
	opLayerNorm          // LayerNormalization: the input's dims; mean and inverse std with the normalized axes 1
	opWhere              // Where: the three inputs broadcast, the type of X
	opAttention          // ScaledDotProductAttention(q, k, v), the generic family's fusion: q's dims but the last, v's last
	opEinsum             // Einsum: the output labels' sizes (einsum.go)
	opMatMul             // MatMul: numpy's matmul, batch dims broadcast
	opPad                // Pad: each axis grown by its two pads
	opBatchNorm
	opCast
	opConcat
	opConstant
	opConstantOfShape
	opConv
	opDropout
	opFlatten
	opGemm
	opGlobalPool // GlobalAveragePool, GlobalMaxPool
	opPool       // MaxPool, AveragePool
	opExpand
	opGather
	opRange
	opReduceSum
	opReshape
	opResize
	opShape
	opSlice
	opSplit
	opSqueeze
	opTranspose
	opUnsqueeze
	opTile
	opGatherElements // GatherElements: the indices' dims, the data's type
	opPredicate      // IsNaN, IsInf: the input's dims, bool
)

// shapeKindOf returns the kind of node n's shape rule: its row's, or
// opUnsupported for an op outside the table.
func shapeKindOf(n *Node) opKind {
	r, _ := OpOf(n)
	return r.shape
}

// node infers the outputs of the current node, whose shape rule is of kind
// op.
func (c *inferer) node(op opKind) error {
	c.err = nil
	n := c.n
	r := shapeRules[op]
	for k := range r.minInputs {
		if c.in(k) == NoValue {
			return c.nodeErr(fmt.Errorf("input %d is missing: %s needs %d inputs", k, n.OpType, r.minInputs))
		}
	}
	if r.infer == nil {
		op := n.OpType
		if n.Domain != "" {
			op = n.Domain + "." + op
		}
		return fmt.Errorf("ir: node %q: %w %s: onnxmem has no shape rule for it; export with opset 17 and the training-mode, unfused graph (do_constant_folding=False, training=TrainingMode.TRAINING), or open an issue to add shape rules for %s", n.Name, ErrUnsupportedOp, op, op)
	}
	r.infer(c)
	for k, v := range n.Outputs {
		if v != NoValue && c.s.Dims[v] == nil && c.err == nil {
			c.fail("%s has no output %d", n.OpType, k)
		}
	}
	if c.err != nil {
		return c.nodeErr(c.err)
	}
	return nil
}

// shapeRule is a kind of shape rule: the number of leading inputs it
// requires, and the rule, which sets the current node's outputs or records
// an error (inferer.fail).
type shapeRule struct {
	minInputs int
	infer     func(c *inferer)
}

// shapeRules are the rules of the op kinds; opUnsupported has none.
var shapeRules = [...]shapeRule{
	opSameShape:       {1, inferSameShape},
	opBinary:          {2, inferBinary},
	opCompare:         {2, inferCompare},
	opRandomLike:      {1, inferRandomLike},
	opLayerNorm:       {2, inferLayerNorm},
	opWhere:           {3, inferWhere},
	opAttention:       {3, inferAttention},
	opEinsum:          {1, inferEinsum},
	opMatMul:          {2, inferMatMul},
	opPad:             {2, inferPad},
	opBatchNorm:       {5, inferBatchNorm},
	opCast:            {1, inferCast},
	opConcat:          {1, inferConcat},
	opConstant:        {0, inferConstant},
	opConstantOfShape: {1, inferConstantOfShape},
	opConv:            {2, inferConv},
	opDropout:         {1, inferDropout},
	opFlatten:         {1, inferFlatten},
	opGemm:            {2, inferGemm},
	opGlobalPool:      {1, inferGlobalPool},
	opPool:            {1, inferPool},
	opExpand:          {2, inferExpand},
	opGather:          {2, inferGather},
	opRange:           {3, inferRange},
	opReduceSum:       {1, inferReduce},
	opReshape:         {2, inferReshape},
	opResize:          {1, inferResize},
	opShape:           {1, inferShape},
	opSlice:           {1, inferSlice},
	opSplit:           {1, inferSplit},
	opSqueeze:         {1, inferSqueeze},
	opTranspose:       {1, inferTranspose},
	opUnsqueeze:       {1, inferUnsqueeze},
	opTile:            {2, inferTile},
	opGatherElements:  {2, inferGatherElements},
	opPredicate:       {1, inferPredicate},
}

// inferCompare is the rule of Less, Greater, LessOrEqual, GreaterOrEqual
// and Equal, and of the logical And, Or and Xor: the inputs
// broadcast, bool; small integer contents fold.
func inferCompare(c *inferer) {
	dims := c.broadcast(c.dims(0), c.dims(1))
	if dims == nil {
		return
	}
	c.set(0, Bool, dims)
	x, okx := c.ints(0)
	y, oky := c.ints(1)
	if n, _ := elemsOK(dims, Bool); okx && oky && n <= maxSmall && !isFloat(c.dtype(0)) {
		out := broadcastFold(dims, c.dims(0), c.dims(1), x, y, func(p, q int64) int64 {
			var r bool
			switch c.n.OpType {
			case "Less":
				r = p < q
			case "Greater":
				r = p > q
			case "LessOrEqual":
				r = p <= q
			case "GreaterOrEqual":
				r = p >= q
			case "And":
				r = p != 0 && q != 0
			case "Or":
				r = p != 0 || q != 0
			case "Xor":
				r = (p != 0) != (q != 0)
			default:
				r = p == q
			}
			if r {
				return 1
			}
			return 0
		})
		c.setData(0, out, nil)
	}
}

// inferAttention is the rule of ScaledDotProductAttention(q, k, v), the
// generic family's fusion: q's dims but the last, which is v's.
func inferAttention(c *inferer) {
	q, k, v := c.dims(0), c.dims(1), c.dims(2)
	if len(q) < 2 || len(v) != len(q) || len(k) != len(q) || k[len(k)-1] != q[len(q)-1] {
		c.fail("q of dims %v, k of dims %v and v of dims %v do not fit an attention", q, k, v)
		return
	}
	d := c.alloc(len(q))
	copy(d, q)
	d[len(d)-1] = v[len(v)-1]
	c.set(0, c.dtype(0), d)
}

// inferWhere is the rule of Where: the three inputs broadcast, the type of
// X; small integer contents fold.
func inferWhere(c *inferer) {
	d := c.broadcast(c.dims(0), c.dims(1))
	if d != nil {
		d = c.broadcast(d, c.dims(2))
	}
	if d != nil {
		c.set(0, c.dtype(1), d)
		whereFold(c, d)
	}
}

// inferLayerNorm is the rule of LayerNormalization: the input's dims; the
// mean and inverse std (outputs 1 and 2) have the normalized axes 1.
func inferLayerNorm(c *inferer) {
	x := c.dims(0)
	c.set(0, c.dtype(0), x)
	axis := int(c.n.IntAttr("axis", -1))
	if axis < 0 {
		axis += len(x)
	}
	if axis < 0 || axis >= len(x) {
		c.fail("axis %d out of the input's %d dims", c.n.IntAttr("axis", -1), len(x))
		return
	}
	st := c.alloc(len(x))
	for k := range st {
		st[k] = 1
		if k < axis {
			st[k] = x[k]
		}
	}
	for k := 1; k < min(len(c.n.Outputs), 3); k++ {
		c.set(k, Float32, st)
	}
}

// inferRandomLike is the rule of RandomUniformLike and RandomNormalLike:
// the input's dims, the dtype attribute's type.
func inferRandomLike(c *inferer) {
	c.set(0, DType(c.n.IntAttr("dtype", int64(c.dtype(0)))), c.dims(0))
}

// inferBatchNorm is the rule of BatchNormalization: the input's dims; the
// running or saved mean and variance (outputs 1 to 4) the scale's.
func inferBatchNorm(c *inferer) {
	c.set(0, c.dtype(0), c.dims(0))
	for k := 1; k < min(len(c.n.Outputs), 5); k++ {
		c.set(k, c.dtype(min(k+2, 4)), c.dims(1))
	}
}

// inferDropout is the rule of Dropout: the input's dims, and a bool mask of
// them.
func inferDropout(c *inferer) {
	c.set(0, c.dtype(0), c.dims(0))
	c.set(1, Bool, c.dims(0))
}

// inferSameShape passes the first input's dims, dtype and contents through.
func inferSameShape(c *inferer) {
	c.set(0, c.dtype(0), c.dims(0))
	if c.n.OpType == "Identity" {
		c.passData()
	}
}

// inferPredicate is the rule of IsNaN and IsInf: a bool of each element.
func inferPredicate(c *inferer) { c.set(0, Bool, c.dims(0)) }

// inferBinary is the rule of the broadcasting elementwise ops.
func inferBinary(c *inferer) {
	a, b := c.dims(0), c.dims(1)
	dims := c.broadcast(a, b)
	if dims == nil {
		return
	}
	dt := c.dtype(0)
	c.set(0, dt, dims)
	if n, _ := elemsOK(dims, dt); n > maxSmall || c.err != nil {
		return
	}
	if isFloat(dt) {
		x, okx := c.floats(0)
		y, oky := c.floats(1)
		if okx && oky {
			c.setData(0, nil, broadcastFold(dims, a, b, x, y, floatOp(c)))
		}
		return
	}
	x, okx := c.ints(0)
	y, oky := c.ints(1)
	if op := intOp(c); okx && oky && op != nil {
		if out := broadcastFold(dims, a, b, x, y, op); c.err == nil {
			c.setData(0, out, nil)
		}
	}
}

// broadcastFold applies op elementwise to small contents x of dims a and y of
// dims b, broadcast to dims.
func broadcastFold[T int64 | float64](dims, a, b []int64, x, y []T, op func(p, q T) T) []T {
	out := make([]T, product(dims))
	for i := range out {
		out[i] = op(x[broadcastIndex(dims, a, i)], y[broadcastIndex(dims, b, i)])
	}
	return out
}

// intOp returns the current node's arithmetic on int64s, which records
// overflow and division by zero; nil for ops that are not folded.
func intOp(c *inferer) func(p, q int64) int64 {
	switch c.n.OpType {
	case "Add":
		return c.add
	case "Sub":
		return func(p, q int64) int64 {
			if q == math.MinInt64 {
				c.fail("int64 overflow in %d - %d", p, q)
				return 0
			}
			return c.add(p, -q)
		}
	case "Mul":
		return c.mul
	case "Div":
		return func(p, q int64) int64 {
			if q == 0 || (p == math.MinInt64 && q == -1) {
				c.fail("integer division %d / %d", p, q)
				return 0
			}
			return p / q
		}
	case "Mod":
		// ONNX Mod with fmod 0: the remainder takes the divisor's sign.
		return func(p, q int64) int64 {
			if q == 0 {
				c.fail("integer modulo %d mod 0", p)
				return 0
			}
			m := p % q
			if m != 0 && (m < 0) != (q < 0) {
				m += q
			}
			return m
		}
	}
	return nil
}

// floatOp returns the current node's arithmetic on float64s.
func floatOp(c *inferer) func(p, q float64) float64 {
	switch c.n.OpType {
	case "Add":
		return func(p, q float64) float64 { return p + q }
	case "Sub":
		return func(p, q float64) float64 { return p - q }
	case "Mul":
		return func(p, q float64) float64 { return p * q }
	case "Div":
		return func(p, q float64) float64 { return p / q }
	}
	return math.Pow
}

// broadcastIndex maps the linear index i of a tensor of dims out to the index
// of the element it reads in a tensor of dims in broadcast to out.
func broadcastIndex(out, in []int64, i int) int {
	j, stride := 0, 1
	for k := 1; k <= len(out); k++ {
		d := int(out[len(out)-k])
		coord := i % d
		i /= d
		if k <= len(in) {
			if e := int(in[len(in)-k]); e != 1 {
				j += coord * stride
				stride *= e
			}
		}
	}
	return j
}

// product is the element count of small dims that are known to fit.
func product(dims []int64) int64 {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	return n
}

// broadcast returns the multidirectional broadcast of a and b.
func (c *inferer) broadcast(a, b []int64) []int64 {
	if len(a) < len(b) {
		a, b = b, a
	}
	if len(b) == 0 {
		return a
	}
	if slices.Equal(a[len(a)-len(b):], b) {
		return a
	}
	d := c.alloc(len(a))
	copy(d, a)
	off := len(a) - len(b)
	for i, y := range b {
		x := a[off+i]
		switch {
		case x == y || y == 1:
		case x == 1:
			d[off+i] = y
		default:
			c.fail("cannot broadcast %v and %v", a, b)
			return nil
		}
	}
	return d
}

// inferMatMul is numpy's matmul: [..., n, k] @ [..., k, m] is [..., n, m], the
// batch dims broadcast; a 1-D operand is a row (left) or a column (right)
// vector whose dim the output drops.
func inferMatMul(c *inferer) {
	a, b := c.dims(0), c.dims(1)
	if len(a) == 0 || len(b) == 0 {
		c.fail("MatMul of a scalar (dims %v and %v)", a, b)
		return
	}
	a1, b1 := len(a) == 1, len(b) == 1
	if a1 {
		a = []int64{1, a[0]}
	}
	if b1 {
		b = []int64{b[0], 1}
	}
	n, k, k2, m := a[len(a)-2], a[len(a)-1], b[len(b)-2], b[len(b)-1]
	if k != k2 {
		c.fail("MatMul of dims %v and %v: inner dims %d and %d differ", c.dims(0), c.dims(1), k, k2)
		return
	}
	batch := c.broadcast(a[:len(a)-2], b[:len(b)-2])
	if c.err != nil {
		return
	}
	d := c.alloc(len(batch) + 2)
	copy(d, batch)
	d[len(batch)], d[len(batch)+1] = n, m
	switch {
	case a1 && b1:
		d = d[:len(d)-2]
	case a1:
		d = append(d[:len(d)-2], m)
	case b1:
		d = d[:len(d)-1]
	}
	c.set(0, c.dtype(0), d)
}

// inferPad grows each axis of the input by its pads (input 1, [begins...,
// ends...], of the axes listed in input 3 or of all): negative pads crop.
func inferPad(c *inferer) {
	x := c.dims(0)
	pads, ok := c.ints(1)
	if !ok {
		c.fail("the pads (input 1) are not known: %s", c.unknown(1))
		return
	}
	axes := make([]int64, len(x))
	for i := range axes {
		axes[i] = int64(i)
	}
	if c.in(3) != NoValue {
		if axes, ok = c.ints(3); !ok {
			c.fail("the axes (input 3) are not known: %s", c.unknown(3))
			return
		}
	}
	if len(pads) != 2*len(axes) {
		c.fail("%d pads for %d axes: want two an axis", len(pads), len(axes))
		return
	}
	d := c.alloc(len(x))
	copy(d, x)
	for j, a := range axes {
		i := c.axis(a, len(x))
		if c.err != nil {
			return
		}
		d[i] += pads[j] + pads[j+len(axes)]
		if d[i] < 0 {
			c.fail("axis %d of size %d padded by %d and %d", i, x[i], pads[j], pads[j+len(axes)])
			return
		}
	}
	c.set(0, c.dtype(0), d)
}

// inferCast changes the dtype and converts folded contents.
func inferCast(c *inferer) {
	to := DType(c.n.IntAttr("to", int64(c.dtype(0))))
	c.set(0, to, c.dims(0))
	v := c.in(0)
	if isFloat(c.s.DTypes[v]) {
		if f, ok := c.s.floatsOf(v); ok {
			c.setData(0, nil, f)
		}
		return
	}
	if d := c.s.Data[v]; d != nil {
		c.setData(0, d, nil)
	}
}

// inferConv is the rule of Conv: [N C spatial…] * [M C/group k…] → [N M out…].
func inferConv(c *inferer) {
	x, w := c.dims(0), c.dims(1)
	if len(x) < 3 || len(w) != len(x) {
		c.fail("input dims %v and weight dims %v do not fit a convolution", x, w)
		return
	}
	group := c.n.IntAttr("group", 1)
	if group <= 0 || x[1] != c.mul(w[1], group) {
		c.fail("input has %d channels, weight %v with group %d expects %d", x[1], w, group, w[1]*group)
		return
	}
	d := c.alloc(len(x))
	d[0], d[1] = x[0], w[0]
	window(c, d, x, w[2:])
	c.set(0, c.dtype(0), d)
}

// inferGemm is the rule of Gemm: op(A) [M K] · op(B) [K N] (+ C, broadcast to
// [M N]) → [M N], op transposing when transA or transB is set.
func inferGemm(c *inferer) {
	a, b := c.dims(0), c.dims(1)
	// A of more than two dims (without transA) is a linear layer over its
	// last dim: the generic family fuses MatMul(x, Transpose(W)) + Add(b)
	// into such a Gemm, as eager PyTorch runs one linear.
	if len(a) > 2 && len(b) == 2 && c.n.IntAttr("transA", 0) == 0 {
		kb, n := b[0], b[1]
		if c.n.IntAttr("transB", 0) != 0 {
			kb, n = n, kb
		}
		if a[len(a)-1] != kb {
			c.fail("inner dims %d and %d of %v and %v differ", a[len(a)-1], kb, a, b)
			return
		}
		d := c.alloc(len(a))
		copy(d, a)
		d[len(d)-1] = n
		c.set(0, c.dtype(0), d)
		return
	}
	if len(a) != 2 || len(b) != 2 {
		c.fail("inputs of dims %v and %v are not matrices", a, b)
		return
	}
	m, k := a[0], a[1]
	if c.n.IntAttr("transA", 0) != 0 {
		m, k = k, m
	}
	kb, n := b[0], b[1]
	if c.n.IntAttr("transB", 0) != 0 {
		kb, n = n, kb
	}
	if k != kb {
		c.fail("inner dims %d and %d of %v and %v differ", k, kb, a, b)
		return
	}
	d := c.alloc(2)
	d[0], d[1] = m, n
	if c.in(2) != NoValue {
		bd := c.broadcast(d, c.dims(2))
		if bd == nil {
			return
		}
		if !slices.Equal(bd, d) {
			c.fail("C of dims %v does not broadcast to [%d %d]", c.dims(2), m, n)
			return
		}
	}
	c.set(0, c.dtype(0), d)
}

// inferGlobalPool is the rule of GlobalAveragePool: [N C spatial…] → [N C 1…].
func inferGlobalPool(c *inferer) {
	x := c.dims(0)
	if len(x) < 3 {
		c.fail("input dims %v have no spatial axes", x)
		return
	}
	d := c.alloc(len(x))
	d[0], d[1] = x[0], x[1]
	for i := 2; i < len(d); i++ {
		d[i] = 1
	}
	c.set(0, c.dtype(0), d)
}

// inferPool is the rule of MaxPool and AveragePool: [N C spatial…] → [N C out…]. A
// second MaxPool output (indices) has the same dims, as int64.
func inferPool(c *inferer) {
	x := c.dims(0)
	if len(x) < 3 {
		c.fail("input dims %v have no spatial axes", x)
		return
	}
	kernel := c.n.IntsAttr("kernel_shape")
	if len(kernel) != len(x)-2 {
		c.fail("kernel_shape %v does not fit input dims %v", kernel, x)
		return
	}
	d := c.alloc(len(x))
	d[0], d[1] = x[0], x[1]
	window(c, d, x, kernel)
	c.set(0, c.dtype(0), d)
	c.set(1, Int64, d)
}

// window fills the spatial dims d[2:] of a sliding window over x, from the
// node's kernel, strides, pads, dilations, auto_pad and ceil_mode.
func window(c *inferer, d, x, kernel []int64) {
	n := c.n
	rank := len(kernel)
	if ks := n.IntsAttr("kernel_shape"); ks != nil && !slices.Equal(ks, kernel) {
		c.fail("kernel_shape %v does not match weight dims %v", ks, kernel)
		return
	}
	strides, pads, dilations := n.IntsAttr("strides"), n.IntsAttr("pads"), n.IntsAttr("dilations")
	if (strides != nil && len(strides) != rank) || (pads != nil && len(pads) != 2*rank) || (dilations != nil && len(dilations) != rank) {
		c.fail("strides %v, pads %v or dilations %v do not fit %d spatial axes", strides, pads, dilations, rank)
		return
	}
	autoPad := "NOTSET"
	if a, ok := n.Attr("auto_pad"); ok && a.Kind == AttrString && a.Str != "" {
		autoPad = a.Str
	}
	ceil := n.IntAttr("ceil_mode", 0) != 0
	for i := range rank {
		in, k, s, dil := x[2+i], kernel[i], int64(1), int64(1)
		if strides != nil {
			s = strides[i]
		}
		if dilations != nil {
			dil = dilations[i]
		}
		if s <= 0 || dil <= 0 || k <= 0 {
			c.fail("kernel %v, strides %v and dilations %v must be positive", kernel, strides, dilations)
			return
		}
		span := c.add(c.mul(dil, k-1), 1) // the extent of one window
		switch autoPad {
		case "SAME_UPPER", "SAME_LOWER":
			d[2+i] = c.add(in, s-1) / s
		case "VALID":
			d[2+i] = max(c.add(in-span, s)/s, 0)
		case "NOTSET":
			var head, tail int64
			if pads != nil {
				head, tail = pads[i], pads[rank+i]
			}
			d[2+i] = outSize(c, c.add(c.add(in, head), tail), span, s, ceil, in)
			if ceil && d[2+i] > 0 && c.mul(d[2+i]-1, s) >= c.add(in, head) {
				d[2+i]-- // the last window must start inside the input or its head pad
			}
		default:
			c.fail("unknown auto_pad %q", autoPad)
			return
		}
	}
}

// outSize is the number of windows of extent span, stride s, over padded.
func outSize(c *inferer, padded, span, s int64, ceil bool, in int64) int64 {
	if padded < span {
		c.fail("window of extent %d does not fit input size %d (padded %d)", span, in, padded)
		return 0
	}
	if ceil {
		return (padded-span+s-1)/s + 1
	}
	return (padded-span)/s + 1
}

// inferReduce removes, or keeps as 1, the reduced axes (ReduceSum and
// ReduceMean).
func inferReduce(c *inferer) {
	x := c.dims(0)
	axes, ok := c.axes()
	if !ok {
		return
	}
	if len(axes) == 0 && c.n.IntAttr("noop_with_empty_axes", 0) != 0 {
		c.set(0, c.dtype(0), x)
		return
	}
	mask := c.normAxes(axes, len(x))
	if c.err != nil {
		return
	}
	keep := c.n.IntAttr("keepdims", 1) != 0
	d := c.alloc(len(x))[:0]
	for i, e := range x {
		switch {
		case len(axes) > 0 && !mask[i]:
			d = append(d, e)
		case keep:
			d = append(d, 1)
		}
	}
	c.set(0, c.dtype(0), d)
}

// inferResize scales the spatial dims: to sizes when given, else floor(dim·scale).
func inferResize(c *inferer) {
	x := c.dims(0)
	scalesAt, sizesAt := 2, 3
	if len(c.n.Inputs) == 2 { // opset 10: X, scales
		scalesAt, sizesAt = 1, -1
	}
	if a, ok := c.n.Attr("keep_aspect_ratio_policy"); ok && a.Str != "" && a.Str != "stretch" {
		c.fail("keep_aspect_ratio_policy %q is not supported", a.Str)
		return
	}
	axes := c.n.IntsAttr("axes")
	if axes == nil {
		axes = make([]int64, len(x))
		for i := range axes {
			axes[i] = int64(i)
		}
	}
	d := c.alloc(len(x))
	copy(d, x)
	sizes, sizesKnown := c.ints(sizesAt)
	scales, scalesKnown := c.floats(scalesAt)
	switch {
	case len(sizes) > 0:
		resizeAxes(c, d, axes, len(sizes), func(j int, _ int64) int64 { return sizes[j] })
	case len(scales) > 0:
		resizeAxes(c, d, axes, len(scales), func(j int, in int64) int64 {
			size := math.Floor(float64(in) * scales[j])
			if !(size >= 0 && size < math.MaxInt64) {
				c.fail("scale %v of dim %d gives size %v", scales[j], in, size)
				return 0
			}
			return int64(size)
		})
	case !sizesKnown:
		d = c.declared(0, c.unknown(sizesAt))
	case !scalesKnown:
		d = c.declared(0, c.unknown(scalesAt))
	default:
		c.fail("neither scales nor sizes are given")
		return
	}
	c.set(0, c.dtype(0), d)
}

// resizeAxes sets d[axes[j]] = size(j, d[axes[j]]) for n given entries.
func resizeAxes(c *inferer, d []int64, axes []int64, n int, size func(j int, in int64) int64) {
	if n != len(axes) {
		c.fail("%d sizes or scales for %d axes of dims %v", n, len(axes), d)
		return
	}
	for j, a := range axes {
		i := c.axis(a, len(d))
		if c.err != nil {
			return
		}
		d[i] = size(j, d[i])
	}
}

// inferTranspose permutes the dims (reverses them by default).
func inferTranspose(c *inferer) {
	x := c.dims(0)
	perm := c.n.IntsAttr("perm")
	d := c.alloc(len(x))
	if perm == nil {
		for i := range d {
			d[i] = x[len(x)-1-i]
		}
	} else {
		if len(perm) != len(x) {
			c.fail("perm %v does not fit dims %v", perm, x)
			return
		}
		seen := c.normAxes(perm, len(x))
		if c.err != nil || seen == nil {
			return
		}
		for i, p := range perm {
			d[i] = x[c.axis(p, len(x))]
		}
	}
	c.set(0, c.dtype(0), d)
	// Small integer contents fold: output dim i is input dim src[i].
	if data := c.s.Data[c.in(0)]; data != nil && !isFloat(c.dtype(0)) && c.err == nil && int64(len(data)) == product(x) {
		src := make([]int, len(x))
		for i := range src {
			src[i] = len(x) - 1 - i
			if perm != nil {
				src[i] = c.axis(perm[i], len(x))
			}
		}
		strides := make([]int64, len(x)) // of the input, row-major
		acc := int64(1)
		for i := len(x) - 1; i >= 0; i-- {
			strides[i] = acc
			acc *= x[i]
		}
		c.setData(0, gatherIndex(data, d, func(idx []int64) int64 {
			flat := int64(0)
			for i, k := range idx {
				flat += k * strides[src[i]]
			}
			return flat
		}), nil)
	}
}

// whereFold folds Where over small integer contents (shape arithmetic such
// as an Expand's -1 sizes): out = cond ? x : y, element by element.
func whereFold(c *inferer, dims []int64) {
	if n, _ := elemsOK(dims, c.dtype(1)); n > maxSmall || isFloat(c.dtype(1)) {
		return
	}
	cond, ok0 := c.ints(0)
	x, ok1 := c.ints(1)
	y, ok2 := c.ints(2)
	if !ok0 || !ok1 || !ok2 {
		return
	}
	out := make([]int64, product(dims))
	for i := range out {
		if cond[broadcastIndex(dims, c.dims(0), i)] != 0 {
			out[i] = x[broadcastIndex(dims, c.dims(1), i)]
		} else {
			out[i] = y[broadcastIndex(dims, c.dims(2), i)]
		}
	}
	c.setData(0, out, nil)
}
