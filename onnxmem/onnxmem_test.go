package onnxmem_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/sim"
	"github.com/onnxmem/onnxmem/onnxmem"
)

// TestScenarioDefaults checks that a Scenario's zero fields mean the
// documented defaults, decoded once into the engine's options: the image of
// DefaultImage (Scenario{Batch: 8} used to fail with "image 0x0"), a train
// step's DefaultBoxes, SGD and EMA (Scenario{Train: true} used to mean 0
// boxes and no EMA), and a device's limit and cuBLAS workspace.
func TestScenarioDefaults(t *testing.T) {
	m, err := onnxmem.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	rtx, err := onnxmem.ParseDevice("rtx4090")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sc   onnxmem.Scenario
		want sim.Options
	}{
		{onnxmem.Scenario{}, sim.Options{Batch: 16, Height: 640, Width: 640}},
		{onnxmem.Scenario{Batch: 8}, sim.Options{Batch: 8, Height: 640, Width: 640}},
		{onnxmem.Scenario{Step: onnxmem.TrainStep, AMP: true},
			sim.Options{Batch: 16, Height: 640, Width: 640, AMP: true, Train: true, Boxes: 16, Optimizer: "SGD", EMA: true}},
		{onnxmem.Scenario{Step: onnxmem.TrainStep, Boxes: onnxmem.NoBoxes, Optimizer: "lion", NoEMA: true},
			sim.Options{Batch: 16, Height: 640, Width: 640, Train: true, Optimizer: "Lion"}},
		{onnxmem.Scenario{Batch: 2, Step: onnxmem.TrainStep, BoxCounts: []int64{3, 7}},
			sim.Options{Batch: 2, Height: 640, Width: 640, Train: true, Boxes: 7, BoxCounts: []int64{3, 7}, Optimizer: "SGD", EMA: true}},
		{onnxmem.Scenario{Step: onnxmem.EvalStep, Height: 384, EvalFloat: true}, sim.Options{Batch: 16, Height: 384, Width: 640, Eval: true, EvalFloat: true}},
		{onnxmem.Scenario{AMP: true, BF16: true, Device: "rtx4090", Segments: 2},
			sim.Options{Batch: 16, Height: 640, Width: 640, AMP: true, AMPDType: "bfloat16", Segments: 2, Capacity: rtx.Usable(), CuBLASWorkspace: rtx.CuBLASWorkspace}},
		{onnxmem.Scenario{Capacity: 4 << 30, Checkpoint: []onnxmem.Range{{From: 1, To: 3}}},
			sim.Options{Batch: 16, Height: 640, Width: 640, Capacity: 4 << 30, Checkpoint: []sim.Range{{From: 1, To: 3}}}},
	} {
		_, got, err := onnxmem.Options(m, tc.sc)
		if err != nil {
			t.Errorf("%+v: %v", tc.sc, err)
			continue
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%+v decodes as (-want +got):\n%s", tc.sc, d)
		}
	}
	if onnxmem.DefaultAMPWarmSteps != onnxmem.EngineWarmSteps {
		t.Errorf("DefaultAMPWarmSteps %d, the engine's %d", onnxmem.DefaultAMPWarmSteps, onnxmem.EngineWarmSteps)
	}
	// A torchvision export fixes its image: the default is its size.
	tv, err := onnxmem.Load(measured.Path("tv/vit_b_16-train.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if sc, _, err := onnxmem.Options(tv, onnxmem.Scenario{}); err != nil || sc.Height != 224 || sc.Width != 224 {
		t.Errorf("vit_b_16's default image %dx%d, %v; want its fixed 224x224", sc.Height, sc.Width, err)
	}
}

