// Shape and dtype inference at one binding of the symbolic dims.
//
// Infer walks the nodes once, in their topological order, and gives every
// output its dims and dtype from the op's rule. Values indexed by ValueID live in
// slices; the dims of all values share a few large backing arrays, so a pass
// over a graph of thousands of nodes costs a few allocations.
//
// Shape arithmetic is folded on the way: whenever a Shape, Gather, Concat, Cast,
// arithmetic, … node produces a small integer tensor whose inputs are known, its
// contents are computed too, so that the Reshape, Expand, Resize, Slice and
// Range nodes that read them get concrete sizes. A small worked example, from the
// head of a detection export at Binding{Batch: 2, Height: 512, Width: 512}:
//
//	images                 [2 3 512 512]        bound from the binding
//	x = Conv(images, W)    [2 144 64 64]        W is [144 3 …], strides 8
//	s = Shape(x)           [4]                  Data [2 144 64 64]
//	b = Gather(s, 0)       []                   Data [2]
//	u = Unsqueeze(b, [0])  [1]                  Data [2]
//	t = Concat(u, [144], [-1])  [3]             Data [2 144 -1]
//	y = Reshape(x, t)      [2 144 4096]         -1 = 2·144·64·64 / (2·144)
//
// When a shape input cannot be folded (the dynamo exports keep their shape
// constants in external initializers, whose data Load never reads), the rule
// falls back on the output's declared dims (value_info), with symbolic dims
// bound. A declaration holds only at the sizes the graph was exported at, so
// the fallback is an error when the node's input differs from its own declared
// dims: such a graph infers at its export sizes and other batch sizes only.

package ir

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Binding gives the sizes that the symbolic dims of a graph's inputs take.
//
// Symbolic input dims named "batch", "height" and "width" are bound to Batch,
// Height and Width. The image input, which is the first graph input of rank 4,
// is also bound by position, whatever its dims are named and even where they
// are fixed: dim 0 takes Batch, dim 2 Height and dim 3 Width. So the inference
// exports, which fix 640x640, can still be evaluated at other image sizes. A
// zero field binds nothing: a fixed dim keeps its value and a symbolic dim that
// is left unbound is an error.
//
// Seq binds a text model's sequence length: symbolic dims named
// "sequence", "seq", "seq_len", "seqlen" or "sequence_length", and by
// position dim 1 of every integer graph input of rank 2 (input_ids,
// attention_mask and token_type_ids are [batch, sequence]), whose dim 0
// takes Batch.
type Binding struct {
	Batch, Height, Width, Seq int64
}

