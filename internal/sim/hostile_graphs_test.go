package sim_test

import (
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnx"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/sim"
	"google.golang.org/protobuf/proto"
)

// TestHostileGraphs loads graphs whose ends a step cannot use, which once
// panicked or gave a tiny peak: each must be an error that names the
// problem.
func TestHostileGraphs(t *testing.T) {
	mk := func(edit func(m *onnx.ModelProto)) []byte {
		b := onnxbuild.New("g")
		x := b.Input("images", 3)
		y := b.Layer(0).Block(x, 8, 3, 1)
		b.Output(y)
		m := b.Model()
		edit(m)
		data, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"no outputs", "has no outputs", mk(func(m *onnx.ModelProto) { m.Graph.Output = nil })},
		{"output is input", "is a graph input", mk(func(m *onnx.ModelProto) { m.Graph.Output = []*onnx.ValueInfoProto{m.Graph.Input[0]} })},
		{"huge initializer", "overflows int64", mk(func(m *onnx.ModelProto) { m.Graph.Initializer[0].Dims = []int64{1 << 40, 1 << 40} })},
		{"string input", "has type string", mk(func(m *onnx.ModelProto) {
			m.Graph.Input[0].Type.Value.(*onnx.TypeProto_TensorType).TensorType.ElemType = 8
		})},
		{"unknown type", "has type", mk(func(m *onnx.ModelProto) {
			m.Graph.Input[0].Type.Value.(*onnx.TypeProto_TensorType).TensorType.ElemType = 99
		})},
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: panic %v", tc.name, r)
				}
			}()
			m, err := sim.LoadBytes(tc.name, tc.data)
			if err == nil {
				_, err = m.Simulate(sim.Options{Batch: 1, Height: 32, Width: 32})
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
			}
		}()
	}
}
