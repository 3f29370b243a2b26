// The shape rules of the ops that rearrange tensors or compute shapes, and that
// fold small integer contents: Concat, Constant, ConstantOfShape, Expand,
// Flatten, Gather, Range, Reshape, Shape, Slice, Split, Squeeze and Unsqueeze.

package ir

import "math"

// inferConcat joins its inputs along axis.
func inferConcat(c *inferer) {
	first := c.dims(0)
	ax := c.axis(c.n.IntAttr("axis", 0), len(first))
	if c.err != nil {
		return
	}
	d := c.alloc(len(first))
	copy(d, first)
	d[ax] = 0
	for k := range c.n.Inputs {
		x := c.dims(k)
		if len(x) != len(first) {
			c.fail("input %d has rank %d, input 0 rank %d", k, len(x), len(first))
			return
		}
		for i := range x {
			if i != ax && x[i] != first[i] {
				c.fail("input %d dims %v do not match input 0 dims %v off axis %d", k, x, first, ax)
				return
			}
		}
		d[ax] = c.add(d[ax], x[ax])
	}
	dt := c.dtype(0)
	c.set(0, dt, d)
	if len(d) != 1 || d[0] > maxSmall || c.err != nil {
		return
	}
	// Unknown contents (joinData's nil) set nothing: setData would take nil
	// floats for an empty list.
	if isFloat(dt) {
		if f := joinData(c, c.floats); f != nil {
			c.setData(0, nil, f)
		}
	} else if d := joinData(c, c.ints); d != nil {
		c.setData(0, d, nil)
	}
}

// joinData concatenates the folded contents of all inputs, or returns nil when
// one is unknown.
func joinData[T int64 | float64](c *inferer, contents func(k int) ([]T, bool)) []T {
	var out []T
	for k := range c.n.Inputs {
		x, ok := contents(k)
		if !ok {
			return nil
		}
		out = append(out, x...)
	}
	if out == nil {
		out = []T{}
	}
	return out
}

// inferConstant gives a Constant node's output the dims and contents of its value.
func inferConstant(c *inferer) {
	dt, dims, ints, floats, ok := constantOf(c.n.Attrs)
	if !ok {
		c.fail("no value attribute")
		return
	}
	c.set(0, dt, dims)
	v := c.out(0)
	if v != NoValue {
		if n, _ := elemsOK(dims, dt); n == 0 && ints == nil && !isFloat(dt) {
			// An empty integer tensor (the shape of a scalar, for
			// ConstantOfShape) is known: it holds nothing.
			ints = []int64{}
		}
		c.s.Data[v], c.s.floats[v] = ints, floats
	}
}

// inferConstantOfShape makes a tensor of the shape its input holds.
func inferConstantOfShape(c *inferer) {
	shape, ok := c.ints(0)
	if !ok {
		c.set(0, constantOfShapeType(c), c.declared(0, c.unknown(0)))
		return
	}
	d := c.alloc(len(shape))
	copy(d, shape)
	dt := constantOfShapeType(c)
	c.set(0, dt, d)
	if n, _ := elemsOK(d, dt); c.err != nil || n > maxSmall {
		return
	}
	var ints []int64
	var floats []float64
	if a, ok := c.n.Attr("value"); ok && a.Kind == AttrTensor {
		ints, floats = a.Data, a.FData
	}
	if len(ints) == 0 && len(floats) == 0 {
		ints = []int64{0}
	}
	if len(floats) > 0 {
		f := make([]float64, product(d))
		for i := range f {
			f[i] = floats[0]
		}
		c.setData(0, nil, f)
		return
	}
	data := make([]int64, product(d))
	for i := range data {
		data[i] = ints[0]
	}
	c.setData(0, data, nil)
}

// constantOfShapeType is the dtype of ConstantOfShape's value (float32 by
// default).
func constantOfShapeType(c *inferer) DType {
	if a, ok := c.n.Attr("value"); ok && a.Kind == AttrTensor {
		return a.DType
	}
	return Float32
}