// Infer computes the dims and dtype of every value of g at binding b, folding
// small integer tensors into Shapes.Data on the way.
//
// It fails, with an error starting "ir: ", on an op it has no rule for, on
// inputs that break an op's rule (mismatched dims, a Reshape that changes the
// element count, an index out of range), on a shape input whose contents are
// unknown and whose output declares no shape, and on a negative dim or an int64
// overflow in any computed size or element count.
func (g *Graph) Infer(b Binding) (*Shapes, error) {
	if b.Batch < 0 || b.Height < 0 || b.Width < 0 || b.Seq < 0 {
		return nil, fmt.Errorf("ir: negative binding %+v", b)
	}
	n := len(g.Values)
	s := &Shapes{
		Dims:   make([][]int64, n),
		DTypes: make([]DType, n),
		Data:   make([][]int64, n),
		floats: make([][]float64, n),
	}
	c := &inferer{g: g, s: s, b: b, arena: make([]int64, 0, 4*n+64)}
	for i := range g.Values {
		if v := &g.Values[i]; v.Kind == Initializer {
			c.fixed(v)
		}
	}
	if err := c.bindInputs(); err != nil {
		return nil, err
	}
	ops := g.ops
	if len(ops) != len(g.Nodes) {
		// A Graph built by hand rather than by Load.
		ops = make([]opKind, len(g.Nodes))
		for i := range g.Nodes {
			ops[i] = shapeKindOf(&g.Nodes[i])
		}
	}
	for i := range g.Nodes {
		c.n = &g.Nodes[i]
		if err := c.node(ops[i]); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// inferer is the state of one Infer pass.
type inferer struct {
	g     *Graph
	s     *Shapes
	b     Binding
	arena []int64
	// syms are the symbolic dims bound so far, for declared-shape fallbacks.
	syms []symbol
	// n is the node being inferred.
	n *Node
	// err is the first error of a helper (set, arithmetic) in the current node.
	err error
}

// symbol is a bound symbolic dim.
type symbol struct {
	name  string
	value int64
}

// alloc returns a zeroed slice of k dims from the arena. The arena only grows,
// so its slots are zero when handed out.
func (c *inferer) alloc(k int) []int64 {
	if len(c.arena)+k > cap(c.arena) {
		c.arena = make([]int64, 0, max(1024, 4*k))
	}
	start := len(c.arena)
	c.arena = c.arena[:start+k]
	return c.arena[start : start+k : start+k]
}

// fixed sets the shape of a value with fixed declared dims (an initializer).
func (c *inferer) fixed(v *Value) {
	d := c.alloc(len(v.Dims))
	for i, x := range v.Dims {
		d[i] = x.Value
	}
	c.s.Dims[v.ID], c.s.DTypes[v.ID] = d, v.DType
	c.s.Data[v.ID], c.s.floats[v.ID] = v.Data, v.Floats
}

// bindInputs gives the graph inputs their dims; see Binding.
func (c *inferer) bindInputs() (err error) {
	image := NoValue
	for _, id := range c.g.Inputs {
		if len(c.g.Values[id].Dims) == 4 {
			image = id
			break
		}
	}
	seqUsed := false
	defer func() {
		if err == nil && c.b.Seq > 0 && !seqUsed {
			err = fmt.Errorf("ir: a sequence length of %d for a graph with no token input (its inputs: %s): give the image size instead", c.b.Seq, c.inputNames())
		}
	}()
	for _, id := range c.g.Inputs {
		v := &c.g.Values[id]
		if v.Dims == nil {
			return fmt.Errorf("ir: graph input %q declares no shape", v.Name)
		}
		d := c.alloc(len(v.Dims))
		for i, x := range v.Dims {
			d[i] = x.Value
			if bound := c.named(x.Param); bound > 0 {
				d[i] = bound
			}
			if id == image {
				if bound := [4]int64{c.b.Batch, 0, c.b.Height, c.b.Width}[i]; bound > 0 {
					d[i] = bound
				}
			}
			if len(v.Dims) == 2 && !v.DType.IsFloat() {
				if bound := [2]int64{c.b.Batch, c.b.Seq}[i]; bound > 0 {
					d[i] = bound
					seqUsed = seqUsed || i == 1
				}
			}
			if c.named(x.Param) > 0 && x.Param != "batch" && x.Param != "height" && x.Param != "width" {
				seqUsed = true
			}
			if d[i] < 0 {
				if len(v.Dims) == 2 && i == 1 && !v.DType.IsFloat() {
					return fmt.Errorf("ir: graph input %q: dim 1 (%q) is symbolic and is its sequence length, which is not given: give the sequence length (-seq, \"seq\")", v.Name, x.Param)
				}
				return fmt.Errorf("ir: graph input %q: dim %d (%q) is symbolic and the Binding gives no value for it", v.Name, i, x.Param)
			}
			if x.Param != "" {
				c.bindSymbol(x.Param, d[i])
			}
		}
		c.s.Dims[id], c.s.DTypes[id] = d, v.DType
		if _, ok := elemsOK(d, v.DType); !ok {
			return fmt.Errorf("ir: graph input %q: element count of %v overflows int64", v.Name, d)
		}
	}
	return nil
}

// inputNames lists the graph's inputs, for errors.
func (c *inferer) inputNames() string {
	var names []string
	for _, id := range c.g.Inputs {
		names = append(names, fmt.Sprintf("%q", c.g.Values[id].Name))
	}
	return strings.Join(names, ", ")
}

// named returns the binding of a symbolic dim by its name, or 0.
func (c *inferer) named(param string) int64 {
	switch param {
	case "batch":
		return c.b.Batch
	case "height":
		return c.b.Height
	case "width":
		return c.b.Width
	case "sequence", "seq", "seq_len", "seqlen", "sequence_length":
		return c.b.Seq
	}
	return 0
}

// bindSymbol records the value a symbolic dim took.
func (c *inferer) bindSymbol(name string, value int64) {
	for _, s := range c.syms {
		if s.name == name {
			return
		}
	}
	c.syms = append(c.syms, symbol{name, value})
}

// symbol returns the value of a bound symbolic dim, or -1.
func (c *inferer) symbol(name string) int64 {
	for _, s := range c.syms {
		if s.name == name {
			return s.value
		}
	}
	if v := c.named(name); v > 0 {
		return v
	}
	return -1
}

// nodeErr prefixes err with the current node.
func (c *inferer) nodeErr(err error) error {
	return fmt.Errorf("ir: node %q (%s): %w", c.n.Name, c.n.OpType, err)
}

// fail records a rule error for the current node; the first one is reported.
func (c *inferer) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
}

// in returns the k-th input of the current node, or NoValue when it is absent.
func (c *inferer) in(k int) ValueID {
	if k >= 0 && k < len(c.n.Inputs) {
		return c.n.Inputs[k]
	}
	return NoValue
}

// dims returns the dims of the k-th input (nil when it is absent).
func (c *inferer) dims(k int) []int64 {
	if v := c.in(k); v != NoValue {
		return c.s.Dims[v]
	}
	return nil
}

// dtype returns the dtype of the k-th input.
func (c *inferer) dtype(k int) DType {
	if v := c.in(k); v != NoValue {
		return c.s.DTypes[v]
	}
	return Undefined
}

// ints returns the folded integer contents of the k-th input, and whether they
// are known. An absent optional input is known and empty.
func (c *inferer) ints(k int) ([]int64, bool) {
	v := c.in(k)
	if v == NoValue {
		return nil, true
	}
	d := c.s.Data[v]
	return d, d != nil
}

// floats returns the folded contents of the k-th input as float64s; see ints.
func (c *inferer) floats(k int) ([]float64, bool) {
	v := c.in(k)
	if v == NoValue {
		return nil, true
	}
	return c.s.floatsOf(v)
}

// floatsOf returns the folded contents of v as float64s, and whether they are
// known.
func (s *Shapes) floatsOf(v ValueID) ([]float64, bool) {
	if f := s.floats[v]; f != nil {
		return f, true
	}
	d := s.Data[v]
	return convert[float64](d), d != nil
}

// out returns the k-th output of the current node, or NoValue.
func (c *inferer) out(k int) ValueID {
	if k < len(c.n.Outputs) {
		return c.n.Outputs[k]
	}
	return NoValue
}

// set gives output k its dtype and dims, checking them. The dims slice is kept,
// not copied: it must not be changed afterwards.
func (c *inferer) set(k int, dt DType, dims []int64) {
	v := c.out(k)
	if v == NoValue {
		return
	}
	for _, d := range dims {
		if d < 0 {
			c.fail("output %q: negative dim in %v", c.g.Values[v].Name, dims)
			return
		}
	}
	if _, ok := elemsOK(dims, dt); !ok {
		c.fail("output %q: size of %v overflows int64", c.g.Values[v].Name, dims)
		return
	}
	c.s.Dims[v], c.s.DTypes[v] = dims, dt
}

// setData gives output k folded contents: ints for an integer dtype, floats (and
// ints when all are whole) for a float one.
func (c *inferer) setData(k int, ints []int64, floats []float64) {
	v := c.out(k)
	if v == NoValue {
		return
	}
	if isFloat(c.s.DTypes[v]) {
		if floats == nil {
			floats = convert[float64](ints)
		}
		if c.s.DTypes[v] == Float32 {
			rounded := make([]float64, len(floats))
			for i, f := range floats {
				rounded[i] = float64(float32(f))
			}
			floats = rounded
		}
		c.s.floats[v], c.s.Data[v] = floats, wholes(floats)
		return
	}
	if ints == nil && floats != nil {
		ints = make([]int64, len(floats))
		for i, f := range floats {
			if math.IsNaN(f) || f < math.MinInt64 || f >= math.MaxInt64 {
				return
			}
			ints[i] = int64(f) // Cast truncates toward zero
		}
	}
	c.s.Data[v] = ints
}

// declared returns the declared dims of output k with symbolic dims bound: the
// fallback when a shape input has unknown contents. The declaration holds only
// for the inputs it was made for, so the first input's dims must match its own
// declared dims: a graph whose shape constants were baked at export cannot be
// evaluated at other sizes.
func (c *inferer) declared(k int, why string) []int64 {
	v := c.out(k)
	if v == NoValue {
		return nil
	}
	if in := c.in(0); !c.matchesDeclared(in) {
		c.fail("%s, and input %q has dims %v where the export declared %v: the export fixed these sizes; infer at the exported sizes or export with the shape constants inlined", why, c.g.Values[in].Name, c.s.Dims[in], dimsString(c.g.Values[in].Dims))
		return nil
	}
	val := &c.g.Values[v]
	if val.Dims == nil {
		c.fail("%s, and output %q declares no shape (add value_info, or export with the shape constants inlined)", why, val.Name)
		return nil
	}
	d := c.alloc(len(val.Dims))
	for i, x := range val.Dims {
		d[i] = x.Value
		if x.Param != "" {
			d[i] = c.symbol(x.Param)
		}
		if d[i] < 0 {
			c.fail("%s, and output %q declares dim %d as unknown", why, val.Name, i)
			return nil
		}
	}
	return d
}

// matchesDeclared reports whether the dims of v agree with its declared dims,
// symbolic dims bound, or v declares none.
func (c *inferer) matchesDeclared(v ValueID) bool {
	decl, dims := c.g.Values[v].Dims, c.s.Dims[v]
	if decl == nil {
		return true
	}
	if len(decl) != len(dims) {
		return false
	}
	for i, x := range decl {
		want := x.Value
		if x.Param != "" {
			want = c.symbol(x.Param)
		}
		if want >= 0 && want != dims[i] {
			return false
		}
	}
	return true
}

// dimsString formats declared dims, such as [batch 3 640 640].
func dimsString(dims []Dim) string {
	parts := make([]string, len(dims))
	for i, d := range dims {
		parts[i] = d.String()
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// unknown describes an input with unknown contents, for declared.
func (c *inferer) unknown(k int) string {
	return fmt.Sprintf("the contents of input %q are unknown (not a small constant, or external data, which is never read)", c.g.Values[c.in(k)].Name)
}

// add returns a+b, recording an overflow.
func (c *inferer) add(a, b int64) int64 {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		c.fail("int64 overflow in %d + %d", a, b)
	}
	return s
}

// mul returns a*b, recording an overflow.
func (c *inferer) mul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	p := a * b
	if p/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		c.fail("int64 overflow in %d * %d", a, b)
	}
	return p
}

// elemsOK returns the element count of dims and whether it, and its byte size
// with dtype dt, fit in int64. Negative dims are not checked here.
func elemsOK(dims []int64, dt DType) (int64, bool) {
	n, ok := int64(1), true
	for _, d := range dims {
		if n, ok = mulOK(n, d); !ok {
			return 0, false
		}
	}
	_, ok = mulOK(n, max(dt.Size(), 1))
	return n, ok
}

// isFloat reports whether dt is a floating-point type.
func isFloat(dt DType) bool {
	switch dt {
	case Float32, Float64, Float16, BFloat16:
		return true
	}
	return false
}

// axis normalizes a possibly negative axis of a rank-r tensor.
func (c *inferer) axis(a int64, r int) int {
	i := a
	if i < 0 {
		i += int64(r)
	}
	if i < 0 || i >= int64(r) {
		c.fail("axis %d out of range for rank %d", a, r)
		return 0
	}
	return int(i)
}

// ErrUnsupportedOp is wrapped by Infer's error for an op without a shape rule.
var ErrUnsupportedOp = errors.New("unsupported op")
