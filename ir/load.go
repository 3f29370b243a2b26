// Decoding ONNX bytes into a Graph.
//
// Load reads only structure: names, op types, attributes, element types and dims.
// Initializers that point to external data keep their dims and dtype; their data
// files are never opened. Small embedded tensors (at most 64 elements) keep their
// contents for constant folding.
//
// The checks are those that would otherwise surface as wrong numbers far away:
// a model with no graph or no nodes (what garbage bytes usually decode to), a node
// input that nothing defines, a value with two producers, a negative declared dim
// and a cycle. Nodes are put in a topological order when the file's is not one.

package ir

import (
	"errors"
	"fmt"
	"os"

	"github.com/onnxmem/onnxmem/internal/onnx"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// MaxNodes is the most nodes a graph may have for Load: about 4.5 KiB of
// memory each (BenchmarkMillionNodes: 4.4 GiB for 1,000,000) bounds what a
// simulation takes, where real networks have thousands of nodes.
const MaxNodes = 1 << 20

// maxSmall is the most elements a tensor may have for Load to keep its contents.
const maxSmall = 64

// LoadFile reads and decodes the ONNX model at path; see Load.
func LoadFile(path string) (*Graph, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ir: %w", err)
	}
	g, err := Load(data)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return g, nil
}

// Load decodes a serialized ONNX ModelProto into a Graph.
//
// It fails, with an error starting "ir: ", on bytes that are not an ONNX model
// (including a model without opset, graph or nodes), on a node input or graph
// output that nothing defines ("missing input"), on a value defined twice, on a
// negative dim in an initializer or a graph input, and on a cycle. Unsupported op
// types load fine; Infer reports them.
func Load(data []byte) (*Graph, error) {
	// Count the nodes before decoding them, which takes memory for each.
	if n := countNodes(data); n > MaxNodes {
		return nil, fmt.Errorf("ir: the graph has %d nodes, more than the %d that onnxmem simulates (networks have thousands): check that this is the export you meant", n, MaxNodes)
	}
	var m onnx.ModelProto
	if err := proto.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("ir: not an ONNX model (truncated or corrupt bytes?): %w", err)
	}
	pg := m.GetGraph()
	if pg == nil || len(pg.GetNode()) == 0 {
		return nil, errors.New("ir: not an ONNX model: no graph or no nodes")
	}
	g := &Graph{Name: pg.GetName(), ProducerName: m.GetProducerName(), Opset: -1}
	for _, o := range m.GetOpsetImport() {
		if d := o.GetDomain(); d == "" || d == "ai.onnx" {
			g.Opset = o.GetVersion()
		}
	}
	if g.Opset <= 0 {
		return nil, errors.New("ir: not an ONNX model (truncated?): no default-domain opset import")
	}
	n := len(pg.GetInput()) + len(pg.GetInitializer())
	for _, node := range pg.GetNode() {
		n += len(node.GetOutput())
	}
	g.Values = make([]Value, 0, n)
	l := loader{g: g, ids: make(map[string]ValueID, n)}
	if err := l.values(pg); err != nil {
		return nil, err
	}
	order, err := l.order(pg.GetNode())
	if err != nil {
		return nil, err
	}
	if err := l.nodes(pg.GetNode(), order); err != nil {
		return nil, err
	}
	if err := l.declare(pg); err != nil {
		return nil, err
	}
	g.ops = make([]opKind, len(g.Nodes))
	for i := range g.Nodes {
		g.ops[i] = shapeKindOf(&g.Nodes[i])
	}
	return g, nil
}

// CheckEnds refuses graphs whose ends a training step cannot use: no
// outputs, an output that is a graph input or an initializer (it goes
// through no op), an input or initializer of a type onnxmem does not know.
func (g *Graph) CheckEnds() error {
	if len(g.Outputs) == 0 {
		return errors.New("ir: the graph has no outputs: a step's loss needs at least one; export the model with its outputs")
	}
	for _, o := range g.Outputs {
		if k := g.Values[o].Kind; k == Input || k == Initializer {
			return fmt.Errorf("ir: graph output %q is a graph input or initializer itself, which no op computes: export the model's real outputs", g.Values[o].Name)
		}
	}
	for _, v := range g.Inputs {
		if dt := g.Values[v].DType; !dt.IsFloat() && dt != Int64 && dt != Int32 {
			return fmt.Errorf("ir: graph input %q has type %v: onnxmem simulates float inputs (images as float32, float16 or bfloat16) and integer ones (int64 or int32 token ids); export with one of those", g.Values[v].Name, dt)
		}
	}
	for i := range g.Values {
		if v := &g.Values[i]; v.Kind == Initializer && v.DType.Size() == 0 {
			return fmt.Errorf("ir: initializer %q has type %v, whose size onnxmem does not know", v.Name, v.DType)
		}
	}
	return nil
}

