// Package onnxbuild builds small ONNX models shaped like the TorchScript
// training exports of YOLO networks, for tests, examples and synthetic model
// families: image input [batch, C, height, width] with symbolic dims, weights
// that keep only their dims, opset 17, and node and weight names that follow
// the module path, so that ir.Load finds each node's top-level layer.
//
// A Scope is a module path. In scope "model.3/cv1" a Block adds the nodes
// "/model.3/cv1/conv/Conv", "/model.3/cv1/bn/BatchNormalization",
// "/model.3/cv1/act/Sigmoid" and "/model.3/cv1/act/Mul", with weights
// "model.3.cv1.conv.weight", "model.3.cv1.bn.weight" and so on, as
// torch.onnx.export names them. A second node of one op type in one scope gets
// a suffix: "Concat", "Concat_1", …. Below a called nn.Sequential the node
// path and the weight path differ: Scope.Index gives "model.3/cv2/cv2.0" with
// weights "model.3.cv2.0.…".
//
// Beyond the basic ops, torch.go writes the exporter's idioms that full
// networks such as package models' YOLOv9 need: chunk with a run-time size,
// nn.Upsample at opset 17, constants outside every scope, scalar constants,
// weights in state_dict order and outputs with declared dims.
//
// Example, a stem conv and an upsample:
//
//	b := onnxbuild.New("net")
//	x := b.Input("images", 3)
//	y := b.Layer(0).Block(x, 16, 3, 2)
//	z := b.Layer(1).Upsample(y, 2)
//	b.Output(z)
//	data, err := b.Bytes()
//
// The builder tracks channel counts (T.C) so that weights get their dims; it
// does no other shape inference: ir.Graph.Infer does that.
package onnxbuild

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/onnxmem/onnxmem/internal/onnx"
	"google.golang.org/protobuf/proto"
)

// Opset is the default-domain opset of every model built here.
const Opset = 17

// ONNX element types (TensorProto.DataType).
const (
	float32Type = 1
	int64Type   = 7
	boolType    = 9
)

// T is a tensor of the graph being built: its value name and its channel
// count (dim 1).
type T struct {
	Name string
	C    int64
}

// Builder accumulates one graph. The zero value is not usable: call New.
type Builder struct {
	// ZeroWeights, when set, gives each weight zeros as contents; otherwise a
	// weight points to an external file that does not exist and keeps only
	// its dims and dtype, like the weightless exports in the shared data.
	ZeroWeights bool
	// ReLU makes Block's activation nn.ReLU() (a Relu node) in place of
	// nn.SiLU: a configuration that sets Conv.default_act, as YOLOv9's
	// models/detect/yolov9.yaml does with "activation: nn.ReLU()".
	ReLU bool

	// weightBytes counts the zeros given so far; err is the first error
	// building met, which Bytes returns.
	weightBytes int64
	err         error

	g       onnx.GraphProto
	used    map[string]int // node names taken, for the "_1" suffixes
	globals int            // constants made outside every scope, see GlobalInts
}

// New starts an empty graph with the given name.
func New(name string) *Builder {
	return &Builder{g: onnx.GraphProto{Name: name}, used: map[string]int{}}
}

// Input adds a float32 graph input of dims [batch, c, height, width], with
// the three symbolic dims named as the YOLOv9 exports name them.
func (b *Builder) Input(name string, c int64) T {
	b.g.Input = append(b.g.Input, valueInfo(name, "batch", c, "height", "width"))
	return T{Name: name, C: c}
}

// TokenInput appends a graph input of token ids: int64 [batch, sequence].
func (b *Builder) TokenInput(name string) T {
	vi := valueInfo(name, "batch", "sequence")
	vi.Type.GetTensorType().ElemType = int64Type
	b.g.Input = append(b.g.Input, vi)
	return T{Name: name}
}

// Output appends graph outputs, declared as float32 with no shape.
func (b *Builder) Output(ts ...T) {
	for _, t := range ts {
		b.g.Output = append(b.g.Output, valueInfo(t.Name))
	}
}

// Model returns the ModelProto: IR version 8, opset 17. The Builder keeps
// ownership of the graph: do not change it while still building.
func (b *Builder) Model() *onnx.ModelProto {
	return &onnx.ModelProto{
		IrVersion:    8,
		ProducerName: "onnxbuild",
		Graph:        &b.g,
		OpsetImport:  []*onnx.OperatorSetIdProto{{Domain: "", Version: Opset}},
	}
}

