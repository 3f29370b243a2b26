// Tests of decoding, numbering, layers, and the errors of Load.

package ir

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnx"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// small3 is a three-node model with an external weight, an embedded small
// initializer and a Constant, named the way TorchScript exports name things.
func small3() *model {
	return newModel(17).input("images", Float32, "batch", 3, 8, 8).
		init("model.0.conv.weight", Float32, []int64{4, 3, 1, 1}).
		init("scale", Float32, []int64{2}, 0.5, 2).
		node("Conv", "/model.0/conv/Conv", "images,model.0.conv.weight", "c",
			onnxbuild.IntsAttr("strides", 1, 1), onnxbuild.IntsAttr("kernel_shape", 1, 1), onnxbuild.IntAttr("group", 1)).
		constant("two", Int64, []int64{1}, 2).
		node("Identity", "Identity_7", "scale", "model.5.scale").
		node("Mul", "/model.1/Mul", "c,c", "y").
		output("y")
}

// testLayer finds "model.i" after a slash or at the start of s, as a family
// would.
func testLayer(s string) int {
	s = strings.TrimPrefix(s, "/")
	if !strings.HasPrefix(s, "model.") {
		return -1
	}
	l, rest := 0, s[len("model."):]
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		l = 10*l + int(rest[i]-'0')
		i++
	}
	if i == 0 {
		return -1
	}
	return l
}

func TestLoadStructure(t *testing.T) {
	g := small3().load(t)
	var names []string
	for _, v := range g.Values {
		names = append(names, v.Name)
	}
	want := []string{"images", "model.0.conv.weight", "scale", "c", "two", "model.5.scale", "y"}
	if !slices.Equal(names, want) {
		t.Fatalf("values %v, want %v", names, want)
	}
	if g.Opset != 17 || g.ProducerName != "ir-test" || g.Name != "test" {
		t.Errorf("opset %d, producer %q, name %q", g.Opset, g.ProducerName, g.Name)
	}
	if !slices.Equal(g.Inputs, []ValueID{0}) || !slices.Equal(g.Outputs, []ValueID{6}) {
		t.Errorf("inputs %v, outputs %v", g.Inputs, g.Outputs)
	}
	c := g.Values[3]
	if c.Producer != 0 || !slices.Equal(c.Consumers, []int32{3, 3}) || c.Kind != Activation {
		t.Errorf("c: producer %d, consumers %v, kind %v", c.Producer, c.Consumers, c.Kind)
	}
	if w := g.Values[1]; w.Kind != Initializer || w.Data != nil || w.Floats != nil || w.Dims[0] != (Dim{Value: 4}) {
		t.Errorf("external weight: %+v", w)
	}
	if s := g.Values[2]; !slices.Equal(s.Floats, []float64{0.5, 2}) || s.Data != nil {
		t.Errorf("small initializer: floats %v, data %v", s.Floats, s.Data)
	}
	if two := g.Values[4]; two.Kind != Constant || two.DType != Int64 || !slices.Equal(two.Data, []int64{2}) {
		t.Errorf("constant: %+v", two)
	}
	if in := g.Values[0].Dims; in[0] != (Dim{Value: -1, Param: "batch"}) || in[1] != (Dim{Value: 3}) {
		t.Errorf("input dims %v", in)
	}
	// Layers from the node name, none, an output name, the node name; the
	// Mul's layer would come from its producer if its name gave none.
	g.AssignLayers(testLayer)
	var layers []int
	for _, n := range g.Nodes {
		layers = append(layers, n.Layer)
	}
	if want := []int{0, -1, 5, 1}; !slices.Equal(layers, want) {
		t.Errorf("layers %v, want %v", layers, want)
	}
	conv := &g.Nodes[0]
	var attrs []string
	for _, a := range conv.Attrs {
		attrs = append(attrs, a.Name)
	}
	if !slices.Equal(attrs, []string{"strides", "kernel_shape", "group"}) || conv.IntAttr("group", 0) != 1 || conv.IntAttr("absent", 9) != 9 {
		t.Errorf("attrs %v", attrs)
	}
	if a, _ := g.Nodes[1].Attr("value"); a.Kind != AttrTensor || a.DType != Int64 || !slices.Equal(a.Dims, []int64{1}) || !slices.Equal(a.Data, []int64{2}) {
		t.Errorf("constant attribute %+v", a)
	}
}

