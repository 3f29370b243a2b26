package sim_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestProcessFirstIsSimulate wants a process's first scenario to be
// Simulate's, for every way of emptying the cache and kind of step.
func TestProcessFirstIsSimulate(t *testing.T) {
	m, err := sim.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []sim.EmptyCache{"", sim.EmptyCacheStep, sim.EmptyCacheWarmUp, sim.EmptyCacheNever} {
		for _, sc := range []sim.Options{
			{Batch: 4, Height: 320, Width: 320, AMP: true, Segments: 2},
			{Batch: 4, Height: 320, Width: 320, Train: true, Boxes: 4, EMA: true},
			{Batch: 8, Height: 320, Width: 320, Eval: true},
		} {
			sc.EmptyCache = mode
			want, err := m.Simulate(sc)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.NewProcess().Simulate(sc)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%+v: the process's first step differs from Simulate (-Simulate +process):\n%s", sc, d)
			}
		}
	}
}

// TestEmptyCacheModes checks what each way of emptying the cache keeps: the
// bytes requested are the same in all; never emptying keeps every segment a
// larger earlier scenario reserved, so the next one reserves at least as
// much; emptying before the measured step releases all but the segments
// that the gradients hold.
func TestEmptyCacheModes(t *testing.T) {
	m, err := sim.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	big := sim.Options{Batch: 16, Height: 320, Width: 320}
	small := sim.Options{Batch: 1, Height: 320, Width: 320}
	var requested []int64
	reserved := map[sim.EmptyCache]int64{}
	for _, mode := range []sim.EmptyCache{sim.EmptyCacheStep, sim.EmptyCacheWarmUp, sim.EmptyCacheNever} {
		big.EmptyCache, small.EmptyCache = mode, mode
		p := m.NewProcess()
		b, err := p.Simulate(big)
		if err != nil {
			t.Fatal(err)
		}
		s, err := p.Simulate(small)
		if err != nil {
			t.Fatal(err)
		}
		requested = append(requested, s.PeakRequested)
		reserved[mode] = s.PeakReserved
		if mode == sim.EmptyCacheNever && s.PeakReserved < b.PeakReserved {
			t.Errorf("never emptied: batch 1 after batch 16 reserves %d, less than batch 16's %d", s.PeakReserved, b.PeakReserved)
		}
	}
	for _, r := range requested[1:] {
		if r != requested[0] {
			t.Errorf("requested peaks %v: want one figure whatever the cache holds", requested)
		}
	}
	if reserved[sim.EmptyCacheStep] >= reserved[sim.EmptyCacheNever] {
		t.Errorf("batch 1 after batch 16 reserves %d with the cache emptied, %d without: want less", reserved[sim.EmptyCacheStep], reserved[sim.EmptyCacheNever])
	}
}

// TestProcessRefuses lists what a process does not simulate, each an error
// that says why.
func TestProcessRefuses(t *testing.T) {
	m, err := sim.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	step := sim.Options{Batch: 2, Height: 320, Width: 320}
	for _, c := range []struct {
		first, next sim.Options
		want        string
	}{
		{step, sim.Options{Batch: 2, Height: 320, Width: 320, AllocConf: "expandable_segments:True"}, "a process has one allocator"},
		{step, sim.Options{Batch: 2, Height: 320, Width: 320, Capacity: 1 << 30}, "a process has one allocator"},
		{step, sim.Options{Batch: 2, Height: 320, Width: 320, EmptyCache: sim.EmptyCacheNever}, "one way to every scenario"},
		{step, sim.Options{Batch: 2, Height: 320, Width: 320, Train: true, Boxes: 2, EmptyCache: sim.EmptyCacheStep}, "other parameters"},
		{step, sim.Options{Batch: 2, Height: 320, Width: 320, Half: true}, "other parameters"},
		{sim.Options{Batch: 64, Height: 640, Width: 640, Capacity: 1 << 30}, sim.Options{Batch: 1, Height: 640, Width: 640, Capacity: 1 << 30}, "ran out of memory"},
		{step, sim.Options{Batch: 2, Height: 320, Width: 320, EmptyCache: "sometimes"}, `empty cache "sometimes"`},
	} {
		p := m.NewProcess()
		if _, err := p.Simulate(c.first); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Simulate(c.next); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v after %+v: error %v, want one saying %q", c.next, c.first, err, c.want)
		}
	}
}
