package models_test

import (
	"fmt"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/models"
	"github.com/onnxmem/onnxmem/onnxmem"
)

// load builds a model and loads it as onnxmem loads a file.
func load(t *testing.T, name string) *onnxmem.Model {
	t.Helper()
	data, err := models.Build(name, models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := onnxmem.LoadBytes(name, data)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSimulateBuiltIn simulates every built-in model at batch 1, 640×640,
// under AMP, and checks that the step's figures are consistent.
func TestSimulateBuiltIn(t *testing.T) {
	for _, name := range models.Names() {
		t.Run(name, func(t *testing.T) {
			r, err := load(t, name).Simulate(onnxmem.Scenario{Batch: 1, Height: 640, Width: 640, AMP: true})
			if err != nil {
				t.Fatal(err)
			}
			if r.M0 <= 0 || r.Peak <= r.M0 || r.PeakReserved < r.Peak || r.PeakLayer < 0 {
				t.Errorf("M0 %d, peak %d, reserved %d, layer %d", r.M0, r.Peak, r.PeakReserved, r.PeakLayer)
			}
		})
	}
}

// summary is what TestSimulateMatchesExport compares of a Result: the
// figures of the step and where its peak falls. (AtPeak names values, and
// the graph outputs are named differently.)
type summary struct {
	Peak, PeakRequested, PeakReserved, M0, AfterForward, ForwardPeak, AfterBackward int64
	PeakPhase, PeakNode                                                             string
	PeakLayer, PeakEvent, Events                                                    int
}

func summarize(r *onnxmem.Result) summary {
	return summary{r.Peak, r.PeakRequested, r.PeakReserved, r.M0, r.AfterForward, r.ForwardPeak, r.AfterBackward,
		r.PeakPhase, r.PeakNode, r.PeakLayer, r.PeakEvent, r.Events}
}

// TestSimulateMatchesExport checks that a built-in model predicts what its
// export predicts, exactly: the peak, where it falls, the resident bytes and
// the event count. yolov9-c runs at batch 1 and 8, in fp32 and AMP, with 0
// and 2 checkpoint segments; the other exported models at batch 8 under AMP.
func TestSimulateMatchesExport(t *testing.T) {
	for _, name := range []string{"yolov9-c", "yolov9-t", "yolov9-s", "yolov9-m", "yolov9-e", "gelan-t", "gelan-c"} {
		export, err := onnxmem.Load(onnxbuild.Shared(t, "yolov9/"+name+"-train.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		built := load(t, name)
		batches, amps, segs := []int64{8}, []bool{true}, []int{0}
		if name == "yolov9-c" {
			batches, amps, segs = []int64{1, 8}, []bool{false, true}, []int{0, 2}
		}
		for _, batch := range batches {
			for _, amp := range amps {
				for _, segments := range segs {
					sc := onnxmem.Scenario{Batch: batch, Height: 640, Width: 640, AMP: amp, Segments: segments}
					t.Run(fmt.Sprintf("%s/b%d-amp=%v-k%d", name, batch, amp, segments), func(t *testing.T) {
						want, err := export.Simulate(sc)
						if err != nil {
							t.Fatal(err)
						}
						got, err := built.Simulate(sc)
						if err != nil {
							t.Fatal(err)
						}
						t.Logf("peak %d at %s (%s)", got.Peak, got.PeakNode, got.PeakPhase)
						if w, g := summarize(want), summarize(got); w != g {
							t.Errorf("built %+v\nexport %+v", g, w)
						}
					})
				}
			}
		}
	}
}