// TestScenarioRefused checks that a field the step does not take, an
// unknown step or optimizer, and a device beside a capacity are errors that
// name them, never ignored.
func TestScenarioRefused(t *testing.T) {
	for _, tc := range []struct {
		sc   onnxmem.Scenario
		want string
	}{
		{onnxmem.Scenario{Boxes: 3}, "Boxes applies to train steps, and this step is model"},
		{onnxmem.Scenario{Step: onnxmem.EvalStep, NoEMA: true}, "NoEMA applies to train steps, and this step is eval"},
		{onnxmem.Scenario{EvalFloat: true}, "EvalFloat applies to eval steps"},
		{onnxmem.Scenario{Step: "validate"}, `step "validate": want model, train or eval`},
		{onnxmem.Scenario{Step: onnxmem.TrainStep, Optimizer: "rmsprop"}, `unknown optimizer "rmsprop"`},
		{onnxmem.Scenario{Device: "rtx4090", Capacity: 1 << 30}, "device rtx4090 and capacity"},
		{onnxmem.Scenario{Device: "gtx480"}, `unknown device "gtx480"`},
		{onnxmem.Scenario{BF16: true}, "bf16 without amp"},
		{onnxmem.Scenario{AllocConf: "expandable:True"}, "alloc conf"},
		{onnxmem.Scenario{Batch: -1}, "batch -1"},
		{onnxmem.Scenario{Capacity: -5}, "Capacity -5: want the limit in bytes above 0, or 0 for none"},
		{onnxmem.Scenario{Step: onnxmem.TrainStep, Boxes: -2}, "Boxes -2"},
		{onnxmem.Scenario{Step: onnxmem.TrainStep, Boxes: onnxmem.NoBoxes, BoxCounts: make([]int64, 16)}, "Boxes NoBoxes with BoxCounts"},
	} {
		err := tc.sc.Check()
		if err == nil || !strings.HasPrefix(err.Error(), "onnxmem: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", tc.sc, err, tc.want)
		}
	}
}

// TestDeviceEverywhere checks that the card of a Scenario limits every
// method alike: Sweep's steps on a card too small run out of memory, as
// Simulate's do, and MaxBatch's default limit is the one of limit 0.
func TestDeviceEverywhere(t *testing.T) {
	m, err := onnxmem.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	sc := onnxmem.Scenario{Step: onnxmem.TrainStep, AMP: true, Device: "4GB"}
	rs, err := m.Sweep(sc, []int64{1, 256}, nil)
	if err != nil {
		t.Fatal(err)
	}
	one, err := m.Simulate(onnxmem.Scenario{Batch: 256, Step: onnxmem.TrainStep, AMP: true, Device: "4GB"})
	if err != nil {
		t.Fatal(err)
	}
	if !rs[0].Fits() || rs[1].Fits() || one.Fits() || rs[1].Peak != one.Peak || rs[1].Scenario.Device != "4GB" {
		t.Errorf("on 4GB: batch 1 fits %v, batch 256 fits %v in a sweep and %v alone", rs[0].Fits(), rs[1].Fits(), one.Fits())
	}
	n0, _, err := m.MaxBatch(sc, 0)
	if err != nil {
		t.Fatal(err)
	}
	n, r, err := m.MaxBatch(sc, onnxmem.MaxBatchLimit)
	if err != nil || n0 != n || n < 1 || r.Scenario.Batch != n || !r.Fits() {
		t.Errorf("MaxBatch(limit 0) = %d, MaxBatch(limit %d) = %d, %v", n0, onnxmem.MaxBatchLimit, n, err)
	}
	if _, _, err := m.MaxBatch(onnxmem.Scenario{}, 0); err == nil || !strings.Contains(err.Error(), "give the Scenario a Device or a Capacity") {
		t.Errorf("MaxBatch without a limit: %v", err)
	}
	if _, err := m.Run(onnxmem.Scenario{Step: onnxmem.ModelStep}, []onnxmem.RunEvent{{Kind: "setup"}}); err == nil || !strings.Contains(err.Error(), "Step model: a run trains") {
		t.Errorf("Run of a model step: %v", err)
	}
}