// inferExpand broadcasts the input to the shape its second input holds.
func inferExpand(c *inferer) {
	shape, ok := c.ints(1)
	if !ok {
		c.set(0, c.dtype(0), c.declared(0, c.unknown(1)))
		return
	}
	c.set(0, c.dtype(0), c.broadcast(c.dims(0), shape))
}

// inferTile repeats the input along each axis: dims[i] × repeats[i]
// (torch's x.repeat(*repeats), which torch.onnx exports as Tile).
func inferTile(c *inferer) {
	reps, ok := c.ints(1)
	if !ok {
		c.set(0, c.dtype(0), c.declared(0, c.unknown(1)))
		return
	}
	x := c.dims(0)
	if len(reps) != len(x) {
		c.fail("repeats %v for an input of %d dims: Tile takes one repeat a dim", reps, len(x))
		return
	}
	d := c.alloc(len(x))
	for i := range x {
		if reps[i] < 0 {
			c.fail("repeat %d on dim %d: repeats are 0 or more", reps[i], i)
			return
		}
		d[i] = c.mul(x[i], reps[i])
	}
	c.set(0, c.dtype(0), d)
}

// inferGatherElements picks one entry of the data for each index, along
// axis: the output has the indices' dims and the data's type (BERT's
// torch.gather of its token_type_ids buffer by position).
func inferGatherElements(c *inferer) {
	x, idx := c.dims(0), c.dims(1)
	c.axis(c.n.IntAttr("axis", 0), len(x))
	if c.err != nil {
		return
	}
	if len(idx) != len(x) {
		c.fail("indices of %d dims for data of %d: GatherElements takes indices of the data's rank", len(idx), len(x))
		return
	}
	d := c.alloc(len(idx))
	copy(d, idx)
	c.set(0, c.dtype(0), d)
}

// inferGather picks entries along axis: dims[:axis] + indices dims + dims[axis+1:].
func inferGather(c *inferer) {
	x, idx := c.dims(0), c.dims(1)
	ax := c.axis(c.n.IntAttr("axis", 0), len(x))
	if c.err != nil {
		return
	}
	d := c.alloc(len(x) - 1 + len(idx))
	copy(d, x[:ax])
	copy(d[ax:], idx)
	copy(d[ax+len(idx):], x[ax+1:])
	c.set(0, c.dtype(0), d)
	data, okd := c.ints(0)
	ind, oki := c.ints(1)
	if len(x) != 1 || !okd || !oki || isFloat(c.dtype(0)) {
		return
	}
	out := make([]int64, len(ind))
	for i, j := range ind {
		if j < 0 {
			j += x[0]
		}
		if j < 0 || j >= x[0] {
			c.fail("index %d out of range for dim %d", ind[i], x[0])
			return
		}
		out[i] = data[j]
	}
	c.setData(0, out, nil)
}

// inferRange is Range(start, limit, delta): ceil((limit-start)/delta) elements.
func inferRange(c *inferer) {
	var v [3]float64
	for k := range v {
		f, ok := c.floats(k)
		if !ok || len(f) != 1 {
			c.set(0, c.dtype(0), c.declared(0, c.unknown(k)))
			return
		}
		v[k] = f[0]
	}
	if v[2] == 0 {
		c.fail("delta is zero")
		return
	}
	count := math.Max(math.Ceil((v[1]-v[0])/v[2]), 0)
	if count > math.MaxInt64/16 {
		c.fail("%v elements overflow", count)
		return
	}
	n := int64(count)
	d := c.alloc(1)
	d[0] = n
	c.set(0, c.dtype(0), d)
	if n > maxSmall {
		return
	}
	f := make([]float64, n)
	for i := range f {
		f[i] = v[0] + float64(i)*v[2]
	}
	c.setData(0, nil, f)
}

// axes returns an op's axes: the attribute (older opsets) or input 1, which
// may be absent (nil). When the input's contents are unknown it sizes output 0
// from its declaration instead and returns false.
func (c *inferer) axes() ([]int64, bool) {
	if a, ok := c.n.Attr("axes"); ok {
		return a.Ints, true
	}
	axes, ok := c.ints(1)
	if !ok {
		c.set(0, c.dtype(0), c.declared(0, c.unknown(1)))
	}
	return axes, ok
}

