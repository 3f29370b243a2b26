// Package familytest is the conformance suite that every model family
// runs in its tests (Check), and the corpus of graphs it runs on: the
// built-in models, synthetic graphs that resemble a family's without being
// one (a YOLOv8-style export, a YOLO-like graph without a detection head, a
// torchvision-style network), and, where ../shared holds them, the real
// exports of YOLOv9 (training and inference, TorchScript and dynamo) and
// of torchvision.
//
// Worked example: Check(t, yolov9.Family{}) loads each graph of the corpus,
// asks Detect, and on each graph the family claims prepares it, infers its
// shapes at the graph's own image size, and builds its model step with
// the family's holds, and its train and eval steps where the family's
// optional answers say it can: the whole engine must take every graph a
// family claims. It checks that a family claims exactly the graphs of the
// corpus that are its own (the generic family: every graph), declines with
// a note exactly the graphs that resemble its own, and that its optional
// interfaces answer consistently (a head that reads classes has an eval
// head; the harness is one the engine knows).
package familytest

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/onnxmem/onnxmem/family"
	"github.com/onnxmem/onnxmem/family/yolov9/models"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// Graph is one graph of the corpus: its name, the graph as ir.Load
// returns it, the image side it is simulated at, the family that must
// claim it (the fallback, "generic", claims every graph beside), and the
// family it resembles without being one, whose decline says so in a note.
type Graph struct {
	Name      string
	Data      []byte
	Image     int64
	Family    string
	Resembles string
}

// Load decodes the graph afresh: each family prepares a copy of its own.
func (g Graph) Load(t testing.TB) *ir.Graph {
	t.Helper()
	out, err := ir.Load(g.Data)
	if err != nil {
		t.Fatalf("%s: %v", g.Name, err)
	}
	return out
}

// Corpus returns the conformance suite's graphs: the synthetic ones and
// the built-in models always, the shared exports when ../shared holds them
// (onnxbuild.Shared's rules: skipped without it, an error under CI=true).
func Corpus(t testing.TB) []Graph {
	t.Helper()
	var out []Graph
	add := func(name string, b *onnxbuild.Builder, img int64, fam, resembles string) {
		data, err := b.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Graph{name, data, img, fam, resembles})
	}
	add("tiny", onnxbuild.Tiny(), 64, "generic", "yolov9")
	add("ultralytics", onnxbuild.Ultralytics(), 64, "generic", "yolov9")
	add("resnet-like", onnxbuild.ResNetLike(), 32, "generic", "")
	for _, name := range []string{"gelan-t", "yolov9-t"} {
		data, err := models.Build(name, models.Options{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Graph{"built-in " + name, data, 64, "yolov9", ""})
	}
	if dir := sharedDir(t); dir != "" {
		for _, f := range []struct {
			path string
			img  int64
			fam  string
		}{
			{"yolov9/gelan-t-train.onnx", 64, "yolov9"}, {"yolov9/yolov9-t-train.onnx", 64, "yolov9"}, {"yolov9/yolov9-c-infer.onnx", 64, "yolov9"},
			{"yolov9/yolov9-c-infer-dynamo.onnx", 640, "yolov9"}, {"torchvision/resnet18-train.onnx", 224, "generic"},
			{"torchvision/mobilenet_v3_large-train.onnx", 224, "generic"},
		} {
			data, err := os.ReadFile(filepath.Join(dir, f.path))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, Graph{f.path, data, f.img, f.fam, ""})
		}
	}
	return out
}

// sharedDir returns the shared folder next to the repository, or "" when
// it is missing: an error under CI=true, which must have it, as
// onnxbuild.Shared has it.
func sharedDir(t testing.TB) string {
	dir := onnxbuild.SharedDir
	if st, err := os.Stat(filepath.Join(dir, "yolov9")); err != nil || !st.IsDir() {
		if os.Getenv("CI") == "true" {
			t.Fatalf("shared data missing: %v (CI needs the shared folder next to the repository)", err)
		}
		t.Logf("shared data missing: the conformance suite runs on the synthetic graphs and the built-in models only")
		return ""
	}
	return dir
}

