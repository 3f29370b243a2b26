// Tests and a benchmark on the YOLOv9 and GELAN exports in the shared data:
// package ir loads and infers them, and the family assigns their layers.

package yolov9

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/family/yolov9/models"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/ir"
)

// yolov9Files returns the ONNX exports in the shared yolov9 folder.
func yolov9Files(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(onnxbuild.Shared(t, "yolov9"), "*.onnx"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no ONNX files in the yolov9 folder: %v", err)
	}
	return files
}

// TestExports loads every export and infers it at two batch and two image
// sizes. The training exports end in the raw head maps, [B 144 S/8 S/8],
// [B 144 S/16 S/16] and [B 144 S/32 S/32] (4·16 box bins + 80 classes), once for
// GELAN and twice (auxiliary and main branch) for YOLOv9. The inference exports
// end in decoded boxes [B 84 A] (4 box coordinates + 80 classes, A anchors over
// the three strides), one per head. The dynamo export bakes its shape constants
// at 640, so it only infers there.
func TestExports(t *testing.T) {
	for _, path := range yolov9Files(t) {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			g, err := loadPrepared(t, path)
			if err != nil {
				t.Fatal(err)
			}
			checkLoaded(t, g)
			for _, batch := range []int64{1, 16} {
				for _, size := range []int64{640, 512} {
					s, err := g.Infer(ir.Binding{Batch: batch, Height: size, Width: size})
					if strings.Contains(name, "dynamo") && size != 640 {
						if err == nil || !strings.Contains(err.Error(), "the export fixed these sizes") {
							t.Errorf("size %d: want the error for fixed sizes, got %v", size, err)
						}
						continue
					}
					if err != nil {
						t.Fatalf("batch %d, size %d: %v", batch, size, err)
					}
					checkOutputs(t, g, s, strings.Contains(name, "-train"), batch, size)
					checkComplete(t, g, s)
				}
			}
		})
	}
}

// checkOutputs checks the head outputs; see TestExports.
func checkOutputs(t *testing.T, g *ir.Graph, s *ir.Shapes, train bool, b, size int64) {
	t.Helper()
	strides := []int64{8, 16, 32}
	if train {
		if len(g.Outputs) != 3 && len(g.Outputs) != 6 {
			t.Fatalf("%d outputs, want 3 or 6", len(g.Outputs))
		}
		for k, o := range g.Outputs {
			st := strides[k%3]
			if want := []int64{b, 144, size / st, size / st}; !slices.Equal(s.Dims[o], want) {
				t.Errorf("output %d %q: %v, want %v", k, g.Values[o].Name, s.Dims[o], want)
			}
		}
		return
	}
	var anchors int64
	for _, st := range strides {
		anchors += (size / st) * (size / st)
	}
	for k, o := range g.Outputs {
		if want := []int64{b, 84, anchors}; !slices.Equal(s.Dims[o], want) || s.DTypes[o] != ir.Float32 {
			t.Errorf("output %d %q: %v %v, want %v float32", k, g.Values[o].Name, s.Dims[o], s.DTypes[o], want)
		}
	}
}

// checkComplete checks that every value has dims and a dtype.
func checkComplete(t *testing.T, g *ir.Graph, s *ir.Shapes) {
	t.Helper()
	for i := range g.Values {
		if s.Dims[i] == nil || s.DTypes[i] == ir.Undefined {
			t.Fatalf("value %q: dims %v, dtype %v", g.Values[i].Name, s.Dims[i], s.DTypes[i])
		}
	}
}

// checkLoaded checks structural facts every export shares: IDs, producers and
// consumers agree, nodes are in topological order, and every Conv has a layer.
func checkLoaded(t *testing.T, g *ir.Graph) {
	t.Helper()
	if len(g.Inputs) != 1 || g.Values[g.Inputs[0]].Name != "images" {
		t.Errorf("inputs %v", g.Inputs)
	}
	for i, v := range g.Values {
		if v.ID != ir.ValueID(i) {
			t.Fatalf("value %d has ID %d", i, v.ID)
		}
		for _, c := range v.Consumers {
			if !slices.Contains(g.Nodes[c].Inputs, v.ID) {
				t.Fatalf("value %q: consumer %q does not read it", v.Name, g.Nodes[c].Name)
			}
		}
	}
	for i, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in == ir.NoValue {
				continue
			}
			if p := g.Values[in].Producer; p >= int32(i) {
				t.Fatalf("node %q reads %q before node %d writes it", n.Name, g.Values[in].Name, p)
			}
		}
		if n.OpType == "Conv" && n.Layer < 0 {
			t.Errorf("conv %q has no layer", n.Name)
		}
		if n.OpType == "BatchNormalization" && len(n.Outputs) != 3 {
			t.Errorf("batchnorm %q has %d outputs", n.Name, len(n.Outputs))
		}
	}
}