// normAxes normalizes axes against rank r into a sorted mask.
func (c *inferer) normAxes(axes []int64, r int) []bool {
	mask := make([]bool, r)
	for _, a := range axes {
		i := c.axis(a, r)
		if c.err != nil {
			return nil
		}
		if mask[i] {
			c.fail("axis %d repeated in %v", a, axes)
			return nil
		}
		mask[i] = true
	}
	return mask
}

// inferReshape gives the input the shape its second input holds (0 copies a dim
// unless allowzero, -1 takes what is left).
func inferReshape(c *inferer) {
	x := c.dims(0)
	shape, ok := c.ints(1)
	var d []int64
	if ok {
		d = reshaped(c, x, shape)
	} else {
		d = c.declared(0, c.unknown(1))
	}
	if c.err != nil {
		return
	}
	in, _ := elemsOK(x, Undefined)
	if out, _ := elemsOK(d, Undefined); out != in {
		c.fail("cannot reshape %v (%d elements) to %v (%d elements)", x, in, d, out)
		return
	}
	c.set(0, c.dtype(0), d)
	c.passData()
}

// inferFlatten is the rule of Flatten: the dims before axis and from axis on
// each become one, [d0·…·d(axis-1), d(axis)·…]; the contents pass through.
func inferFlatten(c *inferer) {
	x := c.dims(0)
	a := c.n.IntAttr("axis", 1)
	if a < 0 {
		a += int64(len(x))
	}
	if a < 0 || a > int64(len(x)) {
		c.fail("axis %d is outside dims %v", c.n.IntAttr("axis", 1), x)
		return
	}
	d := c.alloc(2)
	d[0], d[1] = 1, 1
	for i, e := range x {
		if int64(i) < a {
			d[0] = c.mul(d[0], e)
		} else {
			d[1] = c.mul(d[1], e)
		}
	}
	c.set(0, c.dtype(0), d)
	c.passData()
}

// reshaped resolves a Reshape shape against input dims x.
func reshaped(c *inferer, x, shape []int64) []int64 {
	allowZero := c.n.IntAttr("allowzero", 0) != 0
	d := c.alloc(len(shape))
	infer, known := -1, int64(1)
	for i, e := range shape {
		switch {
		case e == -1 && infer < 0:
			infer = i
			continue
		case e == 0 && !allowZero:
			if i >= len(x) {
				c.fail("shape %v copies dim %d of %v", shape, i, x)
				return nil
			}
			e = x[i]
		case e < 0:
			c.fail("invalid shape %v", shape)
			return nil
		}
		d[i] = e
		known = c.mul(known, e)
	}
	if infer >= 0 {
		in, _ := elemsOK(x, Undefined)
		if known == 0 || in%known != 0 {
			c.fail("cannot reshape %v to %v", x, shape)
			return nil
		}
		d[infer] = in / known
	}
	return d
}

// inferShape returns the input's dims (from start to end) as data.
func inferShape(c *inferer) {
	x := c.dims(0)
	start, end := clampRange(c.n.IntAttr("start", 0), c.n.IntAttr("end", int64(len(x))), int64(len(x)))
	d := c.alloc(1)
	d[0] = max(end-start, 0)
	c.set(0, Int64, d)
	if d[0] <= maxSmall {
		c.setData(0, x[start:max(end, start)], nil)
	}
}

// clampRange normalizes negative start and end against n and clamps both into
// [0, n].
func clampRange(start, end, n int64) (int64, int64) {
	if start < 0 {
		start += n
	}
	if end < 0 {
		end += n
	}
	return min(max(start, 0), n), min(max(end, 0), n)
}

