package onnxbuild

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/family/yolov9"
	"github.com/onnxmem/onnxmem/ir"
)

// TestTorchIdioms builds a graph with the helpers of torch.go and checks
// what ir makes of it: node and weight names below an indexed container, the
// chunk arithmetic and the upsample folded to concrete dims, a constant
// outside every layer, weights sorted, and a declared output.
func TestTorchIdioms(t *testing.T) {
	b := New("idioms")
	x := b.Input("images", 3)
	l0 := b.Layer(0).Block(x, 16, 3, 2)
	s := b.Layer(1)
	a, c := s.Chunk2(l0)
	c = s.Sub("cv2").Index(0).Block(c, 8, 3, 1)
	l1 := s.Concat(a, c)
	l2 := b.Layer(2).NearestUpsample(l1, 2)
	s3 := b.Layer(3)
	parts := s3.Node("Split", []string{l2.Name, b.GlobalInts("Split", 4, 12)}, 2, IntAttr("axis", 1))
	b.SortWeights(func(x, y string) int { return -strings.Compare(x, y) })
	b.OutputDims(T{Name: parts[1], C: 12}, "n", int64(12), "h", "w")
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	g, err := ir.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	if g, err = (yolov9.Family{}).Prepare(g); err != nil {
		t.Fatal(err)
	}
	var weights []string
	for _, v := range g.Values {
		if v.Kind == ir.Initializer {
			weights = append(weights, v.Name)
		}
	}
	if !slices.IsSortedFunc(weights, func(x, y string) int { return -strings.Compare(x, y) }) || !slices.Contains(weights, "model.1.cv2.0.conv.weight") {
		t.Errorf("weights %v", weights)
	}
	layers := map[string]int{}
	for _, n := range g.Nodes {
		layers[n.Name] = n.Layer
	}
	for name, want := range map[string]int{"/model.1/cv2/cv2.0/conv/Conv": 1, "/model.1/Slice_1": 1, "/model.2/Resize": 2, "Constant_1": -1} {
		if l, ok := layers[name]; !ok || l != want {
			t.Errorf("node %s: layer %d (present %v), want %d", name, l, ok, want)
		}
	}
	sh, err := g.Infer(ir.Binding{Batch: 2, Height: 64, Width: 96})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"/model.1/Slice_output_0":   "[2 8 32 48]",
		"/model.1/Slice_1_output_0": "[2 8 32 48]",
		"/model.2/Resize_output_0":  "[2 16 64 96]",
		"/model.3/Split_output_1":   "[2 12 64 96]",
	} {
		v, ok := g.Lookup(name)
		if !ok || fmt.Sprint(sh.Dims[v]) != want {
			t.Errorf("%s: %v, want %s", name, sh.Dims[v], want)
		}
	}
	if o := g.Values[g.Outputs[0]]; fmt.Sprint(o.Dims) != "[n 12 h w]" {
		t.Errorf("declared output dims %v", o.Dims)
	}
}
