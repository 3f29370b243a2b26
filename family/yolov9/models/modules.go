// The modules of models/common.py and models/yolo.py, each written as
// torch.onnx.export writes its training-mode forward.

package models

import (
	"fmt"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
)

// tensor is a tensor of the graph being built: its value name and channels.
type tensor = onnxbuild.T

// value is what a layer outputs: one tensor, or parts. CBLinear outputs the
// parts of its split; a folded ADown its two halves, which the Concat layer
// reading it takes in place of their cat.
type value struct {
	t     tensor
	parts []tensor
}

// graph is a model being built.
type graph struct {
	b    *onnxbuild.Builder
	nc   int64
	outs []value // the outputs of the layers built so far
	// sumAxes is the axes constant of CBFuse's ReduceSum, which the exporter
	// makes once and shares between all CBFuse layers.
	sumAxes string
}

// regMax is the number of distance bins per box side of the heads (DFL).
const regMax = 16

// argCount is the number of arguments of the module types that take a fixed
// number.
var argCount = map[kind]int{conv: 3, elan1: 3, repELAN: 4, adown: 1, aconv: 1, sppelan: 2}

// layer adds layer i, which reads ins, and returns its output. fold leaves an
// ADown's cat to the Concat layer that reads it.
func (g *graph) layer(i int, l layer, ins []value, fold bool) (value, error) {
	s := g.b.Layer(i)
	if n, ok := argCount[l.kind]; ok && len(l.args) != n {
		return value{}, fmt.Errorf("%d arguments, want %d", len(l.args), n)
	}
	one := func() (tensor, error) {
		if len(ins) != 1 || ins[0].parts != nil {
			return tensor{}, fmt.Errorf("reads %d values, want one tensor", len(ins))
		}
		return ins[0].t, nil
	}
	a := l.args
	switch l.kind {
	case silence:
		return ins[0], nil
	case upsample:
		x, err := one()
		return value{t: s.NearestUpsample(x, 2)}, err
	case concat:
		var xs []tensor
		for _, in := range ins {
			if in.parts != nil {
				xs = append(xs, in.parts...)
			} else {
				xs = append(xs, in.t)
			}
		}
		return value{t: s.Concat(xs...)}, nil
	case cbfuse:
		return g.cbfuse(s, l.args, ins)
	case detect, dualDetect:
		return value{}, g.head(s, l.kind == dualDetect, ins)
	}
	x, err := one()
	if err != nil {
		return value{}, err
	}
	switch l.kind {
	case conv:
		return value{t: s.Block(x, a[0], a[1], a[2])}, nil
	case elan1:
		return value{t: elan(s, x, a[0], a[1], func(s onnxbuild.Scope, x tensor) tensor { return s.Block(x, a[2], 3, 1) })}, nil
	case repELAN:
		return value{t: elan(s, x, a[0], a[1], func(s onnxbuild.Scope, x tensor) tensor {
			return s.Index(1).Block(repNCSP(s.Index(0), x, a[2], a[3]), a[2], 3, 1)
		})}, nil
	case adown:
		x1, x2 := s.Chunk2(s.AvgPool(x, 2, 1, 0))
		x1 = s.Sub("cv1").Block(x1, a[0]/2, 3, 2)
		x2 = s.Sub("cv2").Block(s.MaxPool(x2, 3, 2, 1), a[0]/2, 1, 1)
		if fold {
			return value{parts: []tensor{x1, x2}}, nil
		}
		return value{t: s.Concat(x1, x2)}, nil
	case aconv:
		return value{t: s.Sub("cv1").Block(s.AvgPool(x, 2, 1, 0), a[0], 3, 2)}, nil
	case sppelan:
		y := []tensor{s.Sub("cv1").Block(x, a[1], 1, 1)}
		for _, name := range []string{"cv2", "cv3", "cv4"} {
			y = append(y, s.Sub(name).Sub("m").MaxPool(y[len(y)-1], 5, 1, 2))
		}
		return value{t: s.Sub("cv5").Block(s.Concat(y...), a[0], 1, 1)}, nil
	case cblinear:
		var sum int64
		for _, c := range a {
			sum += c
		}
		y := s.Sub("conv").Conv(x, sum, 1, 1, onnxbuild.Bias())
		outs := s.Node("Split", []string{y.Name, g.b.GlobalInts("Split", a...)}, len(a), onnxbuild.IntAttr("axis", 1))
		parts := make([]tensor, len(a))
		for k, o := range outs {
			parts[k] = tensor{Name: o, C: a[k]}
		}
		return value{parts: parts}, nil
	}
	return value{}, fmt.Errorf("unknown module")
}