// inferSlice is Slice with starts, ends, axes and steps as inputs (opset 10+) or
// attributes (opset 1-9).
func inferSlice(c *inferer) {
	x := c.dims(0)
	var starts, ends, axes, steps []int64
	known := true
	if a, ok := c.n.Attr("starts"); ok {
		starts, ends, axes = a.Ints, c.n.IntsAttr("ends"), c.n.IntsAttr("axes")
	} else if c.in(1) == NoValue || c.in(2) == NoValue {
		c.fail("starts and ends are missing")
		return
	} else {
		var ok1, ok2, ok3, ok4 bool
		starts, ok1 = c.ints(1)
		ends, ok2 = c.ints(2)
		axes, ok3 = c.ints(3)
		steps, ok4 = c.ints(4)
		known = ok1 && ok2 && ok3 && ok4
	}
	if !known {
		c.set(0, c.dtype(0), c.declared(0, "the starts, ends, axes or steps are unknown"))
		return
	}
	if len(ends) != len(starts) || (axes != nil && len(axes) != len(starts)) || (steps != nil && len(steps) != len(starts)) || (axes == nil && len(starts) > len(x)) {
		c.fail("starts %v, ends %v, axes %v and steps %v differ in length or exceed rank %d", starts, ends, axes, steps, len(x))
		return
	}
	d := c.alloc(len(x))
	copy(d, x)
	first := make([]int64, len(x)) // by axis, for folding
	step := make([]int64, len(x))
	for i := range step {
		step[i] = 1
	}
	for j := range starts {
		i := j
		if axes != nil {
			i = c.axis(axes[j], len(x))
		}
		s := int64(1)
		if steps != nil {
			s = steps[j]
		}
		if c.err != nil {
			return
		}
		if s == 0 {
			c.fail("step is zero")
			return
		}
		d[i], first[i] = sliceLen(starts[j], ends[j], s, x[i])
		step[i] = s
	}
	c.set(0, c.dtype(0), d)
	// Small integer contents of any rank fold (the pads that an export of
	// F.pad reverses with a Slice of step -1 on a [-1, 2] view).
	if data := c.s.Data[c.in(0)]; data != nil && !isFloat(c.dtype(0)) && c.err == nil && int64(len(data)) == product(x) {
		c.setData(0, gatherIndex(data, d, func(idx []int64) int64 {
			flat := int64(0)
			for i, k := range idx {
				flat = flat*x[i] + first[i] + k*step[i]
			}
			return flat
		}), nil)
	}
}

// gatherIndex returns a row-major tensor of dims out whose element at
// index idx is data[flat(idx)]: the contents of a slice or a transpose of
// small folded data.
func gatherIndex(data, out []int64, flat func(idx []int64) int64) []int64 {
	n := product(out)
	res := make([]int64, 0, n)
	idx := make([]int64, len(out))
	for range n {
		res = append(res, data[flat(idx)])
		for i := len(out) - 1; i >= 0; i-- {
			if idx[i]++; idx[i] < out[i] {
				break
			}
			idx[i] = 0
		}
	}
	return res
}

// sliceLen returns the number of elements that Slice takes from a dim of size n,
// and the index of the first one.
func sliceLen(start, end, step, n int64) (count, first int64) {
	if start < 0 {
		start = max(start, math.MinInt64+n) + n
	}
	if end < 0 {
		end = max(end, math.MinInt64+n) + n
	}
	if step > 0 {
		start, end = min(max(start, 0), n), min(max(end, 0), n)
		if end <= start {
			return 0, start
		}
		return (end-start-1)/step + 1, start
	}
	start, end = min(max(start, 0), n-1), min(max(end, -1), n-1)
	if start <= end {
		return 0, start
	}
	if step == math.MinInt64 {
		return 1, start
	}
	return (start-end-1)/-step + 1, start
}

