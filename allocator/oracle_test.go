package allocator

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// refAllocator is a deliberately naive allocator that follows the rules of the
// package comment with the plainest data structures: a list of segments, each
// a list of blocks in address order, searched linearly, free blocks sorted
// anew at every search. It is the oracle that Allocator, with its sorted
// pools, block arena and separate default and configured paths, is checked
// against.
type refAllocator struct {
	cfg      Config
	segs     []*refSegment
	live     []int64 // by ID: the block's address, or -1 once freed
	nextAddr int64   // expandable segments' ranges, rising
	down     int64   // cudaMalloc segments' bytes, top down
	capacity int64
	st       Stats
	// oversize_allocations and oversize_segments.
	oversizeAllocs, oversizeSegs int64
	// get_free_block calls per pool (small, large), counted under
	// garbage_collection_threshold and a capacity.
	calls [2]int64
}

// refSegment is one cudaMalloc'd segment, or one expandable segment (its
// whole address space, mapped or not), of the oracle.
type refSegment struct {
	small, expandable bool
	base              int64
	blocks            []refBlock // in address order, covering the segment
}

// refBlock is a block of a segment: free, serving a request, or (expandable
// segments only) unmapped.
type refBlock struct {
	addr, size, requested int64
	state                 int
	age0                  int64 // calls of its pool when it last became free
}

const (
	refFree = iota
	refUsed
	refUnmapped
)

func (r *refAllocator) maxSplit() int64 {
	if r.cfg.MaxSplitSize > 0 {
		return r.cfg.MaxSplitSize
	}
	return math.MaxInt64
}

func (r *refAllocator) large() int64 {
	if r.cfg.LargeSegmentSize > 0 {
		return r.cfg.LargeSegmentSize
	}
	return 20 << 20
}

func (r *refAllocator) poolIndex(small bool) int {
	if small {
		return 0
	}
	return 1
}

func (r *refAllocator) gcOn() bool { return r.cfg.GarbageCollectionThreshold > 0 && r.capacity > 0 }

// round is the request rounding, roundup_power2_divisions included, counted
// out step by step.
func (r *refAllocator) round(n int64) int64 {
	if n < 512 {
		return 512
	}
	p := int64(1)
	for p*2 <= n {
		p *= 2
	}
	k := 0
	for q := int64(1 << 21); q <= p && k < 15; q *= 2 {
		k++
	}
	d := int64(r.cfg.RoundupPower2Divisions[k])
	if d <= 1 || n <= 512*d {
		return (n + 511) / 512 * 512
	}
	if n == p {
		return n
	}
	step := p / d
	return (n + step - 1) / step * step
}

// sorted returns the free blocks of a pool, ordered by size, then address.
func (r *refAllocator) sorted(small bool) (out []struct {
	s *refSegment
	i int
}) {
	for _, s := range r.segs {
		if s.small != small {
			continue
		}
		for i, b := range s.blocks {
			if b.state == refFree {
				out = append(out, struct {
					s *refSegment
					i int
				}{s, i})
			}
		}
	}
	slices.SortFunc(out, func(x, y struct {
		s *refSegment
		i int
	}) int {
		bx, by := x.s.blocks[x.i], y.s.blocks[y.i]
		if bx.size != by.size {
			return int(bx.size - by.size)
		}
		return int(bx.addr - by.addr)
	})
	return out
}

// normalize merges neighbours of the same state, free or unmapped, in s; a
// merged free block restarts its age.
func (r *refAllocator) normalize(s *refSegment) {
	for i := 0; i+1 < len(s.blocks); {
		a, b := s.blocks[i], s.blocks[i+1]
		if a.state == b.state && a.state != refUsed {
			s.blocks[i].size += b.size
			s.blocks[i].age0 = r.calls[r.poolIndex(s.small)]
			s.blocks = slices.Delete(s.blocks, i+1, i+2)
			continue
		}
		i++
	}
}