// loader holds the name index while a Graph is built; the Graph keeps no map.
type loader struct {
	g   *Graph
	ids map[string]ValueID
	// producer maps a node-output name to the file index of its node.
	producer map[string]int
}

// add creates a value; the caller has checked that the name is new.
func (l *loader) add(name string, kind ValueKind) *Value {
	id := ValueID(len(l.g.Values))
	l.ids[name] = id
	l.g.Values = append(l.g.Values, Value{ID: id, Name: name, Kind: kind, Producer: -1})
	return &l.g.Values[id]
}

// values numbers graph inputs and initializers, in that order.
func (l *loader) values(pg *onnx.GraphProto) error {
	inits := make(map[string]bool, len(pg.GetInitializer()))
	for _, t := range pg.GetInitializer() {
		if inits[t.GetName()] {
			return fmt.Errorf("ir: initializer %q is defined twice", t.GetName())
		}
		inits[t.GetName()] = true
	}
	for _, in := range pg.GetInput() {
		name := in.GetName()
		if _, dup := l.ids[name]; dup {
			return fmt.Errorf("ir: graph input %q is listed twice", name)
		}
		kind := Input
		if inits[name] {
			kind = Initializer // IR < 4 lists initializers among the inputs
		}
		v := l.add(name, kind)
		if err := declareType(v, in); err != nil {
			return err
		}
		if kind == Input {
			l.g.Inputs = append(l.g.Inputs, v.ID)
		}
	}
	for _, t := range pg.GetInitializer() {
		id, ok := l.ids[t.GetName()]
		if !ok {
			id = l.add(t.GetName(), Initializer).ID
		}
		v := &l.g.Values[id]
		dt, dims, ints, floats, err := tensor(t)
		if err != nil {
			return fmt.Errorf("ir: initializer %q: %w", t.GetName(), err)
		}
		if _, ok := elemsOK(dims, dt); !ok {
			return fmt.Errorf("ir: initializer %q: dims %v of %v: its size in bytes overflows int64, so no file or card holds it: the export is broken", t.GetName(), dims, dt)
		}
		v.DType, v.Dims, v.Data, v.Floats = dt, fixedDims(dims), ints, floats
	}
	return nil
}

// order returns the file indexes of the nodes in a topological order: the file's
// own when it is one, else a depth-first order that follows the file's where it
// can. It also reports missing inputs, duplicate producers and cycles.
func (l *loader) order(nodes []*onnx.NodeProto) ([]int, error) {
	l.producer = make(map[string]int, 2*len(nodes))
	for i, n := range nodes {
		if n.GetOpType() == "" {
			return nil, fmt.Errorf("ir: not an ONNX model: node %d has no op type", i)
		}
		for _, o := range n.GetOutput() {
			if o == "" {
				continue
			}
			if j, dup := l.producer[o]; dup {
				return nil, fmt.Errorf("ir: value %q has two producers: nodes %q and %q", o, nodeName(nodes[j], j), nodeName(n, i))
			}
			if _, dup := l.ids[o]; dup {
				return nil, fmt.Errorf("ir: node %q writes %q, which is a graph input or initializer", nodeName(n, i), o)
			}
			l.producer[o] = i
		}
	}
	sorted := true
	for i, n := range nodes {
		for _, in := range n.GetInput() {
			if in == "" {
				continue
			}
			j, produced := l.producer[in]
			if !produced {
				if _, ok := l.ids[in]; !ok {
					return nil, fmt.Errorf("ir: node %q: missing input %q: no node, graph input or initializer defines it", nodeName(n, i), in)
				}
				continue
			}
			if j >= i {
				sorted = false
			}
		}
	}
	order := make([]int, len(nodes))
	for i := range order {
		order[i] = i
	}
	if sorted {
		return order, nil
	}
	return l.sort(nodes, order[:0])
}

