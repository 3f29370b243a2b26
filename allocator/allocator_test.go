package allocator

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
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

// TestPlacement checks that Placement orders the segments' addresses
// (each new one below the earlier ones, or above them), that a copy keeps
// it and Reset drops it, and that of two free blocks of one size a request
// gets the lower one: the segment made last with TopDown, first with
// BottomUp.
func TestPlacement(t *testing.T) {
	for _, place := range []Placement{TopDown, BottomUp} {
		a := New()
		a.Placement = place
		x := a.Malloc(20 * mib)
		b := New()
		b.CopyFrom(a)
		if b.Placement != place {
			t.Fatalf("placement %d: CopyFrom made %d", place, b.Placement)
		}
		y := b.Malloc(20 * mib)
		addrX, addrY := b.blocks[b.live[x]].addr, b.blocks[b.live[y]].addr
		if up := addrY > addrX; up != (place == BottomUp) {
			t.Errorf("placement %d: the first segment at %#x, the second at %#x", place, addrX, addrY)
		}
		b.Free(x)
		b.Free(y)
		z := b.Malloc(20 * mib)
		want := min(addrX, addrY)
		if got := b.blocks[b.live[z]].addr; got != want {
			t.Errorf("placement %d: the request took the block at %#x, want the lower one at %#x", place, got, want)
		}
		if b.Reset(Config{}); b.Placement != TopDown {
			t.Errorf("placement %d: Reset kept it", place)
		}
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

// playConf runs ops on an allocator made with c and capacity, and returns it.
func playConf(t *testing.T, c Config, capacity int64, ops []op) *Allocator {
	t.Helper()
	a := NewWithConfig(c)
	a.Capacity = capacity
	play(t, a, ops)
	return a
}

// TestConfRules checks each rule of the configured path on a worked example:
// the counters at the end, and the oversize counts.
func TestConfRules(t *testing.T) {
	split64 := Config{MaxSplitSize: 64 * mib}
	expandable := Config{ExpandableSegments: true}
	for _, c := range []struct {
		name     string
		cfg      Config
		capacity int64
		ops      []op
		// The counters at the end.
		allocated, requested, reserved int64
		oversize                       [2]int64
	}{
		// max_split_size_mb (get_free_block, should_split, alloc_block).
		{"max_split: a request below max_split_size never takes an oversize block: 5 MiB reserves 20 MiB beside a free 100 MiB",
			split64, 0, []op{m(100*mib, 100*mib), f(0), m(5*mib, 5*mib)}, 5 * mib, 5 * mib, 120 * mib, [2]int64{0, 1}},
		{"max_split: an oversize request takes a block less than 20 MiB larger, whole: 90 MiB gets the free 100 MiB",
			split64, 0, []op{m(100*mib, 0), f(0), m(90*mib, 100*mib)}, 100 * mib, 90 * mib, 100 * mib, [2]int64{1, 1}},
		{"max_split: an oversize request refuses a block 20 MiB larger: 80 MiB reserves 80 MiB beside a free 100 MiB",
			split64, 0, []op{m(100*mib, 0), f(0), m(80*mib, 80*mib)}, 80 * mib, 80 * mib, 180 * mib, [2]int64{1, 2}},
		{"max_non_split_rounding_mb:40: 70 MiB gets the free 100 MiB",
			Config{MaxSplitSize: 64 * mib, MaxNonSplitRounding: 40 * mib}, 0, []op{m(100*mib, 0), f(0), m(70*mib, 100*mib)}, 100 * mib, 70 * mib, 100 * mib, [2]int64{1, 1}},
		{"max_split: a request below it still splits a block below it: 30 MiB from a free 50 MiB",
			split64, 0, []op{m(50*mib, 0), f(0), m(30*mib, 30*mib)}, 30 * mib, 30 * mib, 50 * mib, [2]int64{}},
		{"max_split: oversize counts follow live blocks and segments: 100 MiB freed, 70 MiB live",
			split64, 0, []op{m(100*mib, 0), m(70*mib, 0), f(0)}, 70 * mib, 70 * mib, 170 * mib, [2]int64{1, 2}},
		// release_available_cached_blocks: the smallest free oversize segment
		// that holds the request goes first, before the whole cache.
		{"out of memory with max_split: the free 100 MiB segment goes, the free 20 MiB one stays",
			split64, 150 * mib, []op{m(100*mib, 0), m(5*mib, 0), f(0), f(1), m(70*mib, 70*mib)}, 70 * mib, 70 * mib, 90 * mib, [2]int64{1, 1}},
		{"the same without max_split: 70 MiB splits the free 100 MiB block, nothing runs out",
			Config{}, 150 * mib, []op{m(100*mib, 0), m(5*mib, 0), f(0), f(1), m(70*mib, 70*mib)}, 70 * mib, 70 * mib, 120 * mib, [2]int64{}},
		{"out of memory with max_split: free oversize segments of 80 and 70 MiB go, largest first, for 140 MiB",
			split64, 300 * mib, []op{m(80*mib, 0), m(70*mib, 0), m(5*mib, 0), f(0), f(1), f(2), m(140*mib, 140*mib)}, 140 * mib, 140 * mib, 160 * mib, [2]int64{1, 1}},
		// expandable_segments:True.
		{"expandable: 5 MiB maps one 20 MiB page and splits it; a second 5 MiB takes the free rest",
			expandable, 0, []op{m(5*mib, 5*mib), m(5*mib, 5*mib)}, 10 * mib, 10 * mib, 20 * mib, [2]int64{}},
		{"expandable: 25 MiB maps two 20 MiB pages", expandable, 0, []op{m(25*mib, 25*mib)}, 25 * mib, 25 * mib, 40 * mib, [2]int64{}},
		{"expandable: 600 KiB maps one 2 MiB small-pool page", expandable, 0, []op{m(600*kib, 614400)}, 614400, 614400, 2 * mib, [2]int64{}},
		{"expandable: a large block is split whenever 512 bytes are left: 19.5 MiB from a 20 MiB page",
			expandable, 0, []op{m(39*mib/2, 39*mib/2)}, 39 * mib / 2, 39 * mib / 2, 20 * mib, [2]int64{}},
		{"expandable: growing merges the free tail with the new page: 5 MiB then 30 MiB map 40 MiB",
			expandable, 0, []op{m(5*mib, 0), m(30*mib, 30*mib)}, 35 * mib, 35 * mib, 40 * mib, [2]int64{}},
		{"expandable: EmptyCache unmaps only whole free pages",
			expandable, 0, []op{m(5*mib, 0), m(30*mib, 0), f(0), emptyCache}, 30 * mib, 30 * mib, 40 * mib, [2]int64{}},
		{"expandable: EmptyCache of a wholly free segment unmaps everything",
			expandable, 0, []op{m(5*mib, 0), m(30*mib, 0), f(0), f(1), emptyCache}, 0, 0, 0, [2]int64{}},
		{"expandable: pages are mapped at the lowest address, an unmapped hole first: 25 MiB maps the hole of 20 MiB",
			expandable, 0, []op{m(30*mib, 0), m(30*mib, 0), f(0), emptyCache, m(25*mib, 25*mib)}, 55 * mib, 55 * mib, 60 * mib, [2]int64{}},
		{"expandable: the capacity check counts the request's segment size, 26 MiB for 25 MiB, though 20 MiB would be mapped",
			expandable, 60 * mib, []op{m(30*mib, 0), m(10*mib, 0), m(25*mib, 0)}, 0, 0, 0, [2]int64{}},
		{"expandable with max_split and a capacity: 5 MiB refuses the free 100 MiB, the check fails, the cache is unmapped, one page mapped",
			Config{ExpandableSegments: true, MaxSplitSize: 64 * mib}, 110 * mib, []op{m(100*mib, 0), f(0), m(5*mib, 5*mib)}, 5 * mib, 5 * mib, 20 * mib, [2]int64{}},
		{"expandable with max_split, no capacity: 5 MiB takes the start of the free 100 MiB",
			Config{ExpandableSegments: true, MaxSplitSize: 64 * mib}, 0, []op{m(100*mib, 0), f(0), m(5*mib, 5*mib)}, 5 * mib, 5 * mib, 100 * mib, [2]int64{}},
		// roundup_power2_divisions.
		{"roundup_power2_divisions:4: 5 MiB+1 counts 6 MiB", Config{RoundupPower2Divisions: [16]uint64{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}},
			0, []op{m(5*mib+1, 6*mib)}, 6 * mib, 5*mib + 1, 20 * mib, [2]int64{}},
		// garbage_collection_threshold.
		{"garbage_collection_threshold:0.5 under 100 MiB: before 50 MiB is reserved, the older free segment (40 MiB) goes, the 46 MiB one stays",
			Config{GarbageCollectionThreshold: 0.5}, 100 * mib, []op{m(40*mib, 0), f(0), m(45*mib, 0), f(2), m(50*mib, 50*mib)}, 50 * mib, 50 * mib, 96 * mib, [2]int64{}},
		{"without it the same requests run out, and the whole cache goes",
			Config{MaxNonSplitRounding: 30 * mib}, 100 * mib, []op{m(40*mib, 0), f(0), m(45*mib, 0), f(2), m(50*mib, 50*mib)}, 50 * mib, 50 * mib, 50 * mib, [2]int64{}},
		// large_segment_size_mb.
		{"large_segment_size_mb:40: 5 MiB reserves 40 MiB", Config{LargeSegmentSize: 40 * mib}, 0, []op{m(5*mib, 5*mib)}, 5 * mib, 5 * mib, 40 * mib, [2]int64{}},
		{"large_segment_size_mb:40 with expandable segments: 25 MiB maps one 40 MiB page",
			Config{LargeSegmentSize: 40 * mib, ExpandableSegments: true}, 0, []op{m(25*mib, 25*mib)}, 25 * mib, 25 * mib, 40 * mib, [2]int64{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ops := c.ops
			oom := false
			if c.capacity > 0 && len(ops) > 0 && ops[len(ops)-1].malloc > 0 && c.allocated == 0 {
				oom, ops = true, ops[:len(ops)-1]
			}
			a := playConf(t, c.cfg, c.capacity, ops)
			if oom {
				last := c.ops[len(c.ops)-1]
				if _, err := a.TryMalloc(last.malloc); err == nil {
					t.Fatalf("TryMalloc(%d) succeeded, want out of memory", last.malloc)
				}
				return
			}
			st := a.Stats()
			if st.Allocated != c.allocated || st.Requested != c.requested || st.Reserved != c.reserved {
				t.Errorf("allocated %d, requested %d, reserved %d; want %d, %d, %d",
					st.Allocated, st.Requested, st.Reserved, c.allocated, c.requested, c.reserved)
			}
			if oa, os := a.Oversize(); oa != c.oversize[0] || os != c.oversize[1] {
				t.Errorf("oversize allocations %d, segments %d; want %d, %d", oa, os, c.oversize[0], c.oversize[1])
			}
		})
	}
}

// TestExpandableBestFit checks get_free_block's walk through expandable
// blocks: a 9 MiB request passes over the 10 MiB free tail of the segment,
// which could grow without end, for the 30 MiB hole at address 0, which
// cannot.
func TestExpandableBestFit(t *testing.T) {
	a := NewWithConfig(Config{ExpandableSegments: true})
	x := a.Malloc(30 * mib) // [0, 30), pages [0, 40)
	a.Malloc(10 * mib)      // [30, 40)
	a.Malloc(25 * mib)      // [40, 65), pages [40, 80)
	a.Malloc(5 * mib)       // [65, 70); free tail [70, 80)
	a.Free(x)
	base := a.cs.seg[1]
	y := a.Malloc(9 * mib)
	if got := a.blocks[a.live[y]].addr - base; got != 0 {
		t.Errorf("9 MiB placed at offset %d MiB, want 0 (the hole, not the tail at 70 MiB)", got/mib)
	}
}

// TestConfRoundSize checks roundup_power2_divisions' rounding
// (roundup_power2_next_division): steps of (power of 2 below)/divisions, 512
// bytes while the request is at most 512 × divisions, powers of 2 unchanged.
func TestConfRoundSize(t *testing.T) {
	four := Config{RoundupPower2Divisions: [16]uint64{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}}
	list, err := ParseConf("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]")
	if err != nil {
		t.Fatal(err)
	}
	above, err := ParseConf("roundup_power2_divisions:[>:8]")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg     Config
		n, want int64
	}{
		{four, 1, 512}, {four, 1200, 1536}, {four, 2049, 2560}, {four, 3000, 3072},
		{four, 600 * kib, 640 * kib}, {four, mib - 1, mib}, {four, mib, mib}, {four, mib + 1, 5 * mib / 4},
		{four, 5*mib + 1, 6 * mib}, {four, 7 * mib, 7 * mib}, {four, 7*mib + 1, 8 * mib},
		{list, 200 * mib, 200 * mib}, {list, 300 * mib, 300 * mib}, {list, 600 * mib, 768 * mib},
		{list, 1<<30 + 1, 5 << 28}, {list, 2<<30 + 1, 9 << 28}, {list, 5 * mib, 5 * mib},
		// [>:8] sets every interval after index 0: below 2 MiB, 512-byte rounding.
		{above, 3*mib/2 + 1, 3*mib/2 + 512}, {above, 3*mib + 1, 13 * mib / 4},
		{Config{}, 1000, 1024},
	} {
		if got := c.cfg.RoundSize(c.n); got != c.want {
			t.Errorf("%q: RoundSize(%d) = %d, want %d", c.cfg, c.n, got, c.want)
		}
	}
}

// TestParseConf checks what ParseConf keeps of each option.
func TestParseConf(t *testing.T) {
	four := [16]uint64{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}
	for _, c := range []struct {
		s    string
		want Config
	}{
		{"", Config{}},
		{"max_split_size_mb:64", Config{MaxSplitSize: 64 * mib}},
		{"max_split_size_mb:20", Config{MaxSplitSize: 20 * mib}},
		{"max_split_size_mb:64MB", Config{MaxSplitSize: 64 * mib}},
		{"max_split_size_mb: 64 ,", Config{MaxSplitSize: 64 * mib}},
		{"max_split_size_mb,64", Config{MaxSplitSize: 64 * mib}}, // the separator is not checked
		{"max_split_size_mb:-1", Config{}},                       // 2^64-1 MiB: unlimited
		{"max_split_size_mb:64,max_split_size_mb:128", Config{MaxSplitSize: 128 * mib}},
		{"max_non_split_rounding_mb:40", Config{MaxNonSplitRounding: 40 * mib}},
		{"max_non_split_rounding_mb:20", Config{}},
		{"large_segment_size_mb:40", Config{LargeSegmentSize: 40 * mib}},
		{"max_split_size_mb:40,large_segment_size_mb:40", Config{LargeSegmentSize: 40 * mib, MaxSplitSize: 40 * mib}},
		{"expandable_segments:True", Config{ExpandableSegments: true}},
		{"expandable_segments:True,expandable_segments:False", Config{}},
		{"roundup_power2_divisions:4", Config{RoundupPower2Divisions: four}},
		{"roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", Config{RoundupPower2Divisions: [16]uint64{1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8}}},
		{"roundup_power2_divisions:[>:8]", Config{RoundupPower2Divisions: [16]uint64{0, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8}}},
		{"roundup_power2_divisions:[65536:2]", Config{RoundupPower2Divisions: [16]uint64{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}}},
		{"roundup_power2_divisions:[]", Config{}},
		{"garbage_collection_threshold:0.6", Config{GarbageCollectionThreshold: 0.6}},
		{"garbage_collection_threshold:.5x", Config{GarbageCollectionThreshold: 0.5}},
		{"per_process_memory_fraction:0.5", Config{PerProcessMemoryFraction: 0.5}},
		{"per_process_memory_fraction:1", Config{}},
		{"backend:native,release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True,pinned_num_register_threads:8," +
			"pinned_use_background_threads:True,pinned_reserve_segment_size_mb:64,graph_capture_record_stream_reuse:True", Config{}},
	} {
		got, err := ParseConf(c.s)
		if err != nil || got != c.want {
			t.Errorf("ParseConf(%q) = %+v, %v; want %+v", c.s, got, err, c.want)
		}
	}
	for _, s := range []string{
		"max_split_size_mb:19", "max_split_size_mb", "max_split_size_mb:", "max_split_size_mb:abc",
		"large_segment_size_mb:10", "large_segment_size_mb:40,max_split_size_mb:20", "max_split_size_mb:20,large_segment_size_mb:40",
		"expandable_segments:true", "roundup_power2_divisions:3", "roundup_power2_divisions:[3:4]",
		"roundup_power2_divisions:[256:1,512:2", "garbage_collection_threshold:1.0", "garbage_collection_threshold:nan",
		"backend:cudaMallocAsync", "backend:foo", "pinned_num_register_threads:1024", "per_process_memory_fraction:1.5",
		"per_process_memory_fraction:0", "foo:1", ",max_split_size_mb:64", "Max_split_size_mb:64",
	} {
		_, err := ParseConf(s)
		if err == nil || !strings.HasPrefix(err.Error(), "allocator: ") {
			t.Errorf("ParseConf(%q): error %v, want one starting with \"allocator: \"", s, err)
		}
	}
}

// TestParseConfDevice checks ParseConf against PyTorch 2.11's parser on the
// strings calibration/allocator_conf.py gave torch.cuda.memory._set_allocator_settings:
// ParseConf accepts exactly those PyTorch accepted, but for
// backend:cudaMallocAsync (refused here: not simulated) and
// per_process_memory_fraction:0 (refused: no memory at all).
func TestParseConfDevice(t *testing.T) {
	rec := loadDeviceRecording(t)
	for _, p := range rec.Parse {
		_, err := ParseConf(p[0])
		ok := p[1] == "ok"
		if strings.Contains(p[0], "cudaMallocAsync") || p[0] == "per_process_memory_fraction:0" {
			ok = false
		}
		if (err == nil) != ok {
			t.Errorf("%q: PyTorch %s %s; ParseConf: %v", p[0], p[1], p[2], err)
		}
	}
}

// TestCapacityFor checks per_process_memory_fraction's capacity on an H200.
func TestCapacityFor(t *testing.T) {
	const h200 = 150109880320
	for _, c := range []struct {
		f    float64
		want int64
	}{{0, 0}, {0.00715, 1073285644}, {0.5, h200 / 2}, {1e-20, 1}} {
		if got := (Config{PerProcessMemoryFraction: c.f}).CapacityFor(h200); got != c.want {
			t.Errorf("fraction %g: CapacityFor = %d, want %d", c.f, got, c.want)
		}
	}
}

// FuzzParseConf checks that ParseConf never panics, that its errors start
// with "allocator: ", and that a Config it returns reads back from String.
func FuzzParseConf(f *testing.F) {
	for _, s := range []string{"", "max_split_size_mb:64", "expandable_segments:True,max_split_size_mb:128",
		"roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", "garbage_collection_threshold:0.6",
		"large_segment_size_mb:40,max_non_split_rounding_mb:60", "per_process_memory_fraction:0.25",
		"backend:native,pinned_num_register_threads:8", "roundup_power2_divisions:[256]1]", "foo:[1,2]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseConf(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "allocator: ") {
				t.Fatalf("ParseConf(%q): error %q does not start with \"allocator: \"", s, err)
			}
			return
		}
		back, err := ParseConf(c.String())
		if err != nil || back != c {
			t.Fatalf("ParseConf(%q) = %+v; String %q reads back as %+v, %v", s, c, c.String(), back, err)
		}
	})
}

