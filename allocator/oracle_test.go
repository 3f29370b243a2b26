package allocator

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// refAllocator is a deliberately naive allocator that follows the rules of the
// package comment with the plainest data structures: a list of segments, each
// a list of blocks in address order, searched linearly. It is the oracle that
// Allocator, with its sorted pools and block arena, is checked against.
type refAllocator struct {
	segs     []*refSegment
	live     []int64 // by ID: the block's address, or -1 once freed
	nextAddr int64
	capacity int64
	st       Stats
}

// refSegment is one cudaMalloc'd segment of the oracle.
type refSegment struct {
	small  bool
	blocks []refBlock // in address order, covering the segment
}

// refBlock is a block of a segment, free or serving a request.
type refBlock struct {
	addr, size, requested int64
	free                  bool
}

// malloc is Allocator.TryMalloc.
func (r *refAllocator) malloc(n int64) (ID, error) {
	size := max(512, (n+511)/512*512)
	small := size <= 1<<20
	// Best fit: the smallest free block of the pool, the lowest address first.
	var seg *refSegment
	at := -1
	for _, s := range r.segs {
		if s.small != small {
			continue
		}
		for i, b := range s.blocks {
			if !b.free || b.size < size {
				continue
			}
			if at < 0 || b.size < seg.blocks[at].size || (b.size == seg.blocks[at].size && b.addr < seg.blocks[at].addr) {
				seg, at = s, i
			}
		}
	}
	if at < 0 {
		var segSize int64
		switch {
		case small:
			segSize = 2 << 20
		case size < 10<<20:
			segSize = 20 << 20
		default:
			segSize = (size + 2<<20 - 1) / (2 << 20) * (2 << 20)
		}
		if r.capacity > 0 && r.st.Reserved+segSize > r.capacity {
			r.emptyCache()
			if r.st.Reserved+segSize > r.capacity {
				return -1, &ErrOutOfMemory{Requested: n, Reserved: r.st.Reserved, Capacity: r.capacity}
			}
		}
		seg = &refSegment{small: small, blocks: []refBlock{{addr: r.nextAddr, size: segSize, free: true}}}
		r.segs = append(r.segs, seg)
		r.nextAddr += segSize
		r.st.Reserved += segSize
		r.st.PeakReserved = max(r.st.PeakReserved, r.st.Reserved)
		at = 0
	}
	b := &seg.blocks[at]
	if rest := b.size - size; (small && rest >= 512) || (!small && rest > 1<<20) {
		tail := refBlock{addr: b.addr + size, size: rest, free: true}
		b.size = size
		seg.blocks = append(seg.blocks[:at+1], append([]refBlock{tail}, seg.blocks[at+1:]...)...)
		b = &seg.blocks[at]
	}
	b.free, b.requested = false, n
	r.st.Allocated += b.size
	r.st.Requested += n
	r.st.PeakAllocated = max(r.st.PeakAllocated, r.st.Allocated)
	r.st.PeakRequested = max(r.st.PeakRequested, r.st.Requested)
	r.live = append(r.live, b.addr)
	return ID(len(r.live) - 1), nil
}

// find returns the segment and index of the block at addr.
func (r *refAllocator) find(addr int64) (*refSegment, int) {
	for _, s := range r.segs {
		for i, b := range s.blocks {
			if b.addr == addr {
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
	b.free, b.requested = true, 0
	if i+1 < len(s.blocks) && s.blocks[i+1].free {
		b.size += s.blocks[i+1].size
		s.blocks = append(s.blocks[:i+1], s.blocks[i+2:]...)
	}
	if i > 0 && s.blocks[i-1].free {
		s.blocks[i-1].size += s.blocks[i].size
		s.blocks = append(s.blocks[:i], s.blocks[i+1:]...)
	}
}

// emptyCache is Allocator.EmptyCache: segments of one free block go.
func (r *refAllocator) emptyCache() {
	kept := r.segs[:0]
	for _, s := range r.segs {
		if len(s.blocks) == 1 && s.blocks[0].free {
			r.st.Reserved -= s.blocks[0].size
			continue
		}
		kept = append(kept, s)
	}
	r.segs = kept
}

// resetPeaks is Allocator.ResetPeaks.
func (r *refAllocator) resetPeaks() {
	r.st.PeakAllocated, r.st.PeakRequested, r.st.PeakReserved = r.st.Allocated, r.st.Requested, r.st.Reserved
}

// randomSize draws a request from a mix that crosses every rule's boundary:
// tiny tensors, sizes around the 1 MiB pool limit, around the 10 MiB segment
// limit, repeats of a few sizes (ties in best fit), and large tensors.
func randomSize(rng *rand.Rand) int64 {
	const mib = 1 << 20
	switch rng.IntN(6) {
	case 0:
		return 1 + rng.Int64N(8<<10)
	case 1:
		return mib - 4096 + rng.Int64N(8192)
	case 2:
		return 10*mib - 3*mib + rng.Int64N(6*mib)
	case 3:
		return []int64{4 * mib, 8 * mib, 12 * mib, 512, 600 << 10}[rng.IntN(5)]
	case 4:
		return mib + rng.Int64N(9*mib)
	}
	return rng.Int64N(64 * mib)
}

// TestOracle runs 200 seeded random sessions of mallocs, frees, EmptyCache
// and ResetPeaks on Allocator and on refAllocator, a quarter of them with a
// Capacity, and requires the same counters after every step and the same
// block size for every live allocation.
func TestOracle(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		a, r := New(), &refAllocator{}
		if seed%4 == 3 {
			a.Capacity = int64(64+rng.IntN(192)) << 20
			r.capacity = a.Capacity
		}
		var live []ID
		steps := 100 + rng.IntN(300)
		for step := range steps {
			what := "?"
			switch p := rng.IntN(100); {
			case p < 55 || len(live) == 0:
				n := randomSize(rng)
				what = "malloc"
				id, err := a.TryMalloc(n)
				rid, rerr := r.malloc(n)
				var oom, room *ErrOutOfMemory
				if errors.As(err, &oom) != errors.As(rerr, &room) || (oom != nil && *oom != *room) {
					t.Fatalf("seed %d step %d: TryMalloc(%d): error %v, oracle %v", seed, step, n, err, rerr)
				}
				if err == nil {
					if id != rid {
						t.Fatalf("seed %d step %d: ID %d, oracle %d", seed, step, id, rid)
					}
					live = append(live, id)
				}
			case p < 97:
				k := rng.IntN(len(live))
				what = "free"
				a.Free(live[k])
				r.free(live[k])
				live = append(live[:k], live[k+1:]...)
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
				t.Fatalf("seed %d step %d (%s): stats\n%+v, oracle\n%+v", seed, step, what, got, want)
			}
			for _, id := range live {
				if got, want := a.Size(id), r.size(id); got != want {
					t.Fatalf("seed %d step %d (%s): Size(%d) = %d, oracle %d", seed, step, what, id, got, want)
				}
			}
		}
	}
}
