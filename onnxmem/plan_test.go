package onnxmem_test

import (
	"path/filepath"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/onnxmem"
)

// TestCheckpointPlans checks explicit plans: the plan checkpoint_sequential
// makes gives the Segments result exactly, every extra checkpointed layer
// lowers the forward's memory, and checkpointing every layer keeps the
// least after the forward.
func TestCheckpointPlans(t *testing.T) {
	m, err := onnxmem.Load(onnxbuild.Shared(t, filepath.Join("yolov9", "yolov9-s-train.onnx")))
	if err != nil {
		t.Fatal(err)
	}
	base := onnxmem.Scenario{Batch: 8, Height: 640, Width: 640, AMP: true}
	run := func(sc onnxmem.Scenario) *onnxmem.Result {
		t.Helper()
		r, err := m.Simulate(sc)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	seg := base
	seg.Segments = 2
	plan := base
	plan.Checkpoint = onnxmem.Sequential(m.Layers(), 2)
	if a, b := run(seg), run(plan); a.Peak != b.Peak || a.AfterForward != b.AfterForward {
		t.Errorf("Segments 2 gives peak %d, after forward %d; the same plan given explicitly %d, %d", a.Peak, a.AfterForward, b.Peak, b.AfterForward)
	}
	none := run(base)
	half := base
	half.Checkpoint = []onnxmem.Range{{From: 0, To: m.Layers() / 2}}
	all := base
	all.Checkpoint = onnxmem.EachLayer(m.Layers() - 1) // the head's outputs are the step's outputs
	h, e := run(half), run(all)
	if !(h.AfterForward < none.AfterForward && e.AfterForward < h.AfterForward) {
		t.Errorf("after forward: none %d, first half %d, every layer %d: want strictly decreasing", none.AfterForward, h.AfterForward, e.AfterForward)
	}
	if e.PeakPhase == "forward" && e.Peak > none.Peak {
		t.Errorf("checkpointing every layer raised the peak: %d > %d", e.Peak, none.Peak)
	}
	t.Logf("yolov9-s AMP b8: peak none %.0f MiB, first half %.0f MiB (%s), every layer %.0f MiB (%s)",
		float64(none.Peak)/(1<<20), float64(h.Peak)/(1<<20), h.PeakPhase, float64(e.Peak)/(1<<20), e.PeakPhase)
}