// TestPublicFace checks the public package's face: go doc -all is under
// 350 lines and no exported identifier's declaration names a type of the
// engine's packages.
func TestPublicFace(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	engine := map[string]bool{"ir": true, "schedule": true, "allocator": true, "models": true, "sim": true, "cards": true, "liveness": true, "family": true, "pickle": true}
	for _, p := range pkgs {
		for name, f := range p.Files {
			for _, d := range f.Decls {
				var nodes []ast.Node
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Name.IsExported() && (d.Recv == nil || exportedRecv(d.Recv)) {
						nodes = append(nodes, d.Type)
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if s.Name.IsExported() {
								nodes = append(nodes, exportedFields(s.Type))
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() && s.Type != nil {
									nodes = append(nodes, s.Type)
								}
							}
						}
					}
				}
				for _, n := range nodes {
					ast.Inspect(n, func(x ast.Node) bool {
						if sel, ok := x.(*ast.SelectorExpr); ok {
							if id, ok := sel.X.(*ast.Ident); ok && engine[id.Name] {
								t.Errorf("%s: %s: an exported declaration names the engine's %s.%s", name, fset.Position(sel.Pos()), id.Name, sel.Sel.Name)
							}
						}
						return true
					})
				}
			}
		}
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command for go doc")
	}
	out, err := exec.Command(gobin, "doc", "-all", ".").Output()
	if err != nil {
		t.Fatalf("go doc: %v", err)
	}
	if n := bytes.Count(out, []byte("\n")); n >= 350 {
		t.Errorf("go doc -all is %d lines, want under 350: the public package is a small face", n)
	}
}

// exportedRecv reports whether a method's receiver is an exported type.
func exportedRecv(fl *ast.FieldList) bool {
	t := fl.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.IsExported()
}

// exportedFields returns a type with only its exported fields, when it is
// a struct: the unexported ones are the face's own business.
func exportedFields(t ast.Expr) ast.Node {
	st, ok := t.(*ast.StructType)
	if !ok {
		return t
	}
	out := &ast.FieldList{}
	for _, f := range st.Fields.List {
		for _, n := range f.Names {
			if n.IsExported() {
				out.List = append(out.List, f)
				break
			}
		}
	}
	return out
}

// TestPackageDocExample checks that the program the package documentation
// shows is Example's, which runs with its output checked.
func TestPackageDocExample(t *testing.T) {
	doc, err := os.ReadFile("onnxmem.go")
	if err != nil {
		t.Fatal(err)
	}
	var shown []string
	for _, l := range strings.Split(string(doc), "\n") {
		if c, ok := strings.CutPrefix(l, "//\t"); ok {
			shown = append(shown, c)
		}
		if strings.HasPrefix(l, "package ") {
			break
		}
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	body := regexp.MustCompile(`(?s)func Example\(\) \{\n(.*?)\n\t// Output:`).FindSubmatch(src)
	if body == nil {
		t.Fatal("example_test.go has no Example with an Output")
	}
	var ran []string
	for _, l := range strings.Split(string(body[1]), "\n") {
		ran = append(ran, strings.TrimPrefix(l, "\t"))
	}
	if d := cmp.Diff(ran, shown); d != "" {
		t.Errorf("the package documentation's program is not Example's (-Example +doc):\n%s", d)
	}
	if len(shown) > 16 {
		t.Errorf("the package documentation's program is %d lines, want about 15", len(shown))
	}
}

// TestNotYOLOv9 checks that an export named as YOLOv9's ("/model.i/…") but
// with another head, as Ultralytics' YOLOv8 exports are, is simulated by
// the generic family with a note that says why, not as YOLOv9 with
// train_dual.py's loss, and that As can still take it as YOLOv9.
func TestNotYOLOv9(t *testing.T) {
	data, err := onnxbuild.Ultralytics().Bytes()
	if err != nil {
		t.Fatal(err)
	}
	m, err := onnxmem.LoadBytes("yolov8-like", data)
	if err != nil {
		t.Fatal(err)
	}
	if m.Family != "generic" || !strings.Contains(m.Note, "no detection head is DDetect's") {
		t.Fatalf("family %q, note %q; want generic, with a note on the head", m.Family, m.Note)
	}
	r, err := m.Simulate(onnxmem.Scenario{Batch: 2, Height: 64, Width: 64, Step: onnxmem.TrainStep})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range r.PeakByKind {
		if k.Kind == "loss" {
			t.Errorf("the generic train step allocates %d bytes of a detection loss", k.Bytes)
		}
	}
	if y, err := m.As("yolov9"); err != nil || y.Family != "yolov9" {
		t.Errorf("As(yolov9): %v, %v", y, err)
	}
}