// malloc is Allocator.TryMalloc.
func (r *refAllocator) malloc(n int64) (ID, error) {
	size := r.round(n)
	small := size <= 1<<20
	seg, at := r.getFree(small, size)
	if seg == nil {
		if r.gcOn() {
			r.garbageCollect()
		}
		segSize := (size + 2<<20 - 1) / (2 << 20) * (2 << 20)
		switch {
		case small:
			segSize = 2 << 20
		case size < 10<<20:
			segSize = r.large()
		}
		seg, at = r.allocBlock(small, size, segSize)
		if seg == nil && r.releaseAvailable(small, size) {
			seg, at = r.allocBlock(small, size, segSize)
		}
		if seg == nil {
			r.st.Retries++ // num_alloc_retries: the retry after release_cached_blocks
			r.emptyCache()
			seg, at = r.allocBlock(small, size, segSize)
		}
		if seg == nil {
			return -1, &ErrOutOfMemory{Requested: n, Reserved: r.st.Reserved, Capacity: r.capacity}
		}
	}
	b := &seg.blocks[at]
	rest := b.size - size
	split := rest > 1<<20 && size < r.maxSplit()
	if small || r.cfg.ExpandableSegments {
		split = rest >= 512
	}
	if split {
		tail := refBlock{addr: b.addr + size, size: rest, state: refFree, age0: r.calls[r.poolIndex(small)]}
		b.size = size
		seg.blocks = slices.Insert(seg.blocks, at+1, tail)
		b = &seg.blocks[at]
	}
	b.state, b.requested = refUsed, n
	r.st.Allocated += b.size
	r.st.Requested += n
	r.st.PeakAllocated = max(r.st.PeakAllocated, r.st.Allocated)
	r.st.PeakRequested = max(r.st.PeakRequested, r.st.Requested)
	if b.size >= r.maxSplit() {
		r.oversizeAllocs++
	}
	r.live = append(r.live, b.addr)
	return ID(len(r.live) - 1), nil
}

// getFree finds the best free block, walking on through expandable blocks
// that can grow less, and applies max_split_size's refusals.
func (r *refAllocator) getFree(small bool, size int64) (*refSegment, int) {
	if r.gcOn() {
		r.calls[r.poolIndex(small)]++
	}
	free := r.sorted(small)
	k := slices.IndexFunc(free, func(x struct {
		s *refSegment
		i int
	}) bool {
		return x.s.blocks[x.i].size >= size
	})
	if k < 0 {
		return nil, -1
	}
	grow := func(j int) int64 {
		s, i := free[j].s, free[j].i
		g := s.blocks[i].size
		if i+1 < len(s.blocks) && s.blocks[i+1].state == refUnmapped {
			g += s.blocks[i+1].size
		}
		return g
	}
	for free[k].s.expandable && k+1 < len(free) && grow(k+1) < grow(k) {
		k++
	}
	bs := free[k].s.blocks[free[k].i].size
	if size < r.maxSplit() && bs >= r.maxSplit() {
		return nil, -1
	}
	rounding := r.large()
	if r.cfg.MaxNonSplitRounding > 0 {
		rounding = r.cfg.MaxNonSplitRounding
	}
	if size >= r.maxSplit() && bs >= size+rounding {
		return nil, -1
	}
	return free[k].s, free[k].i
}

// allocBlock checks the capacity for segSize bytes, then makes a segment or
// maps pages.
func (r *refAllocator) allocBlock(small bool, size, segSize int64) (*refSegment, int) {
	if r.capacity > 0 && r.st.Reserved+segSize > r.capacity {
		return nil, -1
	}
	if r.cfg.ExpandableSegments {
		return r.allocExpandable(small, size)
	}
	// cudaMalloc's segments go top down, each below the last.
	r.down += segSize
	base := int64(1<<50) - r.down
	seg := &refSegment{small: small, base: base, blocks: []refBlock{{addr: base, size: segSize, state: refFree}}}
	r.segs = append(r.segs, seg)
	r.st.Reserved += segSize
	r.st.PeakReserved = max(r.st.PeakReserved, r.st.Reserved)
	if segSize >= r.maxSplit() {
		r.oversizeSegs++
	}
	return seg, 0
}