// Check runs the conformance suite on f: its name, its answers on every
// graph of the corpus, and the engine's steps on every graph it claims.
func Check(t *testing.T, f family.Family) {
	if !regexp.MustCompile(`^[a-z][a-z0-9]*$`).MatchString(f.Name()) {
		t.Errorf("family name %q: want a short lower-case word, as -family takes it", f.Name())
	}
	if h := family.Harness(f); h != "before_step" && h != "before_warmup" {
		t.Errorf("%s's harness %q: want before_step or before_warmup", f.Name(), h)
	}
	claimed := 0
	for _, c := range Corpus(t) {
		ok, note := f.Detect(c.Load(t))
		again, _ := f.Detect(c.Load(t))
		switch {
		case ok != again:
			t.Errorf("%s: %s's Detect answers %v, then %v", c.Name, f.Name(), ok, again)
		case f.Name() != "generic" && ok != (c.Family == f.Name()):
			t.Errorf("%s: %s claims it %v; the corpus says %s does", c.Name, f.Name(), ok, c.Family)
		case f.Name() == "generic" && !ok:
			t.Errorf("%s: the generic family, the fallback, declines it", c.Name)
		case ok && note != "":
			t.Errorf("%s: %s claims the graph with a note %q: a note says why a family declines", c.Name, f.Name(), note)
		case !ok && (note != "") != (c.Resembles == f.Name()):
			t.Errorf("%s: %s declines it with the note %q: want a note exactly where the graph resembles the family's (it resembles %q)", c.Name, f.Name(), note, c.Resembles)
		case !ok && note != "" && !regexp.MustCompile(`^`+f.Name()+`: `).MatchString(note):
			t.Errorf("%s: %s's note %q does not start with the family's name", c.Name, f.Name(), note)
		}
		if ok {
			claimed++
			steps(t, f, c)
		}
	}
	if claimed == 0 {
		t.Errorf("%s claims no graph of the corpus", f.Name())
	}
}

// steps prepares a graph that f claims and builds its steps: the model
// step always, the train and eval steps of a training graph.
func steps(t *testing.T, f family.Family, c Graph) {
	t.Helper()
	g, err := f.Prepare(c.Load(t))
	if err != nil {
		t.Errorf("%s: %s's Prepare: %v", c.Name, f.Name(), err)
		return
	}
	layers := 0
	for i := range g.Nodes {
		layers = max(layers, g.Nodes[i].Layer+1)
	}
	if layers == 0 {
		t.Errorf("%s: %s assigns no top-level layer", c.Name, f.Name())
	}
	s, err := g.Infer(ir.Binding{Batch: 2, Height: c.Image, Width: c.Image})
	if err != nil {
		t.Errorf("%s: shapes at %d: %v", c.Name, c.Image, err)
		return
	}
	outs := make([]schedule.Output, len(g.Outputs))
	for i, v := range g.Outputs {
		outs[i] = schedule.Output{Dims: s.Dims[v], DType: s.DTypes[v]}
	}
	if family.Classes(f, outs) > 0 && family.EvalHead(f) == nil {
		t.Errorf("%s: %s reads %d classes from the outputs but has no eval head", c.Name, f.Name(), family.Classes(f, outs))
	}
	if err := family.CheckStep(f, g); err != nil {
		if _, _, ok := family.Deployment(f, g); !ok {
			t.Errorf("%s: %s claims a graph that it can neither step nor read as a deployment: %v", c.Name, f.Name(), err)
		}
		return // an inference export, which a built-in model stands for
	}
	build := func(what string, cfg schedule.Config) {
		cfg.Holder = f
		if _, err := schedule.Build(g, s, cfg); err != nil {
			t.Errorf("%s: %s's %s step: %v", c.Name, f.Name(), what, err)
		}
	}
	build("model", schedule.Config{})
	build("eval", schedule.Config{Eval: &schedule.Eval{Head: family.EvalHead(f)}})
	if err := family.CheckTrain(f, outs, ""); err != nil {
		t.Errorf("%s: %s claims a training graph that its default trainer cannot train: %v", c.Name, f.Name(), err)
		return
	}
	build("train", schedule.Config{Precision: schedule.AMP, Train: family.Recipe(f, g, schedule.SGD, true, 4)})
}