// TestWorkedExampleExpandable replays the package comment's second example.
func TestWorkedExampleExpandable(t *testing.T) {
	c, err := ParseConf("expandable_segments:True")
	if err != nil {
		t.Fatal(err)
	}
	b := NewWithConfig(c)
	id := b.Malloc(12 << 20)
	if st := b.Stats(); st.Allocated != 12*mib || st.Reserved != 20*mib {
		t.Errorf("after 12 MiB: %+v", st)
	}
	b.Free(id)
	b.Malloc(23 << 19)
	b.EmptyCache()
	if st := b.Stats(); st.Allocated != 23*mib/2 || st.Reserved != 20*mib {
		t.Errorf("after 11.5 MiB and EmptyCache: %+v", st)
	}
}

// TestBuckets checks the pool's buckets: the worked example of the pool's
// doc, that a larger size never falls in an earlier bucket (at every
// boundary of a bucket and at random sizes), and that every size a block
// can have has a bucket.
func TestBuckets(t *testing.T) {
	for _, tc := range []struct{ size, bucket int64 }{
		{512, 1}, {15 << 9, 15}, {16 << 9, 64}, {1 << 20, 176}, {1280 << 10, 180}, {3 << 19, 184}, {40 << 20, 260},
	} {
		if got := bucketOf(tc.size); int64(got) != tc.bucket {
			t.Errorf("bucketOf(%d) = %d, want %d", tc.size, got, tc.bucket)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	sizes := []int64{MinBlockSize, math.MaxInt64 &^ (MinBlockSize - 1)}
	for f := range 54 {
		u := int64(1) << f
		sizes = append(sizes, (u-1)<<9, u<<9, (u+1)<<9)
	}
	for range 10000 {
		sizes = append(sizes, (r.Int64N(1<<uint(r.IntN(53)+1))+1)<<9)
	}
	slices.Sort(sizes)
	prev := -1
	for _, s := range sizes {
		if s <= 0 {
			continue
		}
		k := bucketOf(s)
		if k < prev || k >= poolBuckets {
			t.Fatalf("bucketOf(%d) = %d, after %d (of %d buckets)", s, k, prev, poolBuckets)
		}
		prev = k
	}
}