// elan adds the ELAN pattern of ELAN1 and RepNCSPELAN4: cv1, a 1×1 conv to
// c3 channels, chunked in two; cv2 on the second half and cv3 on cv2's
// output, each made by block; cv4, a 1×1 conv to c2 channels of the concat
// of the four.
func elan(s onnxbuild.Scope, x tensor, c2, c3 int64, block func(onnxbuild.Scope, tensor) tensor) tensor {
	a, b := s.Chunk2(s.Sub("cv1").Block(x, c3, 1, 1))
	y2 := block(s.Sub("cv2"), b)
	y3 := block(s.Sub("cv3"), y2)
	return s.Sub("cv4").Block(s.Concat(a, b, y2, y3), c2, 1, 1)
}

// repNCSP adds RepNCSP(c1, c2, n): cv3(cat(m(cv1(x)), cv2(x))) with n
// RepNBottlenecks in m and c2/2 channels inside.
func repNCSP(s onnxbuild.Scope, x tensor, c2, n int64) tensor {
	c := c2 / 2
	y := s.Sub("cv1").Block(x, c, 1, 1)
	m := s.Sub("m")
	for k := range n {
		y = repNBottleneck(m.Index(int(k)), y)
	}
	z := s.Sub("cv2").Block(x, c, 1, 1)
	return s.Sub("cv3").Block(s.Concat(y, z), c2, 1, 1)
}

// repNBottleneck adds RepNBottleneck with its shortcut: x + cv2(cv1(x)),
// cv1 a RepConvN and cv2 a 3×3 Conv.
func repNBottleneck(s onnxbuild.Scope, x tensor) tensor {
	y := repConvN(s.Sub("cv1"), x)
	return s.Add(x, s.Sub("cv2").Block(y, x.C, 3, 1))
}

// repConvN adds RepConvN in training form: SiLU(conv1(x) + conv2(x) + 0),
// conv1 a 3×3 and conv2 a 1×1 Conv without activation; the 0 is the missing
// identity branch.
func repConvN(s onnxbuild.Scope, x tensor) tensor {
	sum := s.Add(convBN(s.Sub("conv1"), x, x.C, 3), convBN(s.Sub("conv2"), x, x.C, 1))
	sum = tensor{Name: s.Node("Add", []string{sum.Name, s.ScalarFloat(0)}, 1)[0], C: sum.C}
	return s.Sub("act").SiLU(sum)
}

// convBN adds a Conv module without activation: a k×k conv and batch norm.
func convBN(s onnxbuild.Scope, x tensor, c, k int64) tensor {
	return s.Sub("bn").BatchNorm(s.Sub("conv").Conv(x, c, k, 1))
}

