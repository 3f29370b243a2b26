package sim_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestHostileInputs checks inputs that once hung or gave a silent answer:
// each is an error that names what is wrong.
func TestHostileInputs(t *testing.T) {
	if _, err := sim.Load("/dev/zero"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("/dev/zero: %v", err)
	}
	m, err := sim.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	// Batch 2e10 once wrapped reserved bytes to a negative count.
	var big *sim.ErrTooLarge
	if _, err := m.Simulate(sim.Options{Batch: 20_000_000_000, Height: 640, Width: 640}); !errors.As(err, &big) {
		t.Errorf("batch 2e10: %v, want an ErrTooLarge", err)
	}
	// FLOPs at batch 1e9 once wrapped to a negative backward.
	e, err := sim.Builtin("yolov9-e")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Cost(sim.Options{Batch: 1_000_000_000, Height: 640, Width: 640}); err == nil || !strings.Contains(err.Error(), "FLOPs pass 2^62") {
		t.Errorf("FLOPs at batch 1e9: %v", err)
	}
	// A search past the bound stops at it rather than failing.
	if n, _, err := m.MaxBatch(sim.Options{Height: 640, Width: 640}, 1<<62, 10_000_000_000); err != nil || n <= 0 {
		t.Errorf("max batch under 2^62 bytes up to 1e10: %d, %v", n, err)
	}
	for _, tc := range []struct {
		sc   sim.Options
		want string
	}{
		// checkpoint_sequential with more segments than layers raises in
		// PyTorch; 1e8 of them once built 1e8 ranges.
		{sim.Options{Batch: 1, Height: 64, Width: 64, Segments: 31}, "segments 31: yolov9-t has 30 top-level layers"},
		{sim.Options{Batch: 1, Height: 64, Width: 64, Segments: 100000000}, "segments 100000000"},
		{sim.Options{Batch: 1, Height: 64, Width: 64, Checkpoint: []sim.Range{{From: 0, To: 40}}}, "checkpoint range 0-39"},
		{sim.Options{Batch: 1, Height: 64, Width: 64, Checkpoint: []sim.Range{{From: 4, To: 6}, {From: 2, To: 3}}}, "in order and disjoint"},
	} {
		if _, err := m.Simulate(tc.sc); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Simulate %+v: %v, want an error with %q", tc.sc, err, tc.want)
		}
		if _, err := m.Cost(tc.sc); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Cost %+v: %v, want an error with %q", tc.sc, err, tc.want)
		}
	}
}
