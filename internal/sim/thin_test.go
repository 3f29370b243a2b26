package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestThinEpoch checks thinEpoch on seeded random epochs against what it
// promises: short epochs whole; long ones their first firstIterations,
// their last, each denser than all before it, and none left out denser
// than the densestIterations-th densest, in order, every left-out
// iteration counted once.
func TestThinEpoch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))

	for trial := range 50 {
		n := rng.IntN(3000)
		iters := make([][]int64, n)
		for i := range iters {
			iters[i] = []int64{-int64(i) - 1, rng.Int64N(300)} // the first, negative, names it
		}
		got := thinEpoch(iters)
		if n <= keptEpoch {
			if len(got) != n {
				t.Fatalf("trial %d: %d iterations kept %d, want all", trial, n, len(got))
			}
			continue
		}
		kept := map[int]bool{}
		omitted, last := 0, -1
		for _, e := range got {
			i := int(-e.BoxCounts[0] - 1)
			if i <= last {
				t.Fatalf("trial %d: iteration %d kept after %d", trial, i, last)
			}
			kept[i], last = true, i
			omitted += e.Omitted
		}
		if omitted+len(got) != n {
			t.Errorf("trial %d: %d kept and %d omitted, want %d in all", trial, len(got), omitted, n)
		}
		maxima := make([]int64, n)
		for i := range iters {
			maxima[i] = iters[i][1]
		}
		slices.Sort(maxima)
		cut := maxima[n-densestIterations]
		most := int64(-1)
		for i := range iters {
			d := iters[i][1]
			want := i < firstIterations || i == n-1 || d > most || d > cut
			if want && !kept[i] {
				t.Fatalf("trial %d: iteration %d (%d boxes, the most before it %d, the cut %d) left out", trial, i, d, most, cut)
			}
			most = max(most, d)
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
