package sim_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestInferenceExportStandsIn checks that every inference export of the
// shared data, which holds no training graph, loads as the built-in model
// it was made from (Model.Builtin), and that its model, train and eval
// steps are then those of that model's training export, figure for figure.
func TestInferenceExportStandsIn(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(onnxbuild.Shared(t, "yolov9"), "*-infer*.onnx"))
	if err != nil || len(files) < 8 {
		t.Fatalf("%d inference exports (%v), want the 8 of the shared data", len(files), err)
	}
	scs := []sim.Options{
		{Batch: 4, Height: 384, Width: 640, AMP: true, Segments: 2},
		{Batch: 2, Height: 640, Width: 640, Train: true, Boxes: 7, EMA: true},
		{Batch: 8, Height: 640, Width: 640, Eval: true},
	}
	for _, path := range files {
		name := filepath.Base(path)
		want := name[:strings.Index(name, "-infer")]
		m, err := sim.Load(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m.Builtin != want || m.Name != strings.TrimSuffix(name, ".onnx") {
			t.Errorf("%s: loads as %q built in %q; want its own name, built in %q", name, m.Name, m.Builtin, want)
			continue
		}
		train, err := sim.Load(filepath.Join(filepath.Dir(path), want+"-train.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		for _, sc := range scs {
			got, err := m.Simulate(sc)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			exp, err := train.Simulate(sc)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(summarize(exp), summarize(got)); d != "" {
				t.Errorf("%s: %+v differs from its training export's (-train +infer):\n%s", name, sc, d)
			}
		}
	}
	// A training export is itself.
	m, err := sim.Load(filepath.Join(onnxbuild.Shared(t, "yolov9"), "yolov9-s-train.onnx"))
	if err != nil || m.Builtin != "" {
		t.Errorf("yolov9-s-train.onnx: Builtin %q, %v; want none", m.Builtin, err)
	}
}

// TestInferenceExportNoStandIn checks that an inference export of a model
// that no built-in model has the convolutions of (a convolution and a
// DDetect head's two box convolutions, without batch norms) is refused
// with an error that says so.
func TestInferenceExportNoStandIn(t *testing.T) {
	b := onnxbuild.New("odd")
	x := b.Layer(1).SiLU(b.Layer(0).Conv(b.Input("x", 3), 16, 3, 2))
	head := b.Layer(2)
	b.Output(head.Index(0).Conv(x, 64, 1, 1, onnxbuild.Group(4), onnxbuild.Bias()), head.Index(1).Conv(x, 64, 1, 1, onnxbuild.Group(4), onnxbuild.Bias()))
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	m, err := sim.LoadBytes("odd", data)
	if err != nil {
		t.Fatal(err)
	}
	if m.Builtin != "" {
		t.Fatalf("Builtin %q stands for a one-convolution graph", m.Builtin)
	}
	_, err = m.Simulate(sim.Options{Batch: 1, Height: 64, Width: 64})
	wantErr(t, "three convolutions", err, "onnxmem: odd: yolov9: an inference export", "no built-in model (yolov9-t, ", "has its convolutions")
}