func TestLoadSortsNodes(t *testing.T) {
	m := small3()
	slices.Reverse(m.g.Node)
	g := m.load(t)
	pos := map[string]int{}
	for i, n := range g.Nodes {
		pos[n.Name] = i
		if n.ID != int32(i) {
			t.Errorf("node %q has ID %d at %d", n.Name, n.ID, i)
		}
	}
	if pos["/model.0/conv/Conv"] > pos["/model.1/Mul"] {
		t.Errorf("order %v", pos)
	}
	if _, err := g.Infer(Binding{Batch: 2}); err != nil {
		t.Fatal(err)
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name string
		data func(t *testing.T) []byte
		want []string
	}{
		{"empty", func(*testing.T) []byte { return nil }, []string{"no graph or no nodes"}},
		{"text", func(*testing.T) []byte { return []byte("definitely not an onnx model\n") }, []string{"ir: not an ONNX model"}},
		{"no nodes", func(t *testing.T) []byte { return newModel(17).input("x", Float32, 1).bytes(t) }, []string{"no graph or no nodes"}},
		{"no opset", func(t *testing.T) []byte { m := small3(); m.opset = 0; return m.bytes(t) }, []string{"no default-domain opset"}},
		{
			"missing input",
			func(t *testing.T) []byte {
				return newModel(17).input("x", Float32, 1).node("Add", "adder", "x,ghost", "y").bytes(t)
			},
			[]string{`ir: node "adder": missing input "ghost"`},
		},
		{
			"missing graph output",
			func(t *testing.T) []byte {
				return newModel(17).input("x", Float32, 1).node("Relu", "r", "x", "y").output("z").bytes(t)
			},
			[]string{`graph output "z"`},
		},
		{
			"cycle",
			func(t *testing.T) []byte {
				return newModel(17).input("x", Float32, 1).
					node("Relu", "entry", "x", "a").
					node("Add", "loop-add", "a,c", "b").
					node("Relu", "loop-relu", "b", "c").bytes(t)
			},
			[]string{"ir: the graph has a cycle through node \"loop-"},
		},
		{
			"self loop",
			func(t *testing.T) []byte {
				return newModel(17).input("x", Float32, 1).node("Add", "me", "x,y", "y").bytes(t)
			},
			[]string{`cycle through node "me"`},
		},
		{
			"duplicate producers",
			func(t *testing.T) []byte {
				return newModel(17).input("x", Float32, 1).node("Relu", "one", "x", "y").node("Relu", "two", "x", "y").bytes(t)
			},
			[]string{`ir: value "y" has two producers: nodes "one" and "two"`},
		},
		{
			"node overwrites an input",
			func(t *testing.T) []byte {
				return newModel(17).input("x", Float32, 1).node("Relu", "r", "x", "x").bytes(t)
			},
			[]string{`node "r" writes "x", which is a graph input`},
		},
		{
			"negative initializer dim",
			func(t *testing.T) []byte {
				return newModel(17).input("x", Float32, 1).init("w", Float32, []int64{3, -2}).node("Add", "a", "x,w", "y").bytes(t)
			},
			[]string{`ir: initializer "w": negative dim -2 at axis 1`},
		},
		{
			"negative input dim",
			func(t *testing.T) []byte {
				return newModel(17).input("x", Float32, 2, -5).node("Relu", "r", "x", "y").bytes(t)
			},
			[]string{`ir: value "x": negative dim -5 at axis 1`},
		},
		{
			"overflowing initializer",
			func(t *testing.T) []byte {
				return newModel(17).input("x", Float32, 1).init("w", Float32, []int64{1 << 40, 1 << 40}).node("Add", "a", "x,w", "y").bytes(t)
			},
			[]string{`initializer "w": element count`, "overflows int64"},
		},
		{
			"initializer whose bytes overflow",
			func(t *testing.T) []byte {
				return newModel(17).input("x", Float32, 1).init("w", Float32, []int64{1 << 62}).node("Add", "a", "x,w", "y").bytes(t)
			},
			[]string{`initializer "w": dims [4611686018427387904] of float32: its size in bytes overflows int64`},
		},
		{
			"raw data of the wrong length",
			func(t *testing.T) []byte {
				m := newModel(17).input("x", Float32, 1).init("w", Float32, []int64{3}, 1, 2, 3).node("Add", "a", "x,w", "y")
				m.g.Initializer[0].RawData = m.g.Initializer[0].RawData[:5]
				return m.bytes(t)
			},
			[]string{"raw data has 5 bytes"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.data(t))
			wantError(t, err, tc.want...)
		})
	}
}

