package sim_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/family/yolov9/models"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// summary is what the built-in tests compare of a Result: the figures of
// the step and where its peak falls. (AtPeak names values, and the graph
// outputs are named differently.)
type summary struct {
	Peak, PeakRequested, PeakReserved, M0, AfterForward, ForwardPeak, AfterBackward int64
	PeakPhase, PeakNode                                                             string
	PeakLayer, PeakEvent, Events                                                    int
}

func summarize(r *sim.Result) summary {
	return summary{r.Peak, r.PeakRequested, r.PeakReserved, r.M0, r.AfterForward, r.ForwardPeak, r.AfterBackward,
		r.PeakPhase, r.PeakNode, r.PeakLayer, r.PeakEvent, r.Events}
}

// TestBuiltinMatchesExport checks that every built-in model that has an
// export predicts exactly what the export does, in every precision, with and
// without checkpointing, for the model step, the evaluation step and the
// training step. (TestBuiltinEveryCalibration covers the calibrated models'
// scenarios; models.TestEquivalence compares the graphs node for node.)
func TestBuiltinMatchesExport(t *testing.T) {
	for _, name := range models.Names() {
		if !models.Checked(name) {
			continue // no export to compare with
		}
		t.Run(name, func(t *testing.T) {
			export, err := sim.Load(onnxbuild.Shared(t, "yolov9/"+name+"-train.onnx"))
			if err != nil {
				t.Fatal(err)
			}
			built, err := sim.Builtin(name)
			if err != nil {
				t.Fatal(err)
			}
			if built.Name != name {
				t.Errorf("Name = %q, want %q", built.Name, name)
			}
			for _, sc := range []sim.Options{
				{Batch: 4, Height: 640, Width: 640},
				{Batch: 3, Height: 512, Width: 384, AMP: true, Segments: 2},
				{Batch: 2, Height: 640, Width: 640, Half: true},
				{Batch: 2, Height: 640, Width: 640, Eval: true},
				{Batch: 2, Height: 640, Width: 640, AMP: true, Train: true, Boxes: 20},
			} {
				want, err := export.Simulate(sc)
				if err != nil {
					t.Fatal(err)
				}
				got, err := built.Simulate(sc)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(summarize(want), summarize(got)); diff != "" {
					t.Errorf("%+v: the built model's step differs from the export's (-export +built):\n%s", sc, diff)
				}
			}
		})
	}
}

// TestBuiltinEveryCalibration runs every scenario of calibration.jsonl on
// the built-in model of the same name as the scenario's export, and checks
// that both predict the same bytes: the peak, after the forward and reserved.
func TestBuiltinEveryCalibration(t *testing.T) {
	built := map[string]*sim.Model{}
	n := 0
	for _, kind := range []string{"model_step", "eval_step", "train_step"} {
		calibrations(t, kind, func(l calibrationLine, export *sim.Model) {
			name := strings.TrimSuffix(filepath.Base(l.Model), "-train.onnx")
			b := built[name]
			if b == nil {
				var err error
				if b, err = sim.Builtin(name); err != nil {
					t.Fatalf("%s: %v", l.Model, err)
				}
				built[name] = b
			}
			sc := l.scenario()
			want, err := export.Simulate(sc)
			if err != nil {
				t.Fatal(err)
			}
			got, err := b.Simulate(sc)
			if err != nil {
				t.Fatal(err)
			}
			n++
			if diff := cmp.Diff(summarize(want), summarize(got)); diff != "" {
				t.Errorf("%s %+v: the built model's step differs from the export's (-export +built):\n%s", name, sc, diff)
			}
		})
	}
	t.Logf("%d scenarios on %d built-in models, all as their exports", n, len(built))
}

// TestBuiltinEveryModel checks that every built-in model simulates.
func TestBuiltinEveryModel(t *testing.T) {
	for _, name := range models.Names() {
		m, err := sim.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.Simulate(sim.Options{Batch: 1, Height: 640, Width: 640, AMP: true})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.M0 <= 0 || r.Peak <= r.M0 || r.PeakReserved < r.Peak || r.PeakLayer < 0 {
			t.Errorf("%s: M0 %d, peak %d, reserved %d, layer %d", name, r.M0, r.Peak, r.PeakReserved, r.PeakLayer)
		}
	}
}

func TestBuiltinUnknown(t *testing.T) {
	_, err := sim.Builtin("yolov9-x")
	if err == nil || !strings.HasPrefix(err.Error(), "onnxmem: models: unknown model \"yolov9-x\"") {
		t.Errorf("Builtin(yolov9-x) error = %v", err)
	}
}

// TestParameters checks Parameters against the parameter counts that
// PyTorch gives for the official models (../shared/groundtruth/models.json:
// sum(p.numel() for p in model.parameters())). That count includes the
// 16 weights of each head's DFL convolution, which has requires_grad False
// and so gets no .grad: one head for GELAN, two for YOLOv9.
func TestParameters(t *testing.T) {
	var gt struct {
		Models map[string]struct {
			Params int64 `json:"params"`
		} `json:"models"`
	}
	data, err := os.ReadFile(onnxbuild.Shared(t, "groundtruth/models.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &gt); err != nil {
		t.Fatal(err)
	}
	if len(gt.Models) == 0 {
		t.Fatal("groundtruth/models.json lists no models")
	}
	for _, name := range models.Names() {
		want, ok := gt.Models[name]
		if !ok {
			continue
		}
		m, err := sim.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Parameters()
		if err != nil {
			t.Fatal(err)
		}
		heads := int64(1)
		if strings.HasPrefix(name, "yolov9-") {
			heads = 2
		}
		if got != want.Params-16*heads {
			t.Errorf("%s: %d parameters with a .grad, want %d (PyTorch's %d less %d DFL weights)", name, got, want.Params-16*heads, want.Params, 16*heads)
		}
	}
}
