// Tests of decoding, numbering, layers, and the errors of Load.

package ir

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
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

func TestLayerIn(t *testing.T) {
	for s, want := range map[string]int{
		"/model.3/cv1/conv/Conv":        3,
		"model.22.cv3.0.0.conv.bias":    22,
		"/model.12/Concat":              12,
		"['', 'model.7', 'model.7.bn']": 7,
		": models.yolo.DetectionModel/model.38: models.yolo.DualDDetect/cat_61": 38,
		"onnx::Split_2586":     -1,
		"submodel.3/x":         -1,
		"/model.x/Conv":        -1,
		"/model.3a/Conv":       -1,
		"Concat_1":             -1,
		"model.":               -1,
		"/backbone/model.9999": 9999,
	} {
		if got := layerIn(s); got != want {
			t.Errorf("layerIn(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestMetadataLayer(t *testing.T) {
	m := newModel(18).input("x", Float32, 1).node("Relu", "node_Relu_1", "x", "y")
	// metadata_props (field 9) is unknown to the binding: append it raw.
	entry := []byte{0x0a, 9}
	entry = append(entry, "namespace"...)
	value := ": models.yolo.DetectionModel/model.4: models.common.ADown/relu"
	entry = append(append(entry, 0x12, byte(len(value))), value...)
	field := append([]byte{9<<3 | 2, byte(len(entry))}, entry...)
	m.g.Node[0].ProtoReflect().SetUnknown(field)
	g := m.load(t)
	if g.Nodes[0].Layer != 4 {
		t.Errorf("layer %d, want 4", g.Nodes[0].Layer)
	}
}