func TestLoadGarbage(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		data := make([]byte, 1+r.IntN(4096))
		for j := range data {
			data[j] = byte(r.UintN(256))
		}
		if _, err := Load(data); err == nil || !strings.HasPrefix(err.Error(), "ir: ") {
			t.Fatalf("random bytes %d: error %v", i, err)
		}
	}
	// Every proper prefix of a model is an error, never a panic or a graph.
	data := small3().bytes(t)
	for n := range len(data) {
		if _, err := Load(data[:n]); err == nil || !strings.HasPrefix(err.Error(), "ir: ") {
			t.Fatalf("%d of %d bytes: error %v", n, len(data), err)
		}
	}
}

func TestLoadFileError(t *testing.T) {
	if _, err := LoadFile("no/such/model.onnx"); err == nil || !strings.HasPrefix(err.Error(), "ir: ") {
		t.Errorf("error %v", err)
	}
}

// TestMetadataScopes checks that Load reads a dynamo export's module paths
// from the nodes' metadata_props into Node.Scopes, and that AssignLayers
// reads them after the node name.
func TestMetadataScopes(t *testing.T) {
	m := newModel(18).input("x", Float32, 1).node("Relu", "node_Relu_1", "x", "y")
	for _, kv := range [][2]string{{"namespace", ": nets.Net/blocks.4: nets.Down/relu"}, {"other", "x"}, {"pkg.torch.onnx.name_scopes", "['', 'blocks.4']"}} {
		m.g.Node[0].MetadataProps = append(m.g.Node[0].MetadataProps, &onnx.StringStringEntryProto{Key: kv[0], Value: kv[1]})
	}
	g := m.load(t)
	n := &g.Nodes[0]
	if want := []string{": nets.Net/blocks.4: nets.Down/relu", "['', 'blocks.4']"}; !slices.Equal(n.Scopes, want) {
		t.Errorf("scopes %q, want %q", n.Scopes, want)
	}
	if n.Layer != -1 {
		t.Errorf("layer %d after Load, want -1: layers are the family's", n.Layer)
	}
	var asked []string
	g.AssignLayers(func(s string) int {
		asked = append(asked, s)
		if strings.Contains(s, "blocks.4") {
			return 4
		}
		return -1
	})
	if n.Layer != 4 || !slices.Equal(asked, []string{"node_Relu_1", ": nets.Net/blocks.4: nets.Down/relu"}) {
		t.Errorf("layer %d after asking %q; want 4 after the name and the first scope", n.Layer, asked)
	}
}

// TestLoadTooManyNodes checks that a graph of more than MaxNodes nodes is
// refused before its nodes are decoded, and that the count Load checks is
// the graph's.
func TestLoadTooManyNodes(t *testing.T) {
	var graph []byte
	for range MaxNodes + 1 {
		graph = protowire.AppendTag(graph, 1, protowire.BytesType)
		graph = protowire.AppendBytes(graph, nil) // an empty NodeProto
	}
	model := protowire.AppendTag(nil, 7, protowire.BytesType)
	model = protowire.AppendBytes(model, graph)
	_, err := Load(model)
	if err == nil || !strings.Contains(err.Error(), "ir: the graph has 1048577 nodes, more than the 1048576") {
		t.Fatalf("error %v", err)
	}
	data := small3().bytes(t)
	var m onnx.ModelProto
	if err := proto.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	want := len(m.GetGraph().GetNode())
	if n := countNodes(data); n != want {
		t.Errorf("countNodes: %d, the model has %d", n, want)
	}
	for n := range len(data) {
		if c := countNodes(data[:n]); c > want {
			t.Fatalf("countNodes of %d of %d bytes: %d", n, len(data), c)
		}
	}
}
