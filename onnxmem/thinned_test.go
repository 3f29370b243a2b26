package onnxmem_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/family/yolov9/dataset"
	"github.com/onnxmem/onnxmem/internal/sim"
	"github.com/onnxmem/onnxmem/onnxmem"
)

// TestThinnedRun checks that a planned run, which simulates only some of a
// long epoch's iterations, peaks as the whole epoch does: yolov9-s at
// batch 48 under AMP, one epoch of the built-in COCO-like data (2,465
// iterations), each of them replayed against the plan's few.
func TestThinnedRun(t *testing.T) {
	if testing.Short() {
		t.Skip("replays a whole epoch")
	}
	m, err := onnxmem.Builtin("yolov9-s")
	if err != nil {
		t.Fatal(err)
	}
	const batch = 48
	p := onnxmem.RunPlan{Epochs: 1, Batch: batch, Height: 640, Width: 640, Seed: 1}
	thinned, err := m.PlanRun(p)
	if err != nil {
		t.Fatal(err)
	}
	// The same draw, every iteration: the plan's stream of that seed.
	counts := dataset.COCOLike().EpochCounts(640, dataset.ScratchHigh, sim.PlanRand(p.Seed))
	whole := []onnxmem.RunEvent{thinned[0]}
	for _, c := range dataset.Group(counts, batch) {
		whole = append(whole, onnxmem.RunEvent{Kind: "train", BoxCounts: c})
	}
	kept := 0
	for _, e := range thinned[1:] {
		if e.Kind == "train" {
			kept++
			continue
		}
		whole = append(whole, e)
	}
	if kept >= len(dataset.Group(counts, batch))/4 {
		t.Fatalf("the plan kept %d of %d iterations: want it thinned", kept, len(dataset.Group(counts, batch)))
	}
	sc := onnxmem.Scenario{Batch: batch, AMP: true}
	a, err := m.Run(sc, thinned)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Run(sc, whole)
	if err != nil {
		t.Fatal(err)
	}
	if d := float64(a.Peak-b.Peak) / float64(b.Peak); d > 0.001 || d < -0.001 {
		t.Errorf("thinned peak %d, whole epoch's %d: %.3f%% apart, want within 0.1%%", a.Peak, b.Peak, 100*d)
	}
	if a.PeakReserved != b.PeakReserved {
		t.Errorf("thinned peak reserved %d, whole epoch's %d", a.PeakReserved, b.PeakReserved)
	}
}
