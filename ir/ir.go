// Package ir is onnxmem's typed graph: the data model that every analysis reads.
//
// A Graph is decoded from ONNX bytes by Load. It keeps what memory analysis needs
// and nothing else: node order, op types and attributes, value names, element types
// and declared dims (symbolic dims keep their names), and the dims and dtypes of
// initializers. Initializer data is never required: a weightless export, whose
// tensors point to absent external files, loads the same as one with embedded
// weights.
//
// Concrete shapes depend on the batch size and image size, so they are not part of
// the Graph. Graph.Infer binds the symbolic input dims and returns a Shapes table,
// folding the small integer constants of shape arithmetic (Shape → Gather → Cast →
// Mul → Concat → Resize sizes) on the way.
//
// Values and nodes are numbered densely from zero in graph order; every slice in
// this package is indexed by those IDs, and every listing is in ID order.
package ir

import "strconv"

// DType is an ONNX element type (TensorProto.DataType).
type DType int32

// The element types onnxmem knows; the values are those of onnx.proto.
const (
	Undefined DType = 0
	Float32   DType = 1
	Uint8     DType = 2
	Int8      DType = 3
	Uint16    DType = 4
	Int16     DType = 5
	Int32     DType = 6
	Int64     DType = 7
	String    DType = 8
	Bool      DType = 9
	Float16   DType = 10
	Float64   DType = 11
	Uint32    DType = 12
	Uint64    DType = 13
	BFloat16  DType = 16
)

// Size returns the bytes of one element, or 0 for types without a fixed size.
// IsFloat reports whether d is a floating-point type, the types that
// module.half() and module.float() convert.
func (d DType) IsFloat() bool {
	return d == Float32 || d == Float16 || d == BFloat16 || d == Float64
}

// Size returns the bytes of one element of d, or 0 for an unknown type.
func (d DType) Size() int64 {
	switch d {
	case Float32, Int32, Uint32:
		return 4
	case Uint8, Int8, Bool:
		return 1
	case Uint16, Int16, Float16, BFloat16:
		return 2
	case Int64, Float64, Uint64:
		return 8
	}
	return 0
}

// String returns the ONNX-style name of the type, such as "float32".
func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Uint8:
		return "uint8"
	case Int8:
		return "int8"
	case Uint16:
		return "uint16"
	case Int16:
		return "int16"
	case Int32:
		return "int32"
	case Int64:
		return "int64"
	case String:
		return "string"
	case Bool:
		return "bool"
	case Float16:
		return "float16"
	case Float64:
		return "float64"
	case Uint32:
		return "uint32"
	case Uint64:
		return "uint64"
	case BFloat16:
		return "bfloat16"
	}
	return "undefined"
}

// ValueID indexes Graph.Values. NoValue marks an absent optional input.
type ValueID int32

// NoValue is the ValueID of an omitted optional input ("" in ONNX).
const NoValue ValueID = -1

// Dim is one declared dimension: a fixed size, or a symbolic name such as "batch".
// A Dim with Value < 0 and Param == "" is unknown.
type Dim struct {
	Value int64
	Param string
}

// String returns the dim's size, its symbolic name, or "?" when it is unknown.
func (d Dim) String() string {
	switch {
	case d.Param != "":
		return d.Param
	case d.Value < 0:
		return "?"
	}
	return strconv.FormatInt(d.Value, 10)
}

// ValueKind says where a value comes from.
type ValueKind uint8

// The kinds of value.
const (
	Activation  ValueKind = iota // produced by a node
	Input                        // a graph input that is not an initializer
	Initializer                  // a weight, bias or buffer: resident, never produced
	Constant                     // produced by a Constant node: small, folded
)

// Value is one named tensor of the graph.
type Value struct {
	ID    ValueID
	Name  string
	Kind  ValueKind
	DType DType
	// Dims are the declared dims: those of the initializer, the graph input or
	// output, or a value_info entry; nil when the graph declares none.
	Dims []Dim
	// Data holds the integer contents of small Initializer and Constant values
	// (at most 64 elements of an integer or float type, converted to int64 with
	// floats truncated only when they are whole), for constant folding; nil
	// otherwise.
	Data []int64
	// Floats holds the same small contents as float64, for float constants such
	// as Resize scales; nil otherwise.
	Floats []float64
	// Producer is the node that writes the value, or -1.
	Producer int32
	// Consumers are the nodes that read the value, in node order, one entry per
	// read (a node that reads it twice appears twice).
	Consumers []int32
}

