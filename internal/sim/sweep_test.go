package sim_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestSweep checks that Sweep, which simulates batch sizes concurrently,
// returns what Simulate gives for each, in the order asked, calls progress
// once per batch size with a count that rises by one, and reports the
// error of the earliest batch size that fails.
func TestSweep(t *testing.T) {
	m, err := sim.Builtin("gelan-t")
	if err != nil {
		t.Fatal(err)
	}
	sc := sim.Options{Height: 320, Width: 320, AMP: true, Segments: 2}
	batches := []int64{8, 1, 4, 2, 16, 3}
	var counts []int
	got, err := m.Sweep(sc, batches, func(done, total int) {
		if total != len(batches) {
			t.Errorf("progress total %d, want %d", total, len(batches))
		}
		counts = append(counts, done)
	})
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := sim.Builtin("gelan-t")
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range batches {
		s := sc
		s.Batch = b
		want, err := fresh.Simulate(s)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got[i]); diff != "" {
			t.Errorf("batch %d: Sweep differs from Simulate (-Simulate +Sweep):\n%s", b, diff)
		}
	}
	if diff := cmp.Diff([]int{1, 2, 3, 4, 5, 6}, counts); diff != "" {
		t.Errorf("progress counts (-want +got):\n%s", diff)
	}
	_, err = m.Sweep(sc, []int64{2, 1 << 40, 1 << 41}, nil)
	var tl *sim.ErrTooLarge
	if !errors.As(err, &tl) || tl.Batch != 1<<40 {
		t.Fatalf("a sweep with batches of 2^40 and 2^41: error %v, want ErrTooLarge at batch 2^40", err)
	}
}
