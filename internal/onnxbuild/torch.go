// Idioms of torch.onnx.export (TorchScript, opset 17) that the YOLOv9
// training exports contain: chunk with a dynamic channel count, nn.Upsample,
// constants made outside every module scope, scalar constants, the
// state_dict order of the weights and declared graph outputs; and the
// classifier heads of torchvision's training exports: global average
// pooling, flatten, nn.Linear and training-mode dropout.

package onnxbuild

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/onnxmem/onnxmem/internal/onnx"
)

// Scalar adds a Constant holding a 0-d int64 tensor and returns its output,
// as the exporter writes a Python int index such as the 2 of shape[2].
func (s Scope) Scalar(v int64) string {
	t := &onnx.TensorProto{DataType: int64Type, RawData: binary.LittleEndian.AppendUint64(nil, uint64(v))}
	return s.Node("Constant", nil, 1, TensorAttr("value", t))[0]
}

// ScalarFloat adds a Constant holding a 0-d float32 tensor and returns its
// output, as the exporter writes a Python number added to a tensor.
func (s Scope) ScalarFloat(v float32) string {
	t := &onnx.TensorProto{DataType: float32Type, RawData: binary.LittleEndian.AppendUint32(nil, math.Float32bits(v))}
	return s.Node("Constant", nil, 1, TensorAttr("value", t))[0]
}

// GlobalInts adds a Constant holding a 1-D int64 tensor outside every module
// scope and returns its output. The exporter makes such constants for the
// tensor inputs of some ops (Split's sizes, Unsqueeze's axes, ReduceSum's
// axes) and names them after a global counter: node "Constant_N", output
// "onnx::Op_N" for the consuming op type op. ir.Load leaves such a node in no
// layer.
func (b *Builder) GlobalInts(op string, v ...int64) string {
	b.globals++
	t := &onnx.TensorProto{DataType: int64Type, Dims: []int64{int64(len(v))}}
	for _, x := range v {
		t.RawData = binary.LittleEndian.AppendUint64(t.RawData, uint64(x))
	}
	out := fmt.Sprintf("onnx::%s_%d", op, b.globals)
	b.g.Node = append(b.g.Node, &onnx.NodeProto{Name: fmt.Sprintf("Constant_%d", b.globals), OpType: "Constant",
		Output: []string{out}, Attribute: []*onnx.AttributeProto{TensorAttr("value", t)}})
	return out
}

// Chunk2 adds x.chunk(2, 1) as the exporter writes it when the channel count
// is not folded: the size of a part, (C + 1) / 2, is computed at run time
// from Shape → Gather → Add → Div, then two Slices take [0, size) and
// [size, 2·size) of the channels. The Gather's index constant serves as the
// Slices' axes.
func (s Scope) Chunk2(x T) (T, T) {
	shape := s.Node("Shape", []string{x.Name}, 1)[0]
	axis := s.Ints(1)
	c := s.Node("Gather", []string{shape, axis}, 1, IntAttr("axis", 0))[0]
	zero, one := s.Ints(0), s.Ints(1)
	sum := s.Node("Add", []string{c, one}, 1)[0]
	size := s.Node("Div", []string{sum, s.Ints(2)}, 1)[0]
	end0 := s.Node("Mul", []string{size, s.Ints(1)}, 1)[0]
	a := s.Node("Slice", []string{x.Name, zero, end0, axis}, 1)[0]
	end1 := s.Node("Mul", []string{size, s.Ints(2)}, 1)[0]
	b := s.Node("Slice", []string{x.Name, end0, end1, axis}, 1)[0]
	half := (x.C + 1) / 2
	return T{Name: a, C: half}, T{Name: b, C: x.C - half}
}

// NearestUpsample adds nn.Upsample(scale_factor=scale, mode="nearest") as the
// exporter writes it at opset 17: a Resize whose scales are the Concat of two
// float Constants, [1, 1] and [scale, scale]. Upsample is the same with one
// Constant.
func (s Scope) NearestUpsample(x T, scale float32) T {
	scales := s.Node("Concat", []string{s.Floats(1, 1), s.Floats(scale, scale)}, 1, IntAttr("axis", 0))[0]
	out := s.Node("Resize", []string{x.Name, "", scales}, 1,
		StringAttr("coordinate_transformation_mode", "asymmetric"), FloatAttr("cubic_coeff_a", -0.75),
		StringAttr("mode", "nearest"), StringAttr("nearest_mode", "floor"))
	return T{Name: out[0], C: x.C}
}

// SortWeights puts the weights in the order cmp gives their names, keeping
// the order of insertion between equal names. Weights are added as the graph
// first uses them; an exporter lists them in state_dict order, which is the
// order the modules were registered in.
func (b *Builder) SortWeights(cmp func(a, b string) int) {
	slices.SortStableFunc(b.g.Initializer, func(x, y *onnx.TensorProto) int { return cmp(x.GetName(), y.GetName()) })
}

// OutputDims appends a float32 graph output declared with the given dims,
// each an int64 size or a symbolic name.
func (b *Builder) OutputDims(t T, dims ...any) {
	b.g.Output = append(b.g.Output, valueInfo(t.Name, dims...))
}

// Linear adds nn.Linear(x.C, c) as torch.onnx exports it: Gemm(x, weight,
// bias) with transB=1, weight [c, x.C] and bias [c]. x is [N, x.C].
func (s Scope) Linear(x T, c int64) T {
	ins := []string{x.Name, s.b.weight(s.weightName("weight"), c, x.C), s.b.weight(s.weightName("bias"), c)}
	out := s.Node("Gemm", ins, 1, FloatAttr("alpha", 1), FloatAttr("beta", 1), IntAttr("transB", 1))
	return T{Name: out[0], C: c}
}

// GlobalAvgPool adds nn.AdaptiveAvgPool2d(1): GlobalAveragePool.
func (s Scope) GlobalAvgPool(x T) T { return s.Op("GlobalAveragePool", x) }

// Flatten adds torch.flatten(x, 1).
func (s Scope) Flatten(x T) T { return s.Op("Flatten", x, IntAttr("axis", 1)) }

// Dropout adds nn.Dropout(p) as a training export writes it: Dropout(x,
// ratio, training_mode) with both constants, and the mask as a second
// output.
func (s Scope) Dropout(x T, p float32) T {
	ratio := s.ScalarFloat(p)
	train := s.Node("Constant", nil, 1, TensorAttr("value", &onnx.TensorProto{DataType: boolType, RawData: []byte{1}}))[0]
	return T{Name: s.Node("Dropout", []string{x.Name, ratio, train}, 2)[0], C: x.C}
}