func TestExportDetails(t *testing.T) {
	dir := onnxbuild.Shared(t, "yolov9")
	// Embedded weights keep their small tensors; external ones keep none.
	for file, wantSmall := range map[string]bool{"gelan-t-infer-weights.onnx": true, "gelan-t-infer.onnx": false} {
		g, err := ir.LoadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		small := 0
		for _, v := range g.Values {
			if v.Kind == ir.Initializer && v.Floats != nil {
				small++
			}
		}
		if (small > 0) != wantSmall {
			t.Errorf("%s: %d small float initializers", file, small)
		}
	}
	// The training export's batch norms update running statistics of [C]; layer
	// 1 follows two stride-2 convolutions.
	g, err := loadPrepared(t, filepath.Join(dir, "gelan-c-train.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := g.Infer(ir.Binding{Batch: 2, Height: 320, Width: 320})
	if err != nil {
		t.Fatal(err)
	}
	bn := &g.Nodes[g.Values[id(t, g, "/model.1/bn/BatchNormalization_output_0")].Producer]
	if bn.Layer != 1 || bn.IntAttr("training_mode", 0) != 1 {
		t.Errorf("batchnorm layer %d, training_mode %d", bn.Layer, bn.IntAttr("training_mode", 0))
	}
	c := s.Dims[bn.Inputs[1]][0]
	for k, want := range [][]int64{{2, c, 80, 80}, {c}, {c}} {
		if got := s.Dims[bn.Outputs[k]]; !slices.Equal(got, want) {
			t.Errorf("batchnorm output %d: %v, want %v", k, got, want)
		}
	}
	// Dynamo exports name layers only in node metadata.
	g, err = loadPrepared(t, filepath.Join(dir, "yolov9-c-infer-dynamo.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range g.Nodes {
		if n.OpType == "Conv" {
			if w := g.Values[n.Inputs[1]].Name; layerIn(w) != n.Layer {
				t.Errorf("conv %q: layer %d, weight %q", n.Name, n.Layer, w)
			}
		}
	}
}

func TestTruncatedExport(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(onnxbuild.Shared(t, "yolov9"), "gelan-t-train.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 100, len(data) / 3, len(data) / 2, len(data) * 9 / 10, len(data) - 1} {
		if _, err := ir.Load(data[:n]); err == nil || !strings.HasPrefix(err.Error(), "ir: ") {
			t.Errorf("%d of %d bytes: error %v", n, len(data), err)
		}
	}
}

func BenchmarkInferYolov9E(b *testing.B) {
	g, err := loadPrepared(b, filepath.Join(onnxbuild.Shared(b, "yolov9"), "yolov9-e-train.onnx"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := g.Infer(ir.Binding{Batch: 64, Height: 640, Width: 640}); err != nil {
			b.Fatal(err)
		}
	}
}

// loadPrepared loads an export and prepares it as onnxmem does.
func loadPrepared(tb testing.TB, path string) (*ir.Graph, error) {
	g, err := ir.LoadFile(path)
	if err != nil {
		return nil, err
	}
	return Family{}.Prepare(g)
}

// id returns the ID of the named value, failing the test when there is none.
func id(t testing.TB, g *ir.Graph, name string) ir.ValueID {
	t.Helper()
	v, ok := g.Lookup(name)
	if !ok {
		t.Fatalf("no value %q", name)
	}
	return v
}

// TestDeployment checks that every inference export in the shared data,
// the one a dynamo export made without fusing included, is read as the
// model it was made from: 80 classes, the same convolutions as that
// model's training export and not as any other's.
func TestDeployment(t *testing.T) {
	dir := onnxbuild.Shared(t, "yolov9")
	var trains []string
	for _, path := range yolov9Files(t) {
		if strings.HasSuffix(path, "-train.onnx") {
			trains = append(trains, path)
		}
	}
	n := 0
	for _, path := range yolov9Files(t) {
		name := filepath.Base(path)
		if !strings.Contains(name, "-infer") {
			continue
		}
		n++
		g := mustPrepare(t, path)
		if err := (Family{}).CheckStep(g); err == nil {
			t.Errorf("%s: CheckStep takes an inference export", name)
		}
		classes, same, ok := Family{}.Deployment(g)
		if !ok || classes != 80 {
			t.Errorf("%s: Deployment: %d classes, ok %v; want 80, true", name, classes, ok)
			continue
		}
		want := filepath.Join(dir, name[:strings.Index(name, "-infer")]+"-train.onnx")
		for _, train := range trains {
			if got := same(mustPrepare(t, train)); got != (train == want) {
				t.Errorf("%s: same as %s: %v, want %v", name, filepath.Base(train), got, !got)
			}
		}
	}
	if n < 8 {
		t.Errorf("%d inference exports, want the 8 of the shared data", n)
	}
	// The classes are read from the head's last class branch: a training
	// graph of 20 classes, read as a deployment of itself, has 20.
	data, err := models.Build("yolov9-s", models.Options{Classes: 20})
	if err != nil {
		t.Fatal(err)
	}
	g, err := ir.Load(data)
	if err == nil {
		g, err = Family{}.Prepare(g)
	}
	if err != nil {
		t.Fatal(err)
	}
	if classes, same, ok := (Family{}).Deployment(g); !ok || classes != 20 || !same(g) {
		t.Errorf("yolov9-s with 20 classes: Deployment gives %d classes, ok %v; want 20 and the same model", classes, ok)
	}
}

// mustPrepare loads an export and prepares it, failing the test on errors.
func mustPrepare(t *testing.T, path string) *ir.Graph {
	t.Helper()
	g, err := loadPrepared(t, path)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
