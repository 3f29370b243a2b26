package models

import (
	"bytes"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onnxmem/onnxmem/family/yolov9"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/ir"
)

// exported lists the models that have a training export in the shared
// data, yolov9/NAME-train.onnx.
var exported = []string{"yolov9-t", "yolov9-s", "yolov9-m", "yolov9-c", "yolov9-e", "gelan-t", "gelan-c"}

// TestEquivalence compares every model that has an export with it: per
// top-level layer the nodes' op types, names, attributes and wiring, the
// weights' names, dims and order, and, at batch 2 and images of 640 and 512,
// the dims and dtype of every node output and of the graph outputs. Both
// graphs are loaded with ir and prepared by the YOLOv9 family (layers
// assigned, the exporter's flattening undone), as onnxmem loads a model. The first difference fails the test.
func TestEquivalence(t *testing.T) {
	for _, name := range exported {
		t.Run(name, func(t *testing.T) {
			export := loadNormalized(t, onnxbuild.Shared(t, "yolov9/"+name+"-train.onnx"), nil)
			data, err := Build(name, Options{})
			if err != nil {
				t.Fatal(err)
			}
			built := loadNormalized(t, "", data)
			if err := equivalent(export, built, []int64{640, 512}); err != nil {
				t.Fatalf("built %s differs from its export: %v", name, err)
			}
		})
	}
}

// loadNormalized loads a model from path, or from data when path is empty,
// and normalizes it.
func loadNormalized(t *testing.T, path string, data []byte) *ir.Graph {
	t.Helper()
	var g *ir.Graph
	var err error
	if path != "" {
		g, err = ir.LoadFile(path)
	} else {
		g, err = ir.Load(data)
	}
	if err != nil {
		t.Fatal(err)
	}
	if g, err = (yolov9.Family{}).Prepare(g); err != nil {
		t.Fatal(err)
	}
	return g
}

