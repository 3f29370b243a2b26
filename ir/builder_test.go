// A small builder of ONNX models for tests.

package ir

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnx"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"google.golang.org/protobuf/proto"
)

// model builds a tiny ONNX model for tests.
type model struct {
	opset int64
	g     onnx.GraphProto
}

// newModel starts a model at the given default-domain opset.
func newModel(opset int64) *model {
	return &model{opset: opset, g: onnx.GraphProto{Name: "test"}}
}

// valueInfo describes a float or integer tensor; dims are int64-able ints or
// symbolic names.
func valueInfo(name string, dt DType, dims ...any) *onnx.ValueInfoProto {
	shape := &onnx.TensorShapeProto{}
	for _, d := range dims {
		dim := &onnx.TensorShapeProto_Dimension{}
		switch x := d.(type) {
		case int:
			dim.Value = &onnx.TensorShapeProto_Dimension_DimValue{DimValue: int64(x)}
		case int64:
			dim.Value = &onnx.TensorShapeProto_Dimension_DimValue{DimValue: x}
		case string:
			dim.Value = &onnx.TensorShapeProto_Dimension_DimParam{DimParam: x}
		}
		shape.Dim = append(shape.Dim, dim)
	}
	return &onnx.ValueInfoProto{Name: name, Type: &onnx.TypeProto{Value: &onnx.TypeProto_TensorType{
		TensorType: &onnx.TypeProto_Tensor{ElemType: int32(dt), Shape: shape},
	}}}
}

// input adds a graph input.
func (m *model) input(name string, dt DType, dims ...any) *model {
	m.g.Input = append(m.g.Input, valueInfo(name, dt, dims...))
	return m
}

// output lists graph outputs, declaring no shape.
func (m *model) output(names ...string) *model {
	for _, n := range names {
		m.g.Output = append(m.g.Output, &onnx.ValueInfoProto{Name: n})
	}
	return m
}

// declare adds a value_info entry.
func (m *model) declare(name string, dt DType, dims ...any) *model {
	m.g.ValueInfo = append(m.g.ValueInfo, valueInfo(name, dt, dims...))
	return m
}

// init adds an initializer with the given contents, stored as raw data; with
// no contents it is a weightless external tensor.
func (m *model) init(name string, dt DType, dims []int64, data ...float64) *model {
	m.g.Initializer = append(m.g.Initializer, tensorProto(name, dt, dims, data...))
	return m
}

// tensorProto builds a TensorProto; see init.
func tensorProto(name string, dt DType, dims []int64, data ...float64) *onnx.TensorProto {
	t := &onnx.TensorProto{Name: name, DataType: int32(dt), Dims: dims}
	if data == nil {
		t.DataLocation = onnx.TensorProto_EXTERNAL
		t.ExternalData = []*onnx.StringStringEntryProto{{Key: "location", Value: name + ".data"}}
		return t
	}
	raw := make([]byte, 0, len(data)*8)
	for _, x := range data {
		switch dt {
		case Float32:
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(float32(x)))
		case Int32:
			raw = binary.LittleEndian.AppendUint32(raw, uint32(int32(x)))
		default:
			v := int64(x)
			if x >= math.MaxInt64 {
				v = math.MaxInt64 // float64(MaxInt64) rounds up to 2^63
			}
			raw = binary.LittleEndian.AppendUint64(raw, uint64(v))
		}
	}
	t.RawData = raw
	return t
}

// node adds a node; ins and outs are comma-separated names ("" for an absent
// optional input, as in "x,,scales").
func (m *model) node(op, name, ins, outs string, attrs ...*onnx.AttributeProto) *model {
	n := &onnx.NodeProto{OpType: op, Name: name, Attribute: attrs}
	if ins != "" {
		n.Input = strings.Split(ins, ",")
	}
	n.Output = strings.Split(outs, ",")
	m.g.Node = append(m.g.Node, n)
	return m
}

// constant adds a Constant node named after its output.
func (m *model) constant(out string, dt DType, dims []int64, data ...float64) *model {
	return m.node("Constant", out, "", out, onnxbuild.TensorAttr("value", tensorProto("", dt, dims, data...)))
}

// bytes serializes the model.
func (m *model) bytes(t testing.TB) []byte {
	t.Helper()
	mp := &onnx.ModelProto{
		IrVersion:    8,
		ProducerName: "ir-test",
		Graph:        &m.g,
		OpsetImport:  []*onnx.OperatorSetIdProto{{Domain: "", Version: m.opset}},
	}
	b, err := proto.Marshal(mp)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// load serializes and loads the model.
func (m *model) load(t testing.TB) *Graph {
	t.Helper()
	g, err := Load(m.bytes(t))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// id returns the ValueID of the named value, failing the test when it is absent.
func id(t testing.TB, g *Graph, name string) ValueID {
	t.Helper()
	v, ok := g.Lookup(name)
	if !ok {
		t.Fatalf("no value %q", name)
	}
	return v
}
