package registry_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/family/familytest"
	"github.com/onnxmem/onnxmem/family/registry"
	"github.com/onnxmem/onnxmem/family/yolov9/models"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/ir"
)

func loadBytes(t *testing.T, data []byte) *ir.Graph {
	t.Helper()
	g, err := ir.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func build(t *testing.T, b *onnxbuild.Builder) *ir.Graph {
	t.Helper()
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return loadBytes(t, data)
}

// wrapped is a model whose nn.Sequential is an attribute named model of a
// wrapper: "/model/model.0/conv/Conv" is no YOLOv9 layer.
func wrapped() *onnxbuild.Builder {
	b := onnxbuild.New("wrapped")
	seq := b.Module("model")
	x := seq.Sub("model.0").Conv(b.Input("images", 3), 8, 3, 2)
	b.Output(seq.Sub("model.1").Conv(x, 8, 3, 1))
	return b
}

// detected returns the name of the family that claims g.
func detected(g *ir.Graph) string {
	f, _ := registry.Detect(g)
	return f.Name()
}

// TestDetect checks which family claims which graph.
func TestDetect(t *testing.T) {
	yolo, err := models.Build("gelan-t", models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		g    *ir.Graph
		want string
		note string
	}{
		{"tiny", build(t, onnxbuild.Tiny()), "generic", "yolov9: the nodes are named as model.model's layers, as YOLOv9's are, but no detection head is DDetect's"},
		{"ultralytics", build(t, onnxbuild.Ultralytics()), "generic", "as an Ultralytics YOLOv8 or YOLO11 export has none: simulated as a generic network"},
		{"gelan-t", loadBytes(t, yolo), "yolov9", ""},
		{"resnet-like", build(t, onnxbuild.ResNetLike()), "generic", ""},
		{"wrapped", build(t, wrapped()), "generic", ""},
	} {
		f, note := registry.Detect(tc.g)
		if f.Name() != tc.want || (tc.note == "") != (note == "") || !strings.Contains(note, tc.note) {
			t.Errorf("%s: family %s, note %q; want %s, %q", tc.name, f.Name(), note, tc.want, tc.note)
		}
	}
	path := onnxbuild.Shared(t, "torchvision/resnet18-train.onnx")
	g, err := ir.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := detected(g); got != "generic" {
		t.Errorf("resnet18: family %s, want generic", got)
	}
}

// TestByName checks the lookup of families by name.
func TestByName(t *testing.T) {
	if got := registry.Names(); !slices.Equal(got, []string{"yolov9", "generic"}) {
		t.Errorf("Names() = %v", got)
	}
	for _, name := range registry.Names() {
		if f, err := registry.ByName(name); err != nil || f.Name() != name {
			t.Errorf("ByName(%q) = %v, %v", name, f, err)
		}
	}
	if _, err := registry.ByName("yolov5"); err == nil || err.Error() != `family: unknown family "yolov5": want one of yolov9, generic` {
		t.Errorf("ByName(yolov5): error %v", err)
	}
}

// TestGenericLayers checks the generic family's layers on a torchvision-style
// graph: the root's children and a Sequential's numbered children, in the
// order they run.
func TestGenericLayers(t *testing.T) {
	f, _ := registry.ByName("generic")
	g, err := f.Prepare(build(t, onnxbuild.ResNetLike()))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"conv1": 0, "bn1": 1, "layer1/layer1.0": 2, "layer1/layer1.1": 3, "head": 4}
	for _, n := range g.Nodes {
		key := strings.TrimPrefix(n.Name, "/")
		key = key[:strings.LastIndexByte(key, '/')]
		if strings.HasPrefix(key, "layer1/") {
			key = strings.Join(strings.Split(key, "/")[:2], "/")
		}
		if l, ok := want[key]; !ok || n.Layer != l {
			t.Errorf("node %s: layer %d, want %d", n.Name, n.Layer, l)
		}
	}
}