// allocExpandable maps pages at the lowest place of the pool's expandable
// segment where free and unmapped blocks in a row, starting at an unmapped
// block or the free block before it, hold size bytes.
func (r *refAllocator) allocExpandable(small bool, size int64) (*refSegment, int) {
	var seg *refSegment
	for _, s := range r.segs {
		if s.small == small && s.expandable {
			seg = s
		}
	}
	if seg == nil {
		seg = &refSegment{small: small, expandable: true, base: r.nextAddr,
			blocks: []refBlock{{addr: r.nextAddr, size: expandableSpace, state: refUnmapped}}}
		r.segs = append(r.segs, seg)
		r.nextAddr += expandableSpace
	}
	page := int64(2 << 20)
	if !small {
		page = r.large()
	}
	start := -1
	for i, b := range seg.blocks {
		if b.state != refUnmapped {
			continue
		}
		c := i
		if i > 0 && seg.blocks[i-1].state == refFree {
			c = i - 1
		}
		var room int64
		for j := c; j < len(seg.blocks) && room < size && seg.blocks[j].state != refUsed; j++ {
			room += seg.blocks[j].size
		}
		if room >= size {
			start = c
			break
		}
	}
	// Map, block after block from start, until the first one holds size.
	addr := seg.blocks[start].addr
	for {
		i := slices.IndexFunc(seg.blocks, func(b refBlock) bool { return b.addr == addr })
		b := seg.blocks[i]
		if b.state == refFree && b.size >= size {
			return seg, i
		}
		if b.state == refFree {
			// The unmapped block after it gives the rest.
			u := seg.blocks[i+1]
			r.mapPages(seg, i+1, min(size-b.size, u.size), page)
		} else {
			r.mapPages(seg, i, min(size, b.size), page)
		}
	}
}

// mapPages maps the first n bytes, rounded up to pages, of unmapped block i.
func (r *refAllocator) mapPages(seg *refSegment, i int, n, page int64) {
	m := (n + page - 1) / page * page
	b := seg.blocks[i]
	if m < b.size {
		seg.blocks = slices.Insert(seg.blocks, i+1, refBlock{addr: b.addr + m, size: b.size - m, state: refUnmapped})
	}
	seg.blocks[i] = refBlock{addr: b.addr, size: m, state: refFree, age0: r.calls[r.poolIndex(seg.small)]}
	r.normalize(seg)
	r.st.Reserved += m
	r.st.PeakReserved = max(r.st.PeakReserved, r.st.Reserved)
}

// releaseSegment gives a wholly free, non-expandable segment back.
func (r *refAllocator) releaseSegment(s *refSegment) {
	r.st.Reserved -= s.blocks[0].size
	if s.blocks[0].size >= r.maxSplit() {
		r.oversizeSegs--
	}
	r.segs = slices.DeleteFunc(r.segs, func(x *refSegment) bool { return x == s })
}

func (r *refAllocator) wholeFree(s *refSegment) bool {
	return !s.expandable && len(s.blocks) == 1 && s.blocks[0].state == refFree
}

// releaseAvailable releases free oversize segments for a request that did
// not fit: the smallest one holding max(size, max_split_size), else the
// largest ones down until as much was released.
func (r *refAllocator) releaseAvailable(small bool, size int64) bool {
	if r.cfg.MaxSplitSize == 0 {
		return false
	}
	key := max(size, r.maxSplit())
	free := r.sorted(small)
	k := slices.IndexFunc(free, func(x struct {
		s *refSegment
		i int
	}) bool {
		return x.s.blocks[x.i].size >= key
	})
	if k >= 0 && !free[k].s.expandable {
		r.releaseSegment(free[k].s)
		return true
	}
	if k < 0 {
		k = len(free)
	}
	var released int64
	for j := k - 1; j >= 0 && released < key; j-- {
		s := free[j].s
		if s.blocks[free[j].i].size < r.maxSplit() {
			break
		}
		if !s.expandable {
			released += s.blocks[0].size
			r.releaseSegment(s)
		}
	}
	return released >= key
}

// garbageCollect releases wholly free large segments of at least the mean
// age, round after round, while reserved bytes exceed the threshold.
func (r *refAllocator) garbageCollect() {
	threshold := int64(r.cfg.GarbageCollectionThreshold * float64(r.capacity))
	if r.st.Reserved <= threshold {
		return
	}
	target := r.st.Reserved - threshold
	var total, count, reclaimed int64
	for _, s := range r.segs {
		if !s.small && r.wholeFree(s) {
			total += r.calls[1] - s.blocks[0].age0
			count++
		}
	}
	for freed := true; reclaimed < target && freed && count > 0; {
		mean := float64(total) / float64(count)
		freed = false
		for _, x := range r.sorted(false) {
			s := x.s
			if age := r.calls[1] - s.blocks[0].age0; r.wholeFree(s) && float64(age) >= mean {
				freed = true
				reclaimed += s.blocks[0].size
				total -= age
				count--
				r.releaseSegment(s)
			}
		}
	}
}

// find returns the segment and index of the block at addr.
func (r *refAllocator) find(addr int64) (*refSegment, int) {
	for _, s := range r.segs {
		for i, b := range s.blocks {
			if b.addr == addr && b.state != refUnmapped {
				return s, i
			}
		}
	}
	panic("oracle: no block at that address")
}

