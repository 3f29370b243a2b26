package liveness

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// sizes returns a size function over a table of buffer sizes.
func sizes(s ...int64) func(int32) int64 { return func(b int32) int64 { return s[b] } }

// alloc and free make events.
func alloc(b int32) Event { return Event{Buf: b} }
func free(b int32) Event  { return Event{Buf: b, Free: true} }

// example is the worked example of the package comment.
var example = []Event{alloc(0), alloc(1), free(0), alloc(2), free(1)}

// TestCurve checks the live bytes after each event, from base bytes.
func TestCurve(t *testing.T) {
	for _, c := range []struct {
		name   string
		events []Event
		base   int64
		want   []int64
	}{
		{"worked example", example, 0, []int64{10, 30, 20, 25, 5}},
		{"base bytes", example, 100, []int64{110, 130, 120, 125, 105}},
		{"freeing a buffer live before the events", []Event{free(0), alloc(1)}, 10, []int64{0, 20}},
		{"empty", nil, 7, []int64{}},
	} {
		if got := Curve(c.events, sizes(10, 20, 5), c.base); !slices.Equal(got, c.want) {
			t.Errorf("%s: Curve = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestPeak checks the maximum of a curve and the first index reaching it.
func TestPeak(t *testing.T) {
	for _, c := range []struct {
		curve []int64
		peak  int64
		at    int
	}{
		{[]int64{10, 30, 20, 25, 5}, 30, 1},
		{[]int64{5, 9, 9, 3}, 9, 1}, // the first of equal maxima
		{[]int64{-4, -2, -3}, -2, 1},
		{[]int64{7}, 7, 0},
		{nil, 0, -1},
	} {
		if peak, at := Peak(c.curve); peak != c.peak || at != c.at {
			t.Errorf("Peak(%v) = %d at %d, want %d at %d", c.curve, peak, at, c.peak, c.at)
		}
	}
}

// TestLiveAt checks the buffers live after an event: initial ones, those
// allocated and not freed, largest first and then by buffer.
func TestLiveAt(t *testing.T) {
	size := sizes(10, 20, 5, 20, 10)
	for _, c := range []struct {
		name    string
		events  []Event
		at      int
		initial []int32
		want    []int32
	}{
		{"worked example at the peak", example, 1, nil, []int32{1, 0}},
		{"worked example at the end", example, 4, nil, []int32{2}},
		{"worked example after the first free", example, 2, nil, []int32{1}},
		{"before every event: only the initial buffers", example, -1, []int32{4}, []int32{4}},
		{"at past the end: after the last event", example, 99, nil, []int32{2}},
		{"an initial buffer freed", []Event{free(4), alloc(2)}, 1, []int32{4, 0}, []int32{0, 2}},
		{"equal sizes: lower buffer first", []Event{alloc(3), alloc(1), alloc(4), alloc(0)}, 3, nil, []int32{1, 3, 0, 4}},
		{"nothing live", []Event{alloc(0), free(0)}, 1, nil, nil},
	} {
		if got := LiveAt(c.events, c.at, c.initial, size); !slices.Equal(got, c.want) {
			t.Errorf("%s: LiveAt = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestOracle checks Curve, Peak and LiveAt against a brute-force recount on
// 300 seeded random programs: each buffer is allocated at most once and
// freed at most once after that, and some buffers are live from the start.
func TestOracle(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 1))
		nbuf := 1 + rng.IntN(40)
		size := make([]int64, nbuf)
		for i := range size {
			size[i] = 1 + rng.Int64N(1000)
			if rng.IntN(4) == 0 {
				size[i] = 64 // ties in the ordering
			}
		}
		// Each buffer: initially live, or allocated at a random point; then
		// maybe freed later.
		var events []Event
		var initial []int32
		state := make([]int, nbuf) // 0 not yet, 1 live, 2 freed
		for b := range nbuf {
			if rng.IntN(5) == 0 {
				initial = append(initial, int32(b))
				state[b] = 1
			}
		}
		for range 3 * nbuf {
			b := rng.IntN(nbuf)
			switch state[b] {
			case 0:
				events = append(events, alloc(int32(b)))
				state[b] = 1
			case 1:
				if rng.IntN(2) == 0 {
					events = append(events, free(int32(b)))
					state[b] = 2
				}
			}
		}
		var base int64
		for _, b := range initial {
			base += size[b]
		}
		sz := func(b int32) int64 { return size[b] }
		curve := Curve(events, sz, base)
		// liveAfter recounts from scratch which buffers are live after event i.
		liveAfter := func(i int) []int32 {
			var out []int32
			for b := range int32(nbuf) {
				live := slices.Contains(initial, b)
				for _, e := range events[:min(i+1, len(events))] {
					if e.Buf == b {
						live = !e.Free
					}
				}
				if live {
					out = append(out, b)
				}
			}
			slices.SortStableFunc(out, func(x, y int32) int { return int(size[y] - size[x]) })
			return out
		}
		wantPeak, wantAt := int64(0), -1
		for i := range events {
			live := liveAfter(i)
			var sum int64
			for _, b := range live {
				sum += size[b]
			}
			if curve[i] != sum {
				t.Fatalf("seed %d: curve[%d] = %d, recount %d", seed, i, curve[i], sum)
			}
			if got := LiveAt(events, i, initial, sz); !slices.Equal(got, live) {
				t.Fatalf("seed %d: LiveAt(%d) = %v, recount %v", seed, i, got, live)
			}
			if wantAt < 0 || sum > wantPeak {
				wantPeak, wantAt = sum, i
			}
		}
		if peak, at := Peak(curve); peak != wantPeak || at != wantAt {
			t.Fatalf("seed %d: Peak = %d at %d, recount %d at %d", seed, peak, at, wantPeak, wantAt)
		}
	}
}
