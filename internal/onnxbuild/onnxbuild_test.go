package onnxbuild

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/onnxmem/onnxmem/family/yolov9"
	"github.com/onnxmem/onnxmem/ir"
)

// update makes TestTinyFile write testdata/tiny.onnx.
var update = flag.Bool("update", false, "rewrite testdata/tiny.onnx from Tiny")

// tinyPath is testdata/tiny.onnx at the repository root.
var tinyPath = filepath.Join("..", "..", "testdata", "tiny.onnx")

// TestTinyFile checks that testdata/tiny.onnx holds the bytes that Tiny
// builds; with -update it writes them.
func TestTinyFile(t *testing.T) {
	want, err := Tiny().Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(tinyPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(tinyPath)
	if err != nil {
		t.Fatalf("%v: run go test ./internal/onnxbuild -update", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale (%d bytes, Tiny builds %d): run go test ./internal/onnxbuild -update", tinyPath, len(got), len(want))
	}
}

// TestTinyGraph checks what ir makes of Tiny: layers, weights without data,
// the symbolic input, and the shapes of the outputs at 2×3×64×96.
func TestTinyGraph(t *testing.T) {
	data, err := Tiny().Bytes()
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
	if g.Opset != Opset {
		t.Errorf("opset %d, want %d", g.Opset, Opset)
	}
	var layers []int
	for _, n := range g.Nodes {
		if n.Layer < 0 {
			t.Errorf("node %s has no layer", n.Name)
		}
		if !slices.Contains(layers, n.Layer) {
			layers = append(layers, n.Layer)
		}
	}
	if want := []int{0, 1, 2, 3, 4, 5, 6}; !slices.Equal(layers, want) {
		t.Errorf("layers %v, want %v", layers, want)
	}
	in := g.Values[g.Inputs[0]]
	if got := fmt.Sprint(in.Dims); got != "[batch 3 height width]" {
		t.Errorf("input dims %s", got)
	}
	w, ok := g.Lookup("model.2.cv2.conv.weight")
	if !ok || g.Values[w].Kind != ir.Initializer || g.Values[w].Data != nil || fmt.Sprint(g.Values[w].Dims) != "[16 16 3 3]" {
		t.Errorf("model.2.cv2.conv.weight: %+v", g.Values[w])
	}
	s, err := g.Infer(ir.Binding{Batch: 2, Height: 64, Width: 96})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int64{{2, 8, 16, 24}, {2, 8, 8, 12}}
	for i, o := range g.Outputs {
		if !slices.Equal(s.Dims[o], want[i]) {
			t.Errorf("output %d (%s): dims %v, want %v", i, g.Values[o].Name, s.Dims[o], want[i])
		}
	}
	cat, _ := g.Lookup("/model.2/Concat_output_0")
	if got := s.Dims[cat]; !slices.Equal(got, []int64{2, 64, 16, 24}) {
		t.Errorf("ELAN concat dims %v", got)
	}
}