// equivalent returns the first difference between graph want (an export)
// and got (a built model), or nil; see TestEquivalence. Nodes are matched by
// position within their layer's node list. Node names must be equal except
// for the constants outside every layer, which the exporter numbers from a
// global counter.
func equivalent(want, got *ir.Graph, sizes []int64) error {
	// Weights, in order.
	wi, gi := initializers(want), initializers(got)
	for k := range max(len(wi), len(gi)) {
		if k >= len(wi) || k >= len(gi) {
			return fmt.Errorf("weights: %d in the export, %d built; the first extra: %s", len(wi), len(gi), describeValue(wi, gi, want, got, k))
		}
		a, b := &want.Values[wi[k]], &got.Values[gi[k]]
		if a.Name != b.Name || a.DType != b.DType || !slices.Equal(a.Dims, b.Dims) {
			return fmt.Errorf("weight %d: export %s %v %v, built %s %v %v", k, a.Name, a.DType, a.Dims, b.Name, b.DType, b.Dims)
		}
	}
	// The value of want that each value of got stands for.
	match := make(map[ir.ValueID]ir.ValueID)
	for k := range min(len(wi), len(gi)) {
		match[wi[k]] = gi[k]
	}
	if len(want.Inputs) != len(got.Inputs) {
		return fmt.Errorf("graph inputs: %d in the export, %d built", len(want.Inputs), len(got.Inputs))
	}
	for k, v := range want.Inputs {
		a, b := &want.Values[v], &got.Values[got.Inputs[k]]
		if a.Name != b.Name || a.DType != b.DType || fmt.Sprint(a.Dims) != fmt.Sprint(b.Dims) {
			return fmt.Errorf("graph input %d: export %s %v %v, built %s %v %v", k, a.Name, a.DType, a.Dims, b.Name, b.DType, b.Dims)
		}
		match[v] = got.Inputs[k]
	}
	// Nodes, layer by layer.
	wl, gl := byLayer(want), byLayer(got)
	layers := func(m map[int][]int32) []int {
		var ls []int
		for l := range m {
			ls = append(ls, l)
		}
		slices.Sort(ls)
		return ls
	}
	if a, b := layers(wl), layers(gl); !slices.Equal(a, b) {
		return fmt.Errorf("layers with nodes: export %v, built %v", a, b)
	}
	type pair struct {
		layer, pos int
		a, b       int32
	}
	var pairs []pair
	for _, l := range layers(wl) {
		wn, gn := wl[l], gl[l]
		for k := range max(len(wn), len(gn)) {
			if k >= len(wn) || k >= len(gn) {
				return fmt.Errorf("layer %d: %d nodes in the export, %d built; op types: export %v, built %v", l, len(wn), len(gn), opTypes(want, wn), opTypes(got, gn))
			}
			a, b := &want.Nodes[wn[k]], &got.Nodes[gn[k]]
			where := fmt.Sprintf("layer %d, node %d: export %s %q, built %s %q", l, k, a.OpType, a.Name, b.OpType, b.Name)
			switch {
			case a.OpType != b.OpType || a.Domain != b.Domain:
				return fmt.Errorf("%s: op types differ; layer op types: export %v, built %v", where, opTypes(want, wn), opTypes(got, gn))
			case a.Name != b.Name && !(l < 0 && a.OpType == "Constant"):
				return fmt.Errorf("%s: names differ", where)
			case !reflect.DeepEqual(a.Attrs, b.Attrs):
				return fmt.Errorf("%s: attributes differ: export %+v, built %+v", where, a.Attrs, b.Attrs)
			case len(a.Inputs) != len(b.Inputs) || len(a.Outputs) != len(b.Outputs):
				return fmt.Errorf("%s: %d inputs and %d outputs in the export, %d and %d built", where, len(a.Inputs), len(a.Outputs), len(b.Inputs), len(b.Outputs))
			}
			for j, v := range a.Inputs {
				if v == ir.NoValue || b.Inputs[j] == ir.NoValue {
					if v != b.Inputs[j] {
						return fmt.Errorf("%s: input %d: absent in one graph only", where, j)
					}
					continue
				}
				if m, ok := match[v]; !ok || m != b.Inputs[j] {
					return fmt.Errorf("%s: input %d: export reads %q, built reads %q", where, j, want.Values[v].Name, got.Values[b.Inputs[j]].Name)
				}
			}
			for j, v := range a.Outputs {
				if v != ir.NoValue && b.Outputs[j] != ir.NoValue {
					match[v] = b.Outputs[j]
				}
			}
			pairs = append(pairs, pair{l, k, wn[k], gn[k]})
		}
	}
	if len(want.Outputs) != len(got.Outputs) {
		return fmt.Errorf("graph outputs: %d in the export, %d built", len(want.Outputs), len(got.Outputs))
	}
	for k, v := range want.Outputs {
		if match[v] != got.Outputs[k] {
			return fmt.Errorf("graph output %d: export %q, built %q, which is not the matching value", k, want.Values[v].Name, got.Values[got.Outputs[k]].Name)
		}
	}
	// Shapes.
	for _, size := range sizes {
		bind := ir.Binding{Batch: 2, Height: size, Width: size}
		ws, err := want.Infer(bind)
		if err != nil {
			return fmt.Errorf("export at %+v: %w", bind, err)
		}
		gs, err := got.Infer(bind)
		if err != nil {
			return fmt.Errorf("built at %+v: %w", bind, err)
		}
		for _, p := range pairs {
			a, b := &want.Nodes[p.a], &got.Nodes[p.b]
			for j, v := range a.Outputs {
				u := b.Outputs[j]
				if v == ir.NoValue || u == ir.NoValue {
					continue
				}
				if !slices.Equal(ws.Dims[v], gs.Dims[u]) || ws.DTypes[v] != gs.DTypes[u] {
					return fmt.Errorf("at %+v, layer %d, node %d (%s): output %d: export %q %v %v, built %q %v %v", bind, p.layer, p.pos, a.OpType, j,
						want.Values[v].Name, ws.DTypes[v], ws.Dims[v], got.Values[u].Name, gs.DTypes[u], gs.Dims[u])
				}
			}
		}
		for k, v := range want.Outputs {
			u := got.Outputs[k]
			if !slices.Equal(ws.Dims[v], gs.Dims[u]) || ws.DTypes[v] != gs.DTypes[u] {
				return fmt.Errorf("at %+v: graph output %d: export %v %v, built %v %v", bind, k, ws.DTypes[v], ws.Dims[v], gs.DTypes[u], gs.Dims[u])
			}
		}
	}
	return nil
}

// initializers lists a graph's weights in value order.
func initializers(g *ir.Graph) []ir.ValueID {
	var ids []ir.ValueID
	for i := range g.Values {
		if g.Values[i].Kind == ir.Initializer {
			ids = append(ids, ir.ValueID(i))
		}
	}
	return ids
}

// describeValue names weight k of whichever list has it.
func describeValue(wi, gi []ir.ValueID, want, got *ir.Graph, k int) string {
	if k < len(wi) {
		return "export " + want.Values[wi[k]].Name
	}
	return "built " + got.Values[gi[k]].Name
}

// byLayer lists the nodes of each layer (-1: none) in node order.
func byLayer(g *ir.Graph) map[int][]int32 {
	m := make(map[int][]int32)
	for i := range g.Nodes {
		m[g.Nodes[i].Layer] = append(m[g.Nodes[i].Layer], int32(i))
	}
	return m
}