// size is Allocator.Size.
func (r *refAllocator) size(id ID) int64 {
	s, i := r.find(r.live[id])
	return s.blocks[i].size
}

// free is Allocator.Free: the block is marked free and merged with free
// neighbours.
func (r *refAllocator) free(id ID) {
	s, i := r.find(r.live[id])
	r.live[id] = -1
	b := &s.blocks[i]
	r.st.Allocated -= b.size
	r.st.Requested -= b.requested
	if b.size >= r.maxSplit() {
		r.oversizeAllocs--
	}
	b.state, b.requested, b.age0 = refFree, 0, r.calls[r.poolIndex(s.small)]
	r.normalize(s)
}

// emptyCache is Allocator.EmptyCache: wholly free segments go; free blocks
// of expandable segments give up the pages they wholly cover, and an
// expandable segment left with no page goes.
func (r *refAllocator) emptyCache() {
	for _, s := range slices.Clone(r.segs) {
		if r.wholeFree(s) {
			r.releaseSegment(s)
			continue
		}
		if !s.expandable {
			continue
		}
		page := int64(2 << 20)
		if !s.small {
			page = r.large()
		}
		var out []refBlock
		for _, b := range s.blocks {
			lo := s.base + (b.addr-s.base+page-1)/page*page
			hi := s.base + (b.addr+b.size-s.base)/page*page
			if b.state != refFree || lo >= hi {
				out = append(out, b)
				continue
			}
			age := r.calls[r.poolIndex(s.small)]
			if lo > b.addr {
				out = append(out, refBlock{addr: b.addr, size: lo - b.addr, state: refFree, age0: age})
			}
			out = append(out, refBlock{addr: lo, size: hi - lo, state: refUnmapped})
			if end := b.addr + b.size; hi < end {
				out = append(out, refBlock{addr: hi, size: end - hi, state: refFree, age0: age})
			}
			r.st.Reserved -= hi - lo
		}
		s.blocks = out
		r.normalize(s)
		if len(s.blocks) == 1 && s.blocks[0].state == refUnmapped {
			r.segs = slices.DeleteFunc(r.segs, func(x *refSegment) bool { return x == s })
		}
	}
}

// resetPeaks is Allocator.ResetPeaks.
func (r *refAllocator) resetPeaks() {
	r.st.PeakAllocated, r.st.PeakRequested, r.st.PeakReserved = r.st.Allocated, r.st.Requested, r.st.Reserved
}

// randomSize draws a request from a mix that crosses every rule's boundary:
// tiny tensors, sizes around the 1 MiB pool limit, around the 10 MiB segment
// limit, repeats of a few sizes (ties in best fit), large tensors, and
// tensors above max_split_size.
func randomSize(rng *rand.Rand) int64 {
	const mib = 1 << 20
	switch rng.IntN(7) {
	case 0:
		return 1 + rng.Int64N(8<<10)
	case 1:
		return mib - 4096 + rng.Int64N(8192)
	case 2:
		return 10*mib - 3*mib + rng.Int64N(6*mib)
	case 3:
		return []int64{4 * mib, 8 * mib, 12 * mib, 512, 600 << 10, 64 * mib, 100 * mib}[rng.IntN(7)]
	case 4:
		return mib + rng.Int64N(9*mib)
	case 5:
		return 60*mib + rng.Int64N(200*mib)
	}
	return rng.Int64N(64 * mib)
}

// randomConfig draws the session's configuration: max_split_size_mb on or
// off, expandable segments on or off, and now and then the other options.
func randomConfig(rng *rand.Rand) Config {
	var c Config
	if rng.IntN(2) == 0 {
		c.LargeSegmentSize = 0
		if rng.IntN(6) == 0 {
			c.LargeSegmentSize = int64(22+2*rng.IntN(10)) << 20
		}
		c.MaxSplitSize = int64(max(20, int(c.LargeSegmentSize>>20))+rng.IntN(120)) << 20
		if rng.IntN(3) == 0 {
			c.MaxNonSplitRounding = int64(max(20, int(c.LargeSegmentSize>>20))+rng.IntN(60)) << 20
		}
	}
	c.ExpandableSegments = rng.IntN(2) == 0
	if rng.IntN(5) == 0 {
		for k := range c.RoundupPower2Divisions {
			c.RoundupPower2Divisions[k] = []uint64{0, 1, 2, 4, 8, 16}[rng.IntN(6)]
		}
	}
	if rng.IntN(4) == 0 {
		c.GarbageCollectionThreshold = 0.3 + 0.6*rng.Float64()
	}
	return c
}

