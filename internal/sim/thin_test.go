package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestThinEpoch checks thinEpoch on seeded random epochs against what it
// promises: short epochs whole; long ones their first keptIterations, the
// keptIterations densest of the rest, the last, in order, every left-out
// iteration counted once, and none left out denser than a kept dense one.
func TestThinEpoch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 50 {
		n := rng.IntN(3000)
		iters := make([][]int64, n)
		for i := range iters {
			iters[i] = []int64{rng.Int64N(50), rng.Int64N(300)}
		}
		got := thinEpoch(iters)
		if n <= 2*keptIterations+1 {
			if len(got) != n {
				t.Fatalf("trial %d: %d iterations kept %d, want all", trial, n, len(got))
			}
			continue
		}
		if len(got) != 2*keptIterations+1 {
			t.Fatalf("trial %d: kept %d, want %d", trial, len(got), 2*keptIterations+1)
		}
		omitted, at := 0, 0
		var kept []int
		for _, e := range got {
			for !slices.Equal(iters[at], e.BoxCounts) {
				at++
			}
			kept = append(kept, at)
			at++
			omitted += e.Omitted
		}
		if omitted+len(got) != n {
			t.Errorf("trial %d: %d kept and %d omitted, want %d in all", trial, len(got), omitted, n)
		}
		if kept[keptIterations-1] != keptIterations-1 || kept[len(kept)-1] != n-1 {
			t.Errorf("trial %d: the first %d and the last are not all kept", trial, keptIterations)
		}
		least := int64(1 << 62) // the least densest of the kept dense ones
		for _, e := range got[keptIterations : len(got)-1] {
			least = min(least, slices.Max(e.BoxCounts))
		}
		for i := keptIterations; i < n-1; i++ {
			if !slices.Contains(kept, i) && slices.Max(iters[i]) > least {
				t.Fatalf("trial %d: iteration %d (max %d) left out, denser than a kept one (%d)", trial, i, slices.Max(iters[i]), least)
			}
		}
	}
}

// TestCollapseVal checks that many validation batches keep one of each run
// of a shape, its densest, counting the others, and few stay as they are.
func TestCollapseVal(t *testing.T) {
	var vals []RunEvent
	shape := func(h, w int64, boxes ...int64) RunEvent {
		return RunEvent{Kind: RunEventVal, Batch: 32, Height: h, Width: w, BoxCounts: boxes}
	}
	for i := range 70 {
		switch {
		case i < 30:
			vals = append(vals, shape(512, 672, int64(i)))
		case i < 69:
			vals = append(vals, shape(672, 672, int64(100-i)))
		default:
			vals = append(vals, RunEvent{Kind: RunEventVal, Batch: 8, Height: 672, Width: 672, BoxCounts: []int64{1}})
		}
	}
	got := collapseVal(vals)
	want := []RunEvent{shape(512, 672, 29), shape(672, 672, 70), vals[69]}
	want[0].Omitted, want[1].Omitted = 29, 38
	if !slices.EqualFunc(got, want, func(a, b RunEvent) bool {
		return a.Batch == b.Batch && a.Height == b.Height && a.Width == b.Width && a.Omitted == b.Omitted && slices.Equal(a.BoxCounts, b.BoxCounts)
	}) {
		t.Errorf("collapseVal = %+v, want %+v", got, want)
	}
	if few := vals[:valShapesKept]; len(collapseVal(few)) != valShapesKept {
		t.Errorf("%d batches collapsed, want them as they are", valShapesKept)
	}
}