// inferSplit divides the input along axis into the outputs, by the 'split'
// attribute (opset < 13), the second input (opset 13+), num_outputs (opset 18+)
// or evenly.
func inferSplit(c *inferer) {
	x := c.dims(0)
	ax := c.axis(c.n.IntAttr("axis", 0), len(x))
	if c.err != nil {
		return
	}
	outs := len(c.n.Outputs)
	sizes := c.n.IntsAttr("split")
	if sizes == nil {
		s, ok := c.ints(1)
		if !ok {
			splitDeclared(c, x, ax)
			return
		}
		sizes = s
	}
	if sizes == nil {
		sizes = make([]int64, outs)
		chunk := x[ax] / int64(outs)
		if num := c.n.IntAttr("num_outputs", 0); num > 0 {
			chunk = (x[ax] + num - 1) / num // the last output takes the rest
		} else if x[ax]%int64(outs) != 0 {
			c.fail("dim %d of size %d does not split evenly into %d outputs", ax, x[ax], outs)
			return
		}
		for k := range sizes {
			sizes[k] = min(chunk, x[ax]-chunk*int64(k))
		}
	}
	var sum int64
	for _, s := range sizes {
		if s < 0 {
			sum = -1
			break
		}
		sum = c.add(sum, s)
	}
	if len(sizes) != outs || sum != x[ax] {
		c.fail("split sizes %v do not divide dim %d of %v into %d outputs", sizes, ax, x, outs)
		return
	}
	data, floats := c.s.Data[c.in(0)], c.s.floats[c.in(0)]
	fold := len(x) == 1 && data != nil
	var at int64
	for k, s := range sizes {
		d := c.alloc(len(x))
		copy(d, x)
		d[ax] = s
		c.set(k, c.dtype(0), d)
		if fold {
			c.setData(k, data[at:at+s], floatPart(floats, at, s))
		}
		at += s
	}
}

// floatPart returns f[at:at+n], or nil when f is nil.
func floatPart(f []float64, at, n int64) []float64 {
	if f == nil {
		return nil
	}
	return f[at : at+n]
}

// splitDeclared sizes Split's outputs from their declared dims along the axis
// when the split sizes are unknown; the other dims follow the input.
func splitDeclared(c *inferer, x []int64, ax int) {
	for k := range c.n.Outputs {
		decl := c.declared(k, c.unknown(1))
		if c.err != nil {
			return
		}
		d := c.alloc(len(x))
		copy(d, x)
		if len(decl) == len(x) {
			d[ax] = decl[ax]
		}
		c.set(k, c.dtype(0), d)
	}
}

// inferSqueeze removes the given axes of size 1, or all of them.
func inferSqueeze(c *inferer) {
	x := c.dims(0)
	axes, ok := c.axes()
	if !ok {
		return
	}
	mask := c.normAxes(axes, len(x))
	if c.err != nil {
		return
	}
	d := c.alloc(len(x))[:0]
	for i, e := range x {
		switch {
		case len(axes) == 0 && e == 1:
		case len(axes) > 0 && mask[i]:
			if e != 1 {
				c.fail("cannot squeeze axis %d of size %d", i, e)
				return
			}
		default:
			d = append(d, e)
		}
	}
	c.set(0, c.dtype(0), d)
	c.passData()
}

// inferUnsqueeze inserts axes of size 1.
func inferUnsqueeze(c *inferer) {
	x := c.dims(0)
	axes, ok := c.axes()
	if !ok {
		return
	}
	r := len(x) + len(axes)
	mask := c.normAxes(axes, r)
	if c.err != nil {
		return
	}
	d := c.alloc(r)
	j := 0
	for i := range d {
		if mask[i] {
			d[i] = 1
			continue
		}
		d[i] = x[j]
		j++
	}
	c.set(0, c.dtype(0), d)
	c.passData()
}

// passData copies the first input's folded contents to the first output.
func (c *inferer) passData() {
	if v := c.out(0); v != NoValue {
		c.s.Data[v], c.s.floats[v] = c.s.Data[c.in(0)], c.s.floats[c.in(0)]
	}
}

// constantOf returns the dtype, dims and small contents of a Constant's value.
func constantOf(attrs []Attr) (dt DType, dims []int64, ints []int64, floats []float64, ok bool) {
	for _, a := range attrs {
		switch a.Name {
		case "value":
			return a.DType, a.Dims, a.Data, a.FData, true
		case "value_int":
			return Int64, []int64{}, []int64{a.Int}, nil, true
		case "value_ints":
			return Int64, []int64{int64(len(a.Ints))}, small(a.Ints), nil, true
		case "value_float":
			f := []float64{a.Float}
			return Float32, []int64{}, wholes(f), f, true
		case "value_floats":
			f := small(a.Floats)
			return Float32, []int64{int64(len(a.Floats))}, wholes(f), f, true
		}
	}
	return Undefined, nil, nil, nil, false
}
