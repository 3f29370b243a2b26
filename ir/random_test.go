// Random graphs: Load and Infer never panic.

package ir

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnx"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
)

// TestRandomGraphs loads and infers thousands of small random graphs of the
// supported ops, with random inputs, constants and attributes, most of them
// invalid. Every one must give either shapes that hold together (every value
// has dims, folded contents match them) or an "ir: " error, and never panic.
func TestRandomGraphs(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	var ok, failed int
	for i := range 5000 {
		m := randomModel(r)
		g, err := Load(m.bytes(t))
		var s *Shapes
		if err == nil {
			s, err = g.Infer(Binding{Batch: 2, Height: 8, Width: 8})
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "ir: ") {
				t.Fatalf("graph %d: error without prefix: %v", i, err)
			}
			failed++
			continue
		}
		ok++
		for v := range g.Values {
			n := product(s.Dims[v])
			if s.Dims[v] == nil || (s.Data[v] != nil && int64(len(s.Data[v])) != n) || (s.floats[v] != nil && int64(len(s.floats[v])) != n) {
				t.Fatalf("graph %d: value %q: dims %v, data %v, floats %v\n%v", i, g.Values[v].Name, s.Dims[v], s.Data[v], s.floats[v], m.g.Node)
			}
		}
	}
	t.Logf("%d graphs inferred, %d rejected", ok, failed)
}

// randomModel builds a graph of up to six random nodes over one or two inputs
// and three small embedded int64 initializers (make gives non-nil data, so none
// of them is external).
func randomModel(r *rand.Rand) *model {
	var ops []string
	for _, r := range opTable {
		ops = append(ops, r.Type)
	}
	m := newModel([]int64{9, 12, 13, 17, 18}[r.IntN(5)])
	var names []string
	for i := range 1 + r.IntN(2) {
		dims := []any{"batch", 3, "height", "width"}
		if r.IntN(2) == 0 {
			dims = dims[:r.IntN(5)]
			for k := range dims {
				dims[k] = 1 + r.IntN(6)
			}
		}
		names = append(names, fmt.Sprintf("in%d", i))
		m.input(names[i], []DType{Float32, Int64}[r.IntN(2)], dims...)
	}
	for i := range 3 {
		data := make([]float64, r.IntN(5))
		for k := range data {
			data[k] = float64(randomInt(r))
		}
		names = append(names, fmt.Sprintf("c%d", i))
		m.init(names[len(names)-1], Int64, []int64{int64(len(data))}, data...)
	}
	attrNames := []string{"axis", "axes", "split", "perm", "kernel_shape", "strides", "pads", "dilations", "group",
		"ceil_mode", "keepdims", "to", "starts", "ends", "allowzero", "num_outputs", "start", "end", "noop_with_empty_axes"}
	for k := range 1 + r.IntN(6) {
		op := ops[r.IntN(len(ops))]
		ins := make([]string, 1+r.IntN(3))
		for j := range ins {
			if r.IntN(16) > 0 {
				ins[j] = names[r.IntN(len(names))]
			}
		}
		var attrs []*onnx.AttributeProto
		for range r.IntN(3) {
			name := attrNames[r.IntN(len(attrNames))]
			switch r.IntN(4) {
			case 0:
				attrs = append(attrs, onnxbuild.IntAttr(name, randomInt(r)))
			case 1:
				attrs = append(attrs, onnxbuild.StringAttr("auto_pad", []string{"SAME_UPPER", "VALID", "NOTSET", "X"}[r.IntN(4)]))
			default:
				ints := make([]int64, r.IntN(5))
				for j := range ints {
					ints[j] = randomInt(r)
				}
				attrs = append(attrs, onnxbuild.IntsAttr(name, ints...))
			}
		}
		if op == "Constant" {
			ins, attrs = nil, append(attrs, onnxbuild.TensorAttr("value", tensorProto("", Int64, []int64{2}, 3, 4)))
		}
		outs := make([]string, 1+r.IntN(3))
		for o := range outs {
			outs[o] = fmt.Sprintf("n%d_%d", k, o)
		}
		m.node(op, fmt.Sprintf("node%d", k), strings.Join(ins, ","), strings.Join(outs, ","), attrs...)
		names = append(names, outs...)
	}
	return m
}

// randomInt is mostly a small size or axis, sometimes -1, 0 or an extreme.
func randomInt(r *rand.Rand) int64 {
	switch r.IntN(12) {
	case 0:
		return -1
	case 1:
		return 0
	case 2:
		return []int64{math.MaxInt64, math.MinInt64, 1 << 40}[r.IntN(3)]
	}
	return int64(r.IntN(5))
}