// opTypes lists the op types of some nodes, abbreviated past 40.
func opTypes(g *ir.Graph, nodes []int32) string {
	var ops []string
	for k, n := range nodes {
		if k == 40 {
			ops = append(ops, fmt.Sprintf("… (%d more)", len(nodes)-k))
			break
		}
		ops = append(ops, g.Nodes[n].OpType)
	}
	return "[" + strings.Join(ops, " ") + "]"
}

// TestBuiltIn builds every model, loads it, infers it at batch 1 and
// 640×640 and checks its outputs: the head maps [1, 64+nc, 640/s, 640/s] at
// strides 8, 16 and 32, twice for YOLOv9; and that Build is deterministic
// and fast.
func TestBuiltIn(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			data, err := Build(name, Options{})
			elapsed := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d bytes in %v", len(data), elapsed)
			again, err := Build(name, Options{})
			if err != nil || !bytes.Equal(data, again) {
				t.Fatalf("a second Build gives other bytes (err %v)", err)
			}
			checkOutputs(t, data, strings.HasPrefix(name, "yolov9"), DefaultClasses)
		})
	}
}

// checkOutputs loads a built model, infers it at batch 1 and 640×640 and
// checks the head maps.
func checkOutputs(t *testing.T, data []byte, dual bool, nc int64) *ir.Graph {
	t.Helper()
	g, err := ir.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	if g.Opset != onnxbuild.Opset || len(g.Inputs) != 1 || fmt.Sprint(g.Values[g.Inputs[0]].Dims) != "[batch 3 height width]" {
		t.Fatalf("opset %d, inputs %v", g.Opset, g.Inputs)
	}
	s, err := g.Infer(ir.Binding{Batch: 1, Height: 640, Width: 640})
	if err != nil {
		t.Fatal(err)
	}
	want := 3
	if dual {
		want = 6
	}
	if len(g.Outputs) != want {
		t.Fatalf("%d outputs, want %d", len(g.Outputs), want)
	}
	for k, o := range g.Outputs {
		side := 640 / (int64(8) << (k % 3))
		if d := s.Dims[o]; !slices.Equal(d, []int64{1, 64 + nc, side, side}) || s.DTypes[o] != ir.Float32 {
			t.Errorf("output %d: %v %v, want float32 [1 %d %d %d]", k, s.DTypes[o], d, 64+nc, side, side)
		}
	}
	return g
}

// TestOptions checks the class count and the zero weights.
func TestOptions(t *testing.T) {
	data, err := Build("gelan-t", Options{Classes: 3, Weights: true})
	if err != nil {
		t.Fatal(err)
	}
	g := checkOutputs(t, data, false, 3)
	// The class branch has max(C, min(2·3, 128)) = C channels: 64 at P3.
	w, ok := g.Lookup("model.22.cv3.0.0.conv.weight")
	if !ok || fmt.Sprint(g.Values[w].Dims) != "[64 64 3 3]" {
		t.Errorf("model.22.cv3.0.0.conv.weight: %v", g.Values[w].Dims)
	}
	// Zero weights: a small one keeps its (zero) contents when loaded.
	w, ok = g.Lookup("model.0.bn.weight")
	if !ok || !slices.Equal(g.Values[w].Floats, make([]float64, 16)) {
		t.Errorf("model.0.bn.weight: %v", g.Values[w].Floats)
	}
	if _, err := Build("yolov9-x", Options{}); err == nil || !strings.Contains(err.Error(), "unknown model") {
		t.Errorf("unknown model: %v", err)
	}
	if _, err := Build("yolov9-c", Options{Classes: -1}); err == nil {
		t.Error("negative class count: no error")
	}
}