// cbfuse adds CBFuse(idx): every part idx[i] of the CBLinear outputs read
// (all inputs but the last) resized, by nearest neighbour, to the last
// input's height and width, then the sum of those and the last input, as
// torch.sum(torch.stack(res + xs[-1:]), dim=0). The exporter computes the
// target size once, then writes each F.interpolate as Unsqueeze and Concat of
// that size, then Shape → Slice → Cast → Concat of the full sizes and Resize.
func (g *graph) cbfuse(s onnxbuild.Scope, idx []int64, ins []value) (value, error) {
	k := len(ins) - 1
	if k != len(idx) || k < 1 || ins[k].parts != nil {
		return value{}, fmt.Errorf("reads %d values for %d indexes, want one more, the last a tensor", len(ins), len(idx))
	}
	last := ins[k].t
	h := s.Node("Gather", []string{s.Node("Shape", []string{last.Name}, 1)[0], s.Scalar(2)}, 1, onnxbuild.IntAttr("axis", 0))[0]
	w := s.Node("Gather", []string{s.Node("Shape", []string{last.Name}, 1)[0], s.Scalar(3)}, 1, onnxbuild.IntAttr("axis", 0))[0]
	sizes := make([]string, k)
	for i := range sizes {
		uh := s.Node("Unsqueeze", []string{h, g.b.GlobalInts("Unsqueeze", 0)}, 1)[0]
		uw := s.Node("Unsqueeze", []string{w, g.b.GlobalInts("Unsqueeze", 0)}, 1)[0]
		sizes[i] = s.Node("Concat", []string{uh, uw}, 1, onnxbuild.IntAttr("axis", 0))[0]
	}
	stack := make([]tensor, 0, k+1)
	for i, in := range ins[:k] {
		if idx[i] < 0 || int(idx[i]) >= len(in.parts) {
			return value{}, fmt.Errorf("input %d has %d parts, no part %d", i, len(in.parts), idx[i])
		}
		x := in.parts[idx[i]]
		shape := s.Node("Shape", []string{x.Name}, 1)[0]
		axes := s.Ints(0)
		starts := s.Ints(0)
		ends := s.Ints(2)
		nc := s.Node("Slice", []string{shape, starts, ends, axes}, 1)[0]
		hw := s.Node("Cast", []string{sizes[i]}, 1, onnxbuild.IntAttr("to", 7))[0]
		full := s.Node("Concat", []string{nc, hw}, 1, onnxbuild.IntAttr("axis", 0))[0]
		r := s.Node("Resize", []string{x.Name, "", "", full}, 1,
			onnxbuild.StringAttr("coordinate_transformation_mode", "asymmetric"), onnxbuild.FloatAttr("cubic_coeff_a", -0.75),
			onnxbuild.StringAttr("mode", "nearest"), onnxbuild.StringAttr("nearest_mode", "floor"))[0]
		stack = append(stack, tensor{Name: r, C: x.C})
	}
	stack = append(stack, last)
	names := make([]string, len(stack))
	for i, x := range stack {
		names[i] = s.Node("Unsqueeze", []string{x.Name, s.Ints(0)}, 1)[0]
	}
	cat := s.Node("Concat", names, 1, onnxbuild.IntAttr("axis", 0))[0]
	if g.sumAxes == "" {
		g.sumAxes = g.b.GlobalInts("ReduceSum", 0)
	}
	sum := s.Node("ReduceSum", []string{cat, g.sumAxes}, 1, onnxbuild.IntAttr("keepdims", 0))[0]
	return value{t: tensor{Name: sum, C: last.C}}, nil
}

// head adds DDetect, or DualDDetect when dual, in training mode, and makes
// its maps the graph outputs. For each level i, DDetect concatenates the box
// branch cv2.i (Conv, grouped Conv, grouped 1×1 conv to 4·regMax channels)
// and the class branch cv3.i (Conv, Conv, 1×1 conv to the class count).
// DualDDetect does the same with cv2/cv3 on the first half of its inputs and
// cv4/cv5 on the second, level by level, and outputs the first half's maps,
// then the second's.
func (g *graph) head(s onnxbuild.Scope, dual bool, ins []value) error {
	x := make([]tensor, len(ins))
	for i, in := range ins {
		if in.parts != nil {
			return fmt.Errorf("input %d is not a tensor", i)
		}
		x[i] = in.t
	}
	nl := len(x)
	if dual {
		nl /= 2
	}
	if nl < 1 || (dual && len(x) != 2*nl) {
		return fmt.Errorf("%d inputs", len(x))
	}
	level := func(box, cls string, i int, x, first tensor) tensor {
		cb := makeDivisible(max(first.C/4, 4*regMax, 16), 4)
		cc := max(first.C, min(2*g.nc, 128))
		b := s.Sub(fmt.Sprintf("%s.%d", box, i))
		y := b.Index(0).Block(x, cb, 3, 1)
		y = b.Index(1).Block(y, cb, 3, 1, onnxbuild.Group(4))
		y = b.Index(2).Conv(y, 4*regMax, 1, 1, onnxbuild.Group(4), onnxbuild.Bias())
		c := s.Sub(fmt.Sprintf("%s.%d", cls, i))
		z := c.Index(0).Block(x, cc, 3, 1)
		z = c.Index(1).Block(z, cc, 3, 1)
		z = c.Index(2).Conv(z, g.nc, 1, 1, onnxbuild.Bias())
		return s.Concat(y, z)
	}
	var d1, d2 []tensor
	for i := range nl {
		d1 = append(d1, level("cv2", "cv3", i, x[i], x[0]))
		if dual {
			d2 = append(d2, level("cv4", "cv5", i, x[nl+i], x[nl]))
		}
	}
	for k, o := range append(d1, d2...) {
		p := fmt.Sprintf("output%d_dim_", k)
		g.b.OutputDims(o, p+"0", o.C, p+"2", p+"3")
	}
	return nil
}

// makeDivisible rounds x up to a multiple of d.
func makeDivisible(x, d int64) int64 { return (x + d - 1) / d * d }