// TestOracle runs 400 seeded random sessions of mallocs, frees, EmptyCache
// and ResetPeaks on Allocator and on refAllocator, under configurations drawn
// at random (a quarter of the sessions the default, made with New), half of
// them with a Capacity, and requires the same counters, oversize counts and
// outcomes after every step and the same block size for every live
// allocation.
func TestOracle(t *testing.T) {
	// Halfway through each sequence the allocator is replaced by a copy
	// (CopyFrom into the previous sequence's allocator, whose memory it
	// reuses) and the original reset, so the copy must go on as the
	// original would have, sharing nothing with it.
	spare := New()
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		var cfg Config
		if seed%4 != 0 {
			cfg = randomConfig(rng)
		}
		a := NewWithConfig(cfg)
		if seed%4 == 0 {
			a = New()
		}
		r := &refAllocator{cfg: cfg}
		if seed%3 == 1 {
			a.Capacity = int64(64+rng.IntN(448)) << 20
			r.capacity = a.Capacity
		}
		// live and rlive are the live allocations' IDs in a and in the
		// oracle, which counts Transient's as allocations.
		var live, rlive []ID
		transients := 0
		steps := 100 + rng.IntN(400)
		for step := range steps {
			if step == steps/2 {
				spare.CopyFrom(a)
				orig := a
				a, spare = spare, orig
				orig.Reset(Config{})
				orig.Malloc(3 << 20)
			}
			what := "?"
			switch p := rng.IntN(100); {
			case p < 55 || len(live) == 0:
				n := randomSize(rng)
				what = "malloc"
				id, err := a.TryMalloc(n)
				rid, rerr := r.malloc(n)
				var oom, room *ErrOutOfMemory
				if errors.As(err, &oom) != errors.As(rerr, &room) || (oom != nil && *oom != *room) {
					t.Fatalf("seed %d (%s) step %d: TryMalloc(%d): error %v, oracle %v", seed, cfg, step, n, err, rerr)
				}
				if err == nil {
					if id != rid-ID(transients) {
						t.Fatalf("seed %d step %d: ID %d, oracle %d less %d transients", seed, step, id, rid, transients)
					}
					live = append(live, id)
					rlive = append(rlive, rid)
				}
			case p < 62:
				// Transient is malloc and free at once; the oracle does
				// both, and its IDs go on from one more.
				n := randomSize(rng)
				what = "Transient"
				held, err := a.Transient(n)
				rid, rerr := r.malloc(n)
				var oom, room *ErrOutOfMemory
				if errors.As(err, &oom) != errors.As(rerr, &room) || (oom != nil && *oom != *room) {
					t.Fatalf("seed %d (%s) step %d: Transient(%d): error %v, oracle %v", seed, cfg, step, n, err, rerr)
				}
				if rerr == nil {
					if want := r.size(rid); held != want {
						t.Fatalf("seed %d (%s) step %d: Transient(%d) held %d, oracle %d", seed, cfg, step, n, held, want)
					}
					r.free(rid)
					if cfg == (Config{}) {
						transients++ // else it took an ID through TryMalloc
					}
				}
			case p < 97:
				k := rng.IntN(len(live))
				what = "free"
				a.Free(live[k])
				r.free(rlive[k])
				live = append(live[:k], live[k+1:]...)
				rlive = append(rlive[:k], rlive[k+1:]...)
			case p < 99:
				what = "EmptyCache"
				a.EmptyCache()
				r.emptyCache()
			default:
				what = "ResetPeaks"
				a.ResetPeaks()
				r.resetPeaks()
			}
			if got, want := a.Stats(), r.st; got != want {
				t.Fatalf("seed %d (%q, capacity %d) step %d (%s): stats\n%+v, oracle\n%+v", seed, cfg, a.Capacity, step, what, got, want)
			}
			if oa, os := a.Oversize(); oa != r.oversizeAllocs || os != r.oversizeSegs {
				t.Fatalf("seed %d (%q) step %d (%s): oversize %d/%d, oracle %d/%d", seed, cfg, step, what, oa, os, r.oversizeAllocs, r.oversizeSegs)
			}
			for k, id := range live {
				if got, want := a.Size(id), r.size(rlive[k]); got != want {
					t.Fatalf("seed %d (%q) step %d (%s): Size(%d) = %d, oracle %d", seed, cfg, step, what, id, got, want)
				}
			}
		}
	}
}