// AttrKind is the type of an attribute.
type AttrKind uint8

// The attribute types onnxmem keeps.
const (
	AttrInt AttrKind = iota + 1
	AttrFloat
	AttrString
	AttrInts
	AttrFloats
	AttrTensor
)

// Attr is one node attribute. Tensor attributes (Constant's value) keep dtype,
// dims and, when small, integer or float contents.
type Attr struct {
	Name   string
	Kind   AttrKind
	Int    int64
	Float  float64
	Str    string
	Ints   []int64
	Floats []float64
	// For AttrTensor:
	DType DType
	Dims  []int64
	Data  []int64
	FData []float64
}

// Node is one operator application.
type Node struct {
	ID      int32
	Name    string
	OpType  string
	Domain  string
	Inputs  []ValueID
	Outputs []ValueID
	// Attrs are in the order the file lists them.
	Attrs []Attr
	// Layer is the node's top-level layer, which a model family assigns with
	// Graph.AssignLayers, or -1.
	Layer int
	// Scopes are the module paths that a dynamo export records in the node's
	// metadata_props ("namespace", "pkg.torch.onnx.name_scopes"), in file
	// order.
	Scopes []string
}

// Attr returns the named attribute and whether it is present.
func (n *Node) Attr(name string) (Attr, bool) {
	for _, a := range n.Attrs {
		if a.Name == name {
			return a, true
		}
	}
	return Attr{}, false
}

// IntAttr returns the named integer attribute, or def when it is absent.
func (n *Node) IntAttr(name string, def int64) int64 {
	if a, ok := n.Attr(name); ok && a.Kind == AttrInt {
		return a.Int
	}
	return def
}

// IntsAttr returns the named integer-list attribute, or nil when it is absent.
func (n *Node) IntsAttr(name string) []int64 {
	if a, ok := n.Attr(name); ok && a.Kind == AttrInts {
		return a.Ints
	}
	return nil
}

// Graph is a decoded ONNX graph with nodes in topological order.
type Graph struct {
	// Name is the graph's name; ProducerName and Opset come from the model.
	Name         string
	ProducerName string
	Opset        int64
	Values       []Value
	// Nodes are in a topological order: the file's order when it already is
	// one, which is the case for every exporter seen so far.
	Nodes   []Node
	Inputs  []ValueID // graph inputs that are not initializers, in file order
	Outputs []ValueID // graph outputs, in file order

	// ops caches each node's op kind for Infer; Load fills it.
	ops []opKind
}

// FromInputs reports, by value, whether the value depends on one of the
// graph's inputs; the others are computed from initializers and constants
// alone: a model's parameters, or a table made from them (Swin V2's qkv
// bias, a clone of a parameter with a third zeroed). It walks the nodes in
// their topological order.
func (g *Graph) FromInputs() []bool {
	from := make([]bool, len(g.Values))
	for _, v := range g.Inputs {
		from[v] = true
	}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		for _, v := range n.Inputs {
			if v != NoValue && from[v] {
				for _, o := range n.Outputs {
					if o != NoValue {
						from[o] = true
					}
				}
				break
			}
		}
	}
	return from
}

// Lookup returns the ID of the value with the given name. It scans the values:
// it is meant for tools and tests, not for hot paths.
func (g *Graph) Lookup(name string) (ValueID, bool) {
	for i := range g.Values {
		if g.Values[i].Name == name {
			return ValueID(i), true
		}
	}
	return NoValue, false
}

// Shapes are the concrete dims and dtypes of every value at one binding of the
// symbolic dims, as computed by Graph.Infer. The slices are indexed by ValueID.
// Values may share a dims or data slice: treat them as read-only.
type Shapes struct {
	Dims   [][]int64
	DTypes []DType
	// Data is the folded integer contents of shape-arithmetic values (Shape,
	// Gather, Cast, Concat, … of small integer tensors); nil where the value is
	// not a small constant.
	Data [][]int64

	// floats is the folded contents of float values (Resize scales, Range
	// bounds), which Data holds only when they are whole.
	floats [][]float64
}

// Elems returns the element count of value v.
func (s *Shapes) Elems(v ValueID) int64 {
	n := int64(1)
	for _, d := range s.Dims[v] {
		n *= d
	}
	return n
}

// Bytes returns the byte size of value v: its elements times its dtype's size.
func (s *Shapes) Bytes(v ValueID) int64 {
	return s.Elems(v) * s.DTypes[v].Size()
}