// sort is an iterative depth-first topological sort. A node met again while it
// is still on the stack closes a cycle, and that node is on the cycle.
func (l *loader) sort(nodes []*onnx.NodeProto, order []int) ([]int, error) {
	const (
		unseen = iota
		open
		done
	)
	state := make([]uint8, len(nodes))
	type frame struct{ node, next int }
	var stack []frame
	for root := range nodes {
		if state[root] != unseen {
			continue
		}
		stack = append(stack[:0], frame{node: root})
		state[root] = open
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			ins := nodes[f.node].GetInput()
			if f.next == len(ins) {
				state[f.node] = done
				order = append(order, f.node)
				stack = stack[:len(stack)-1]
				continue
			}
			in := ins[f.next]
			f.next++
			j, ok := l.producer[in]
			if !ok || in == "" {
				continue
			}
			switch state[j] {
			case open:
				return nil, fmt.Errorf("ir: the graph has a cycle through node %q (%s)", nodeName(nodes[j], j), nodes[j].GetOpType())
			case unseen:
				state[j] = open
				stack = append(stack, frame{node: j})
			}
		}
	}
	return order, nil
}

// nodes builds g.Nodes in the given order, numbering their outputs as it goes.
func (l *loader) nodes(pnodes []*onnx.NodeProto, order []int) error {
	g := l.g
	g.Nodes = make([]Node, len(order))
	for id, fi := range order {
		pn := pnodes[fi]
		n := &g.Nodes[id]
		n.ID, n.Name, n.OpType, n.Domain = int32(id), pn.GetName(), pn.GetOpType(), pn.GetDomain()
		n.Outputs = make([]ValueID, len(pn.GetOutput()))
		for k, o := range pn.GetOutput() {
			n.Outputs[k] = NoValue
			if o != "" {
				v := l.add(o, Activation)
				v.Producer = n.ID
				n.Outputs[k] = v.ID
			}
		}
		attrs, err := attributes(pn.GetAttribute())
		if err != nil {
			return fmt.Errorf("ir: node %q: %w", nodeName(pn, fi), err)
		}
		n.Attrs = attrs
		if n.OpType == "Constant" && n.Domain == "" && len(n.Outputs) == 1 && n.Outputs[0] != NoValue {
			constantValue(&g.Values[n.Outputs[0]], attrs)
		}
	}
	// Inputs are resolved once every output has its ID: in a file that was not in
	// topological order a node may read a value that a later node of the file
	// writes.
	for id, fi := range order {
		n := &g.Nodes[id]
		n.Inputs = make([]ValueID, len(pnodes[fi].GetInput()))
		for k, in := range pnodes[fi].GetInput() {
			n.Inputs[k] = NoValue
			if in != "" {
				v := l.ids[in]
				n.Inputs[k] = v
				g.Values[v].Consumers = append(g.Values[v].Consumers, n.ID)
			}
		}
		n.Layer = -1
		n.Scopes = metadataScopes(pnodes[fi])
	}
	return nil
}

// declare applies value_info and graph outputs, and lists the graph outputs.
func (l *loader) declare(pg *onnx.GraphProto) error {
	for _, vi := range pg.GetValueInfo() {
		if id, ok := l.ids[vi.GetName()]; ok {
			if err := declareType(&l.g.Values[id], vi); err != nil {
				return err
			}
		}
	}
	for _, out := range pg.GetOutput() {
		id, ok := l.ids[out.GetName()]
		if !ok {
			return fmt.Errorf("ir: missing input: graph output %q is not defined by any node, graph input or initializer", out.GetName())
		}
		if err := declareType(&l.g.Values[id], out); err != nil {
			return err
		}
		l.g.Outputs = append(l.g.Outputs, id)
	}
	return nil
}