// BenchmarkBuild times Build of yolov9-c and yolov9-e.
func BenchmarkBuild(b *testing.B) {
	for _, name := range []string{"yolov9-c", "yolov9-e"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := Build(name, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestEquivalentReports checks that equivalent finds and describes a
// difference in the weights, in an attribute and in the wiring.
func TestEquivalentReports(t *testing.T) {
	export := loadNormalized(t, onnxbuild.Shared(t, "yolov9/yolov9-c-train.onnx"), nil)
	build := func(opt Options) *ir.Graph {
		data, err := Build("yolov9-c", opt)
		if err != nil {
			t.Fatal(err)
		}
		return loadNormalized(t, "", data)
	}
	node := func(g *ir.Graph, name string) *ir.Node {
		for i := range g.Nodes {
			if g.Nodes[i].Name == name {
				return &g.Nodes[i]
			}
		}
		t.Fatalf("no node %s", name)
		return nil
	}
	strided := build(Options{})
	pool := node(strided, "/model.4/MaxPool")
	pool.Attrs = slices.Clone(pool.Attrs)
	for k := range pool.Attrs {
		if pool.Attrs[k].Name == "strides" {
			pool.Attrs[k].Ints = []int64{1, 1}
		}
	}
	rewired := build(Options{})
	cat := node(rewired, "/model.12/Concat")
	cat.Inputs = []ir.ValueID{cat.Inputs[0], cat.Inputs[0]}
	for _, c := range []struct {
		got  *ir.Graph
		want string
	}{
		{build(Options{Classes: 81}), "weight 1122: export model.38.cv3.0.2.weight float32 [80 512 1 1], built model.38.cv3.0.2.weight float32 [81 512 1 1]"},
		{strided, `layer 4, node 19: export MaxPool "/model.4/MaxPool", built MaxPool "/model.4/MaxPool": attributes differ`},
		{rewired, `layer 12, node 0: export Concat "/model.12/Concat", built Concat "/model.12/Concat": input 1: export reads "/model.7/cv4/act/Mul_output_0", built reads "/model.11/Resize_output_0"`},
	} {
		err := equivalent(export, c.got, []int64{640})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("got %v\nwant %s…", err, c.want)
		}
	}
}

// TestChecked keeps Checked in step with the models TestEquivalence compares.
func TestChecked(t *testing.T) {
	for _, name := range Names() {
		if got, want := Checked(name), slices.Contains(exported, name); got != want {
			t.Errorf("Checked(%q) = %v, want %v (TestEquivalence compares %v)", name, got, want, exported)
		}
	}
	if Checked("yolov9-x") {
		t.Error(`Checked("yolov9-x") = true for an unknown model`)
	}
}

// TestWidth checks the width multiplier against the family itself: yolov9-s
// is yolov9-t at twice the width, and gelan-s gelan-t, so each pair must give
// the same graph but for its name.
func TestWidth(t *testing.T) {
	for _, tc := range []struct{ small, wide string }{{"yolov9-t", "yolov9-s"}, {"gelan-t", "gelan-s"}} {
		got, err := Build(tc.small, Options{Width: 2})
		if err != nil {
			t.Fatal(err)
		}
		want, err := Build(tc.wide, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := equivalent(loadNormalized(t, "", want), loadNormalized(t, "", got), []int64{640}); err != nil {
			t.Errorf("%s at width 2 differs from %s: %v", tc.small, tc.wide, err)
		}
	}
	def, err := Build("yolov9-c", Options{})
	if err != nil {
		t.Fatal(err)
	}
	one, err := Build("yolov9-c", Options{Width: 1, Depth: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(def, one) {
		t.Error("width and depth 1 change yolov9-c")
	}
}

// TestDepth checks the depth multiplier: RepNCSP repeats of 1 (yolov9-c)
// become 2 at depth 2 and stay 1 at depth 0.4; repeats of 3 (yolov9-t)
// become 2 at depth 0.5 (1.5 rounds half to even) and 1 at depth 0.3.
func TestDepth(t *testing.T) {
	for _, tc := range []struct {
		name  string
		depth float64
		want  int // bottlenecks in the first RepNCSP of the first RepNCSPELAN4
	}{
		{"yolov9-c", 1, 1},
		{"yolov9-c", 2, 2},
		{"yolov9-c", 0.4, 1},
		{"yolov9-t", 1, 3},
		{"yolov9-t", 0.5, 2},
		{"yolov9-t", 0.3, 1},
	} {
		data, err := Build(tc.name, Options{Depth: tc.depth})
		if err != nil {
			t.Fatal(err)
		}
		g, err := ir.Load(data)
		if err != nil {
			t.Fatal(err)
		}
		layer := "/model.3/" // after Silence, Conv, Conv
		if tc.name == "yolov9-t" {
			layer = "/model.4/" // after Conv, Conv, ELAN1, AConv
		}
		n := 0
		for i := range g.Nodes {
			nm := g.Nodes[i].Name
			if strings.HasPrefix(nm, layer+"cv2/cv2.0/m/m.") && strings.HasSuffix(nm, "/cv1/conv1/conv/Conv") {
				n++
			}
		}
		if n != tc.want {
			t.Errorf("%s depth %v: %d RepNBottlenecks in %scv2's RepNCSP, want %d", tc.name, tc.depth, n, layer, tc.want)
		}
	}
	for _, bad := range []Options{{Width: -1}, {Depth: math.Inf(1)}, {Width: math.NaN()}} {
		if _, err := Build("gelan-t", bad); err == nil || !strings.HasPrefix(err.Error(), "models: gelan-t: ") {
			t.Errorf("%+v: error %v, want one prefixed models: gelan-t:", bad, err)
		}
	}
}