// TestGenericOnYOLO checks that the generic family numbers a YOLOv9
// graph's layers as the YOLOv9 family does: model.model's children, in
// order.
func TestGenericOnYOLO(t *testing.T) {
	data, err := models.Build("yolov9-t", models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	gen, _ := registry.ByName("generic")
	yolo, _ := registry.ByName("yolov9")
	a, err := gen.Prepare(loadBytes(t, data))
	if err != nil {
		t.Fatal(err)
	}
	b := loadBytes(t, data)
	b.AssignLayers(func(string) int { return -1 })
	if b, err = yolo.Prepare(b); err != nil {
		t.Fatal(err)
	}
	layerOf := map[string]int{}
	for _, n := range b.Nodes {
		layerOf[n.Name] = n.Layer
	}
	for _, n := range a.Nodes {
		if l, ok := layerOf[n.Name]; ok && l != n.Layer {
			t.Fatalf("node %s: generic layer %d, yolov9 layer %d", n.Name, n.Layer, l)
		}
	}
}

// familyNames are the names that belong to one model family and must not
// appear in the engine's code (the registry of families aside: the engine
// imports it, and asks it, without naming a family).
var familyNames = regexp.MustCompile(`(?i)yolo|adown|\belan|repncsp|cbfuse|cblinear|sppelan|\bdfl\b|/model\.|train_dual|_forward_once`)

// TestEngineKnowsNoFamily checks that the engine's packages (ir, schedule,
// liveness, allocator, internal/sim and internal/cards) name no model
// family: what belongs to YOLOv9 lives under family/yolov9.
func TestEngineKnowsNoFamily(t *testing.T) {
	for _, dir := range []string{"ir", "schedule", "liveness", "allocator", "internal/sim", "internal/cards"} {
		files, err := filepath.Glob(filepath.Join("..", "..", dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", dir, err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(data), "\n") {
				if m := familyNames.FindString(line); m != "" {
					t.Errorf("%s:%d names %q, which belongs in a family package: %s", path, i+1, m, strings.TrimSpace(line))
				}
			}
		}
	}
}

// TestGenericOnDynamo checks that the generic family reads a dynamo
// export's module scopes: no generic layer spans two of model.model's
// layers.
func TestGenericOnDynamo(t *testing.T) {
	path := onnxbuild.Shared(t, "yolov9/yolov9-c-infer-dynamo.onnx")
	gen, _ := registry.ByName("generic")
	yolo, _ := registry.ByName("yolov9")
	load := func(f interface {
		Prepare(*ir.Graph) (*ir.Graph, error)
	}) *ir.Graph {
		g, err := ir.LoadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if g, err = f.Prepare(g); err != nil {
			t.Fatal(err)
		}
		return g
	}
	a, b := load(gen), load(yolo)
	of := map[int]int{}
	for i := range a.Nodes {
		ga, yb := a.Nodes[i].Layer, b.Nodes[i].Layer
		if ga < 0 || yb < 0 {
			continue
		}
		if l, ok := of[ga]; ok && l != yb {
			t.Fatalf("generic layer %d holds nodes of YOLOv9 layers %d and %d (node %s)", ga, l, yb, a.Nodes[i].Name)
		}
		of[ga] = yb
	}
	if len(of) < 30 {
		t.Errorf("%d generic layers, want about the 39 of model.model", len(of))
	}
}

// TestNoTwoClaim checks, on the conformance suite's corpus, that no two
// families claim the same export: the generic family, tried last, claims
// every graph, and of the others at most one claims each.
func TestNoTwoClaim(t *testing.T) {
	for _, c := range familytest.Corpus(t) {
		var claims []string
		for _, name := range registry.Names() {
			f, err := registry.ByName(name)
			if err != nil {
				t.Fatal(err)
			}
			if ok, _ := f.Detect(c.Load(t)); ok {
				claims = append(claims, name)
			}
		}
		last := registry.Names()[len(registry.Names())-1]
		if len(claims) == 0 || claims[len(claims)-1] != last || len(claims) > 2 {
			t.Errorf("%s is claimed by %v: want %s and at most one other family", c.Name, claims, last)
		}
	}
}