// declareType fills a value's dtype and dims from a ValueInfoProto, keeping what
// an earlier, more authoritative source (an initializer, a Constant) has set.
func declareType(v *Value, vi *onnx.ValueInfoProto) error {
	tt := vi.GetType().GetTensorType()
	if tt == nil {
		return nil
	}
	if v.DType == Undefined {
		v.DType = DType(tt.GetElemType())
	}
	shape := tt.GetShape()
	if v.Dims != nil || shape == nil {
		return nil
	}
	v.Dims = make([]Dim, len(shape.GetDim()))
	for i, d := range shape.GetDim() {
		switch x := d.GetValue().(type) {
		case *onnx.TensorShapeProto_Dimension_DimValue:
			if x.DimValue < 0 {
				return fmt.Errorf("ir: value %q: negative dim %d at axis %d", v.Name, x.DimValue, i)
			}
			v.Dims[i] = Dim{Value: x.DimValue}
		case *onnx.TensorShapeProto_Dimension_DimParam:
			v.Dims[i] = Dim{Value: -1, Param: x.DimParam}
		default:
			v.Dims[i] = Dim{Value: -1}
		}
	}
	return nil
}

// nodeName is a node's name, or a stand-in for an unnamed one.
func nodeName(n *onnx.NodeProto, fileIndex int) string {
	if n.GetName() != "" {
		return n.GetName()
	}
	return fmt.Sprintf("#%d %s", fileIndex, n.GetOpType())
}

// attributes converts a node's attributes, in file order. Attribute types that
// no supported op uses (graphs, strings lists, sparse tensors, type protos) are
// dropped.
func attributes(pas []*onnx.AttributeProto) ([]Attr, error) {
	attrs := make([]Attr, 0, len(pas))
	for _, pa := range pas {
		a := Attr{Name: pa.GetName()}
		switch pa.GetType() {
		case onnx.AttributeProto_INT:
			a.Kind, a.Int = AttrInt, pa.GetI()
		case onnx.AttributeProto_FLOAT:
			a.Kind, a.Float = AttrFloat, float64(pa.GetF())
		case onnx.AttributeProto_STRING:
			a.Kind, a.Str = AttrString, string(pa.GetS())
		case onnx.AttributeProto_INTS:
			a.Kind, a.Ints = AttrInts, pa.GetInts()
		case onnx.AttributeProto_FLOATS:
			a.Kind, a.Floats = AttrFloats, make([]float64, len(pa.GetFloats()))
			for i, f := range pa.GetFloats() {
				a.Floats[i] = float64(f)
			}
		case onnx.AttributeProto_TENSOR:
			dt, dims, ints, floats, err := tensor(pa.GetT())
			if err != nil {
				return nil, fmt.Errorf("attribute %q: %w", a.Name, err)
			}
			a.Kind, a.DType, a.Dims, a.Data, a.FData = AttrTensor, dt, dims, ints, floats
		default:
			continue
		}
		attrs = append(attrs, a)
	}
	return attrs, nil
}

// constantValue sets the kind, dtype, dims and contents of a Constant's output
// from its value attribute (value, value_int(s) or value_float(s)).
func constantValue(v *Value, attrs []Attr) {
	dt, dims, ints, floats, ok := constantOf(attrs)
	if !ok {
		return
	}
	v.Kind, v.DType, v.Dims, v.Data, v.Floats = Constant, dt, fixedDims(dims), ints, floats
}

// fixedDims converts concrete dims to Dims.
func fixedDims(dims []int64) []Dim {
	d := make([]Dim, len(dims))
	for i, x := range dims {
		d[i] = Dim{Value: x}
	}
	return d
}

// small returns s when it has at most maxSmall elements, else nil.
func small[T any](s []T) []T {
	if len(s) > maxSmall {
		return nil
	}
	return s
}

// countNodes returns the number of nodes of the graph that a serialized
// ModelProto holds (ModelProto.graph is field 7, GraphProto.node field 1),
// reading only the fields' tags and lengths; on malformed bytes it returns
// what it counted, and proto.Unmarshal reports the error.
func countNodes(data []byte) int {
	n := 0
	forField(data, func(num protowire.Number, typ protowire.Type, v []byte) {
		if num == 7 && typ == protowire.BytesType {
			forField(v, func(num protowire.Number, typ protowire.Type, _ []byte) {
				if num == 1 && typ == protowire.BytesType {
					n++
				}
			})
		}
	})
	return n
}

// forField calls f with each field of a serialized message: its number,
// wire type and, for a length-delimited field, its bytes. It stops at the
// first malformed field.
func forField(b []byte, f func(protowire.Number, protowire.Type, []byte)) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return
		}
		f(num, typ, v)
		b = b[n:]
	}
}