// Bytes serializes the model deterministically: the same graph gives the same
// bytes.
func (b *Builder) Bytes() ([]byte, error) {
	if b.err != nil {
		return nil, b.err
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(b.Model())
}

// maxProtoBytes is the most one protobuf message holds (2 GiB less a
// byte): an ONNX file with more data keeps it outside, in external files.
const maxProtoBytes = 1<<31 - 1

// valueInfo declares a float32 tensor; each dim is an int64 size or a
// symbolic name. With no dims the shape is left undeclared.
func valueInfo(name string, dims ...any) *onnx.ValueInfoProto {
	tt := &onnx.TypeProto_Tensor{ElemType: float32Type}
	if len(dims) > 0 {
		tt.Shape = &onnx.TensorShapeProto{}
		for _, d := range dims {
			dim := &onnx.TensorShapeProto_Dimension{}
			switch x := d.(type) {
			case int64:
				dim.Value = &onnx.TensorShapeProto_Dimension_DimValue{DimValue: x}
			case string:
				dim.Value = &onnx.TensorShapeProto_Dimension_DimParam{DimParam: x}
			}
			tt.Shape.Dim = append(tt.Shape.Dim, dim)
		}
	}
	return &onnx.ValueInfoProto{Name: name, Type: &onnx.TypeProto{Value: &onnx.TypeProto_TensorType{TensorType: tt}}}
}

// weight adds a float32 initializer; see ZeroWeights.
// Param adds a float32 parameter of the given dims (none: a 0-dim one)
// under the scope's weight path, as the model's own initializer, and
// returns its name.
func (s Scope) Param(field string, dims ...int64) string {
	return s.b.weight(s.weightName(field), dims...)
}

func (b *Builder) weight(name string, dims ...int64) string {
	t := &onnx.TensorProto{Name: name, DataType: float32Type, Dims: dims}
	n := int64(1)
	for _, d := range dims {
		if d < 0 || (d > 0 && n > maxProtoBytes/d) {
			n = maxProtoBytes + 1
			break
		}
		n *= d
	}
	if b.ZeroWeights && b.err == nil && (n > maxProtoBytes/4 || b.weightBytes+4*n > maxProtoBytes) {
		b.err = fmt.Errorf("weights with data take more than the 2 GiB one protobuf ONNX file holds (at %s, dims %v): give them no data (export-model without -weights), as a weightless export has them", name, dims)
	}
	if b.ZeroWeights && b.err == nil {
		b.weightBytes += 4 * n
		t.RawData = make([]byte, 4*n)
	} else {
		t.DataLocation = onnx.TensorProto_EXTERNAL
		t.ExternalData = []*onnx.StringStringEntryProto{{Key: "location", Value: name + ".bin"}}
	}
	b.g.Initializer = append(b.g.Initializer, t)
	return name
}

// Scope is a module path such as "model.3/cv1"; it names the nodes and
// weights it adds (see the package comment).
type Scope struct {
	b *Builder
	// path names the nodes, param the weights: they differ below an indexed
	// container (see Index).
	path, param string
}

// Layer returns the scope of top-level layer i, "model.i".
func (b *Builder) Layer(i int) Scope {
	p := fmt.Sprintf("model.%d", i)
	return Scope{b: b, path: p, param: p}
}

// Module returns the scope of a top-level module of the given name, as a
// torchvision network names its children: Module("layer1").Index(0) is the
// scope "layer1/layer1.0", with weights "layer1.0.…".
func (b *Builder) Module(name string) Scope {
	return Scope{b: b, path: name, param: name}
}

// Sub returns the scope of a child module. The name may hold dots, as the
// exporter names the member of a ModuleList that is indexed rather than
// called: Sub("cv2.0") of "model.22" is the scope "model.22/cv2.0", whose
// weights are "model.22.cv2.0.…".
func (s Scope) Sub(name string) Scope {
	return Scope{b: s.b, path: s.path + "/" + name, param: s.param + "." + name}
}

// Index returns the scope of child i of a called nn.Sequential, named as
// torch.onnx.export names it: the node path repeats the container's name with
// the index, the weight path only appends the index. Index(0) of
// "model.3/cv2" is "model.3/cv2/cv2.0", with weights "model.3.cv2.0.…".
func (s Scope) Index(i int) Scope {
	last := s.path[strings.LastIndexByte(s.path, '/')+1:]
	return Scope{b: s.b, path: fmt.Sprintf("%s/%s.%d", s.path, last, i), param: fmt.Sprintf("%s.%d", s.param, i)}
}

// Node adds a node of type op reading ins ("" for an absent optional input)
// and returns its n output names. The node is named after the scope and op,
// its outputs after the node: "/model.2/Concat_1_output_0".
func (s Scope) Node(op string, ins []string, n int, attrs ...*onnx.AttributeProto) []string {
	name := "/" + s.path + "/" + op
	if k := s.b.used[name]; k > 0 {
		s.b.used[name] = k + 1
		name = fmt.Sprintf("%s_%d", name, k)
	} else {
		s.b.used[name] = 1
	}
	outs := make([]string, n)
	for i := range outs {
		outs[i] = fmt.Sprintf("%s_output_%d", name, i)
	}
	s.b.g.Node = append(s.b.g.Node, &onnx.NodeProto{Name: name, OpType: op, Input: ins, Output: outs, Attribute: attrs})
	return outs
}

// Op adds a one-input op that keeps the shape, such as "Relu" or
// "LeakyRelu".
func (s Scope) Op(op string, x T, attrs ...*onnx.AttributeProto) T {
	return T{Name: s.Node(op, []string{x.Name}, 1, attrs...)[0], C: x.C}
}

// Ints adds a Constant holding a 1-D int64 tensor and returns its output.
func (s Scope) Ints(v ...int64) string {
	t := &onnx.TensorProto{DataType: int64Type, Dims: []int64{int64(len(v))}}
	for _, x := range v {
		t.RawData = binary.LittleEndian.AppendUint64(t.RawData, uint64(x))
	}
	return s.Node("Constant", nil, 1, TensorAttr("value", t))[0]
}

// Floats adds a Constant holding a 1-D float32 tensor and returns its output.
func (s Scope) Floats(v ...float32) string {
	t := &onnx.TensorProto{DataType: float32Type, Dims: []int64{int64(len(v))}}
	for _, x := range v {
		t.RawData = binary.LittleEndian.AppendUint32(t.RawData, math.Float32bits(x))
	}
	return s.Node("Constant", nil, 1, TensorAttr("value", t))[0]
}

// weightName is the state_dict name of a parameter of this scope.
func (s Scope) weightName(field string) string {
	return s.param + "." + field
}

// ConvOption changes a Conv from its default: no bias, one group, padding
// k/2 (YOLO's autopad).
type ConvOption func(*convSpec)

// convSpec is what the ConvOptions set.
type convSpec struct {
	bias       bool
	group, pad int64
}

// Bias gives the conv a bias.
func Bias() ConvOption { return func(c *convSpec) { c.bias = true } }

// Group makes a grouped conv with g groups.
func Group(g int64) ConvOption { return func(c *convSpec) { c.group = g } }

// Conv adds a k×k convolution with c output channels; its weight is
// [c, x.C/group, k, k].
func (s Scope) Conv(x T, c, k, stride int64, opts ...ConvOption) T {
	spec := convSpec{group: 1, pad: k / 2}
	for _, o := range opts {
		o(&spec)
	}
	ins := []string{x.Name, s.b.weight(s.weightName("weight"), c, x.C/spec.group, k, k)}
	if spec.bias {
		ins = append(ins, s.b.weight(s.weightName("bias"), c))
	}
	out := s.Node("Conv", ins, 1,
		IntsAttr("dilations", 1, 1), IntAttr("group", spec.group), IntsAttr("kernel_shape", k, k),
		IntsAttr("pads", spec.pad, spec.pad, spec.pad, spec.pad), IntsAttr("strides", stride, stride))
	return T{Name: out[0], C: c}
}

// BatchNorm adds a training-mode BatchNormalization with its four
// parameters. Like torch's training export it has three outputs, Y and the
// updated running mean and variance; it returns Y.
func (s Scope) BatchNorm(x T) T {
	ins := []string{x.Name}
	for _, f := range []string{"weight", "bias", "running_mean", "running_var"} {
		ins = append(ins, s.b.weight(s.weightName(f), x.C))
	}
	out := s.Node("BatchNormalization", ins, 3,
		FloatAttr("epsilon", 0.001), FloatAttr("momentum", 0.97), IntAttr("training_mode", 1))
	return T{Name: out[0], C: x.C}
}

// SiLU adds x·sigmoid(x) as the exporter writes nn.SiLU: a Sigmoid and a Mul.
func (s Scope) SiLU(x T) T {
	sig := s.Node("Sigmoid", []string{x.Name}, 1)[0]
	return T{Name: s.Node("Mul", []string{x.Name, sig}, 1)[0], C: x.C}
}

// Block adds YOLO's Conv module: a conv without bias in sub-scope "conv",
// batch norm in "bn" and SiLU in "act" (ReLU with Builder.ReLU).
func (s Scope) Block(x T, c, k, stride int64, opts ...ConvOption) T {
	y := s.Sub("bn").BatchNorm(s.Sub("conv").Conv(x, c, k, stride, opts...))
	if s.b.ReLU {
		return T{Name: s.Sub("act").Node("Relu", []string{y.Name}, 1)[0], C: y.C}
	}
	return s.Sub("act").SiLU(y)
}

// Add adds x + y.
func (s Scope) Add(x, y T) T {
	return T{Name: s.Node("Add", []string{x.Name, y.Name}, 1)[0], C: x.C}
}

// Concat concatenates along the channels.
func (s Scope) Concat(xs ...T) T {
	ins := make([]string, len(xs))
	var c int64
	for i, x := range xs {
		ins[i], c = x.Name, c+x.C
	}
	return T{Name: s.Node("Concat", ins, 1, IntAttr("axis", 1))[0], C: c}
}

// MaxPool adds a k×k max pool.
func (s Scope) MaxPool(x T, k, stride, pad int64) T {
	out := s.Node("MaxPool", []string{x.Name}, 1,
		IntAttr("ceil_mode", 0), IntsAttr("dilations", 1, 1), IntsAttr("kernel_shape", k, k),
		IntsAttr("pads", pad, pad, pad, pad), IntsAttr("strides", stride, stride))
	return T{Name: out[0], C: x.C}
}

// AvgPool adds a k×k average pool that counts the padding.
func (s Scope) AvgPool(x T, k, stride, pad int64) T {
	out := s.Node("AveragePool", []string{x.Name}, 1,
		IntAttr("ceil_mode", 0), IntAttr("count_include_pad", 1), IntsAttr("kernel_shape", k, k),
		IntsAttr("pads", pad, pad, pad, pad), IntsAttr("strides", stride, stride))
	return T{Name: out[0], C: x.C}
}

// Upsample adds nn.Upsample(scale_factor=scale, mode="nearest"): a Resize
// whose scales [1, 1, scale, scale] come from a Constant.
func (s Scope) Upsample(x T, scale float32) T {
	scales := s.Floats(1, 1, scale, scale)
	out := s.Node("Resize", []string{x.Name, "", scales}, 1,
		StringAttr("coordinate_transformation_mode", "asymmetric"), FloatAttr("cubic_coeff_a", -0.75),
		StringAttr("mode", "nearest"), StringAttr("nearest_mode", "floor"))
	return T{Name: out[0], C: x.C}
}

// Slice takes channels [start, end) of x, with Constant starts, ends and
// axes, as the exporter writes chunk().
func (s Scope) Slice(x T, start, end int64) T {
	starts, ends, axes := s.Ints(start), s.Ints(end), s.Ints(1)
	return T{Name: s.Node("Slice", []string{x.Name, starts, ends, axes}, 1)[0], C: end - start}
}

// Split cuts x along the channels into parts of the given sizes, with the
// sizes in a Constant (opset 13+).
func (s Scope) Split(x T, sizes ...int64) []T {
	outs := s.Node("Split", []string{x.Name, s.Ints(sizes...)}, len(sizes), IntAttr("axis", 1))
	ts := make([]T, len(outs))
	for i, o := range outs {
		ts[i] = T{Name: o, C: sizes[i]}
	}
	return ts
}

// IntAttr returns an integer attribute.
func IntAttr(name string, v int64) *onnx.AttributeProto {
	return &onnx.AttributeProto{Name: name, Type: onnx.AttributeProto_INT, I: v}
}

// IntsAttr returns an integer-list attribute.
func IntsAttr(name string, v ...int64) *onnx.AttributeProto {
	return &onnx.AttributeProto{Name: name, Type: onnx.AttributeProto_INTS, Ints: v}
}

// FloatAttr returns a float attribute.
func FloatAttr(name string, v float32) *onnx.AttributeProto {
	return &onnx.AttributeProto{Name: name, Type: onnx.AttributeProto_FLOAT, F: v}
}

// StringAttr returns a string attribute.
func StringAttr(name, v string) *onnx.AttributeProto {
	return &onnx.AttributeProto{Name: name, Type: onnx.AttributeProto_STRING, S: []byte(v)}
}

// TensorAttr returns a tensor attribute, as Constant's "value".
func TensorAttr(name string, t *onnx.TensorProto) *onnx.AttributeProto {
	return &onnx.AttributeProto{Name: name, Type: onnx.AttributeProto_TENSOR, T: t}
}
