package allocator

import (
	"errors"
	"testing"
)

// Sizes in bytes.
const (
	kib = int64(1) << 10
	mib = int64(1) << 20
)

// TestRoundSize checks the 512-byte rounding, as measured: 1 → 512,
// 513 → 1024, 1048577 → 1049088.
func TestRoundSize(t *testing.T) {
	for _, c := range []struct{ n, want int64 }{
		{0, 512}, {1, 512}, {511, 512}, {512, 512}, {513, 1024},
		{1048576, 1048576}, {1048577, 1049088}, {10*mib - 1, 10 * mib},
		{25*mib + 123, 25*mib + 512},
	} {
		if got := RoundSize(c.n); got != c.want {
			t.Errorf("RoundSize(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// TestSegmentSize covers the three segment rules: 2 MiB for the small pool,
// 20 MiB for large requests below 10 MiB, and from 10 MiB the request rounded
// up to 2 MiB.
func TestSegmentSize(t *testing.T) {
	for _, c := range []struct{ rounded, want int64 }{
		{512, 2 * mib}, {1 * mib, 2 * mib},
		{1*mib + 512, 20 * mib}, {5 * mib, 20 * mib}, {10*mib - 512, 20 * mib},
		{10 * mib, 10 * mib}, {10*mib + 512, 12 * mib}, {20*mib + 512, 22 * mib},
		{25*mib + 512, 26 * mib}, {1 << 30, 1 << 30}, {1<<30 + 512, 1<<30 + 2*mib},
	} {
		if got := SegmentSize(c.rounded); got != c.want {
			t.Errorf("SegmentSize(%d) = %d, want %d", c.rounded, got, c.want)
		}
	}
}

// op is one step of a scripted allocator session.
type op struct {
	malloc int64 // a request of this many bytes, when positive
	size   int64 // the block size the request must get, when positive
	free   int   // else: free the allocation made by step free-1, when positive
	empty  bool  // else: EmptyCache
}

// m requests n bytes and, when size > 0, checks the block size; f frees the
// allocation of the given step; emptyCache calls EmptyCache.
func m(n, size int64) op { return op{malloc: n, size: size} }
func f(step int) op      { return op{free: step + 1} }

var emptyCache = op{empty: true}

// play runs ops on a and checks each block size.
func play(t *testing.T, a *Allocator, ops []op) {
	t.Helper()
	ids := make([]ID, len(ops))
	for i, o := range ops {
		switch {
		case o.malloc > 0:
			ids[i] = a.Malloc(o.malloc)
			if got := a.Size(ids[i]); o.size > 0 && got != o.size {
				t.Errorf("step %d: Malloc(%d) got a block of %d, want %d", i, o.malloc, got, o.size)
			}
		case o.free > 0:
			a.Free(ids[o.free-1])
		case o.empty:
			a.EmptyCache()
		}
	}
}

// TestRules replays the worked example of the package comment and the cases
// that calibration/README.md (section 3) measured on an H200.
func TestRules(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  []op
		// The counters at the end.
		allocated, requested, reserved int64
	}{
		{"worked example: 11.5 MiB from a free 12 MiB block counts 12 MiB",
			[]op{m(12*mib, 12*mib), f(0), m(23*mib/2, 12*mib)}, 12 * mib, 23 * mib / 2, 12 * mib},
		{"exactly 11 MiB from a free 12 MiB block counts 12 MiB (leftover 1 MiB: not split)",
			[]op{m(12*mib, 0), f(0), m(11*mib, 12*mib)}, 12 * mib, 11 * mib, 12 * mib},
		{"11 MiB+1 from a free 12 MiB block counts 12 MiB",
			[]op{m(12*mib, 0), f(0), m(11*mib+1, 12*mib)}, 12 * mib, 11*mib + 1, 12 * mib},
		{"11 MiB-512 from a free 12 MiB block is split",
			[]op{m(12*mib, 0), f(0), m(11*mib-512, 11*mib-512)}, 11*mib - 512, 11*mib - 512, 12 * mib},
		{"10.5 MiB from a free 12 MiB block is split",
			[]op{m(12*mib, 0), f(0), m(21*mib/2, 21*mib/2)}, 21 * mib / 2, 21 * mib / 2, 12 * mib},
		{"fresh 25 MiB+123: a 26 MiB segment, counted whole",
			[]op{m(25*mib+123, 27262976)}, 27262976, 25*mib + 123, 26 * mib},
		{"10 MiB-1 rounds to 10 MiB: a 10 MiB segment",
			[]op{m(10*mib-1, 10*mib)}, 10 * mib, 10*mib - 1, 10 * mib},
		{"10 MiB+1: a 12 MiB segment, split",
			[]op{m(10*mib+1, 10*mib+512)}, 10*mib + 512, 10*mib + 1, 12 * mib},
		{"20 MiB+1: a 22 MiB segment, split",
			[]op{m(20*mib+1, 20*mib+512)}, 20*mib + 512, 20*mib + 1, 22 * mib},
		{"1 MiB+1 is large: a 20 MiB segment",
			[]op{m(mib+1, 1049088)}, 1049088, mib + 1, 20 * mib},
		{"5 MiB: a 20 MiB segment",
			[]op{m(5*mib, 5*mib)}, 5 * mib, 5 * mib, 20 * mib},
		{"small pool: 600 KiB counts 614400 in a 2 MiB segment",
			[]op{m(600*kib, 614400)}, 614400, 614400, 2 * mib},
		{"small pool: 4 × 600 KiB use two segments",
			[]op{m(600*kib, 0), m(600*kib, 0), m(600*kib, 0), m(600*kib, 0)}, 4 * 614400, 4 * 614400, 4 * mib},
		{"small pool: a 512-byte leftover is split off",
			[]op{m(mib, mib), m(mib-512, mib-512)}, 2*mib - 512, 2*mib - 512, 2 * mib},
		{"small pool: a small request never takes a cached large block",
			[]op{m(5*mib, 0), f(0), m(600*kib, 614400)}, 614400, 614400, 22 * mib},
		{"merge: two freed 4 MiB blocks next to a live 6 MiB one serve 7 MiB as 8 MiB",
			[]op{m(4*mib, 4*mib), m(4*mib, 4*mib), m(6*mib, 6*mib), f(0), f(1), m(7*mib, 8*mib)}, 14 * mib, 13 * mib, 20 * mib},
		{"reuse: 12 MiB after a freed 5 MiB request splits its 20 MiB segment",
			[]op{m(5*mib, 0), f(0), m(12*mib, 12*mib)}, 12 * mib, 12 * mib, 20 * mib},
		{"reuse: 19.5 MiB in a free 20 MiB segment counts 20 MiB",
			[]op{m(5*mib, 0), f(0), m(39*mib/2, 20*mib)}, 20 * mib, 39 * mib / 2, 20 * mib},
		{"best fit: the smallest free block that fits",
			[]op{m(14*mib, 0), m(12*mib, 0), m(16*mib, 0), f(0), f(1), f(2), m(11*mib+1, 12*mib)}, 12 * mib, 11*mib + 1, 42 * mib},
		{"a free neighbour on both sides merges into one block",
			[]op{m(4*mib, 0), m(4*mib, 0), m(4*mib, 0), m(8*mib, 0), f(0), f(2), f(1), m(12*mib, 12*mib)}, 20 * mib, 20 * mib, 20 * mib},
		{"EmptyCache releases wholly free segments only",
			[]op{m(12*mib, 0), m(4*mib, 0), m(600*kib, 0), f(0), emptyCache}, 4*mib + 614400, 4*mib + 614400, 22 * mib},
		{"EmptyCache after merging releases the segment",
			[]op{m(4*mib, 0), m(6*mib, 0), f(1), f(0), emptyCache}, 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := New()
			play(t, a, c.ops)
			st := a.Stats()
			if st.Allocated != c.allocated || st.Requested != c.requested || st.Reserved != c.reserved {
				t.Errorf("allocated %d, requested %d, reserved %d; want %d, %d, %d",
					st.Allocated, st.Requested, st.Reserved, c.allocated, c.requested, c.reserved)
			}
		})
	}
}

// TestPeaks checks that peaks follow the counters and that ResetPeaks sets
// them to the current values.
func TestPeaks(t *testing.T) {
	a := New()
	x := a.Malloc(12 * mib)
	y := a.Malloc(3 * mib)
	a.Free(x)
	st := a.Stats()
	want := Stats{Allocated: 3 * mib, Requested: 3 * mib, Reserved: 32 * mib,
		PeakAllocated: 15 * mib, PeakRequested: 15 * mib, PeakReserved: 32 * mib}
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	a.ResetPeaks()
	a.Free(y)
	a.EmptyCache()
	want = Stats{PeakAllocated: 3 * mib, PeakRequested: 3 * mib, PeakReserved: 32 * mib}
	if st := a.Stats(); st != want {
		t.Errorf("after ResetPeaks, Free and EmptyCache: %+v, want %+v", st, want)
	}
}

// TestCapacity checks that a request beyond Capacity first releases the
// cache, and then fails with ErrOutOfMemory, leaving the counters as they
// were.
func TestCapacity(t *testing.T) {
	a := New()
	a.Capacity = 30 * mib
	x := a.Malloc(12 * mib)
	a.Free(x)
	// 12 MiB cached + a new 20 MiB segment exceeds 30 MiB: the cache goes.
	if _, err := a.TryMalloc(20 * mib); err != nil {
		t.Fatalf("TryMalloc(20 MiB) after freeing 12 MiB: %v", err)
	}
	if st := a.Stats(); st.Reserved != 20*mib {
		t.Errorf("reserved %d, want 20 MiB: the free 12 MiB segment should have been released", st.Reserved)
	}
	_, err := a.TryMalloc(12 * mib)
	var oom *ErrOutOfMemory
	if !errors.As(err, &oom) {
		t.Fatalf("TryMalloc(12 MiB) with 20 of 30 MiB reserved: got %v, want ErrOutOfMemory", err)
	}
	if *oom != (ErrOutOfMemory{Requested: 12 * mib, Reserved: 20 * mib, Capacity: 30 * mib}) {
		t.Errorf("error %+v", *oom)
	}
	if st := a.Stats(); st.Allocated != 20*mib || st.Reserved != 20*mib {
		t.Errorf("a failed request changed the counters: %+v", st)
	}
}

// TestPanics checks the documented panics of Malloc and Free.
func TestPanics(t *testing.T) {
	for name, fn := range map[string]func(a *Allocator){
		"double free":      func(a *Allocator) { id := a.Malloc(1); a.Free(id); a.Free(id) },
		"negative request": func(a *Allocator) { a.Malloc(-1) },
		"out of memory": func(a *Allocator) {
			a.Capacity = mib
			a.Malloc(4 * mib)
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			fn(New())
		})
	}
}
