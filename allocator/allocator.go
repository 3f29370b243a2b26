// Package allocator simulates the block accounting of PyTorch's CUDA caching
// allocator, so that onnxmem reports what torch.cuda.memory_stats reports:
// allocated bytes (blocks handed to live tensors), requested bytes (the sizes
// asked for) and reserved bytes (segments obtained from cudaMalloc).
//
// Worked example. A fresh allocator is asked for 12 MiB: no cached block fits,
// so a segment of 12 MiB (rounded up to 2 MiB) is reserved and handed out whole.
// The tensor is freed: the block goes back to the large pool, still reserved.
// Then 11.5 MiB is asked for: best fit finds the free 12 MiB block; the leftover,
// 0.5 MiB, is not more than 1 MiB, so the block is not split and allocated bytes
// grow by the whole 12 MiB while requested bytes grow by 11.5 MiB.
//
//	a := allocator.New()
//	id := a.Malloc(12 << 20) // allocated 12 MiB, reserved 12 MiB
//	a.Free(id)               // allocated 0, reserved 12 MiB
//	a.Malloc(23 << 19)       // allocated 12 MiB, requested 11.5 MiB
//
// The rules, from c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.x, default
// settings: no PYTORCH_CUDA_ALLOC_CONF, no expandable segments):
//   - A request is rounded up to a multiple of 512 bytes, at least 512.
//   - Rounded sizes of at most 1 MiB come from the small pool, others from the
//     large pool.
//   - A miss reserves a new segment: 2 MiB for the small pool, 20 MiB for sizes
//     below 10 MiB, else the size rounded up to 2 MiB.
//   - A free block is found by best fit: the smallest block at least as large,
//     ties broken by address.
//   - The found block is split when the leftover is at least 512 bytes (small
//     pool) or more than 1 MiB (large pool); otherwise the whole block counts as
//     allocated.
//   - A freed block merges with free neighbours of its segment.
//   - EmptyCache releases the segments that are wholly free.
//
// Addresses are simulated: each new segment starts past the end of the last, so
// ties between equal free blocks are broken as if cudaMalloc handed out rising
// addresses. Real addresses may differ, which can change which of two equal
// blocks is taken; the counters rarely notice.
package allocator

import "fmt"

// The allocator's constants, as named in CUDACachingAllocator.cpp.
const (
	MinBlockSize  = 512      // kMinBlockSize: every block is a multiple of this
	SmallSize     = 1 << 20  // kSmallSize: the largest small-pool request
	SmallBuffer   = 2 << 20  // kSmallBuffer: small-pool segment size
	LargeBuffer   = 20 << 20 // kLargeBuffer: segment size for 1–10 MiB requests
	MinLargeAlloc = 10 << 20 // kMinLargeAlloc: from here segments are rounded to RoundLarge
	RoundLarge    = 2 << 20  // kRoundLarge
)

// RoundSize returns the block size that a request of n bytes is rounded to.
func RoundSize(n int64) int64 {
	if n < MinBlockSize {
		return MinBlockSize
	}
	return (n + MinBlockSize - 1) / MinBlockSize * MinBlockSize
}

// SegmentSize returns the size of the segment reserved for a rounded request.
func SegmentSize(rounded int64) int64 {
	switch {
	case rounded <= SmallSize:
		return SmallBuffer
	case rounded < MinLargeAlloc:
		return LargeBuffer
	}
	return (rounded + RoundLarge - 1) / RoundLarge * RoundLarge
}

// block is a contiguous range of one segment. Blocks live in
// Allocator.blocks and refer to each other by index, so that the simulation
// makes no pointers for the garbage collector to chase.
type block struct {
	addr, size int64
	requested  int64 // the request it serves, while allocated
	prev, next int32 // neighbours within the segment, or -1
	small      bool
	free       bool
}

// pool is the set of free blocks of one kind, ordered by (size, addr).
type pool struct {
	ids []int32
}

// search returns the index of the first block in p not less than (size, addr).
func (a *Allocator) search(p *pool, size, addr int64) int {
	lo, hi := 0, len(p.ids)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		b := &a.blocks[p.ids[m]]
		if b.size < size || (b.size == size && b.addr < addr) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func (a *Allocator) insert(p *pool, id int32) {
	b := &a.blocks[id]
	i := a.search(p, b.size, b.addr)
	p.ids = append(p.ids, 0)
	copy(p.ids[i+1:], p.ids[i:])
	p.ids[i] = id
}

func (a *Allocator) remove(p *pool, id int32) {
	b := &a.blocks[id]
	i := a.search(p, b.size, b.addr)
	if i >= len(p.ids) || p.ids[i] != id {
		panic("allocator: free block missing from its pool")
	}
	p.ids = append(p.ids[:i], p.ids[i+1:]...)
}

func (a *Allocator) poolOf(small bool) *pool {
	if small {
		return &a.small
	}
	return &a.large
}

func (a *Allocator) newBlock(b block) int32 {
	if n := len(a.spare); n > 0 {
		id := a.spare[n-1]
		a.spare = a.spare[:n-1]
		a.blocks[id] = b
		return id
	}
	a.blocks = append(a.blocks, b)
	return int32(len(a.blocks) - 1)
}

// Stats are the counters of torch.cuda.memory_stats that the simulation keeps,
// all in bytes: current values and peaks since the last ResetPeaks.
type Stats struct {
	Allocated, Requested, Reserved             int64
	PeakAllocated, PeakRequested, PeakReserved int64
}

// ID names a live allocation.
type ID int32

// Allocator is a simulated caching allocator for one device and one stream.
// The zero value is an empty allocator.
type Allocator struct {
	small, large pool
	blocks       []block
	spare        []int32 // indices of merged-away blocks, for reuse
	live         []int32 // by ID: the block, or -1 once freed
	nextAddr     int64
	st           Stats
	// Capacity, when positive, is the device memory available for segments;
	// a request that would need more makes TryMalloc report ErrOutOfMemory
	// after releasing cached segments, as the real allocator does.
	Capacity int64
}

// New returns an empty allocator.
func New() *Allocator { return &Allocator{} }

// ErrOutOfMemory is returned by TryMalloc when a segment cannot be reserved
// within Capacity.
type ErrOutOfMemory struct{ Requested, Reserved, Capacity int64 }

func (e *ErrOutOfMemory) Error() string {
	return fmt.Sprintf("allocator: out of memory: %d bytes requested with %d reserved of %d", e.Requested, e.Reserved, e.Capacity)
}

// Stats returns the current counters.
func (a *Allocator) Stats() Stats { return a.st }

// ResetPeaks sets every peak to its current value, as
// torch.cuda.reset_peak_memory_stats does.
func (a *Allocator) ResetPeaks() {
	a.st.PeakAllocated = a.st.Allocated
	a.st.PeakRequested = a.st.Requested
	a.st.PeakReserved = a.st.Reserved
}

// Malloc serves a request of n bytes and returns its ID. It panics on a
// negative size, and on out of memory, which only an allocator with a
// Capacity can run into: such callers use TryMalloc.
func (a *Allocator) Malloc(n int64) ID {
	id, err := a.TryMalloc(n)
	if err != nil {
		panic(err)
	}
	return id
}

// TryMalloc serves a request of n bytes, or reports out of memory.
func (a *Allocator) TryMalloc(n int64) (ID, error) {
	if n < 0 {
		panic("allocator: negative request")
	}
	size := RoundSize(n)
	small := size <= SmallSize
	p := a.poolOf(small)
	var id int32
	if i := a.search(p, size, -1); i < len(p.ids) {
		id = p.ids[i]
		p.ids = append(p.ids[:i], p.ids[i+1:]...)
	} else {
		seg := SegmentSize(size)
		if a.Capacity > 0 && a.st.Reserved+seg > a.Capacity {
			a.EmptyCache()
			if a.st.Reserved+seg > a.Capacity {
				return -1, &ErrOutOfMemory{Requested: n, Reserved: a.st.Reserved, Capacity: a.Capacity}
			}
		}
		id = a.newBlock(block{addr: a.nextAddr, size: seg, small: small, prev: -1, next: -1})
		a.nextAddr += seg
		a.st.Reserved += seg
		if a.st.Reserved > a.st.PeakReserved {
			a.st.PeakReserved = a.st.Reserved
		}
	}
	b := &a.blocks[id]
	if rest := b.size - size; (small && rest >= MinBlockSize) || (!small && rest > SmallSize) {
		r := a.newBlock(block{addr: b.addr + size, size: rest, small: small, free: true, prev: id, next: b.next})
		b = &a.blocks[id] // newBlock may have moved the slice
		if b.next >= 0 {
			a.blocks[b.next].prev = r
		}
		b.next = r
		b.size = size
		a.insert(p, r)
	}
	b.free = false
	b.requested = n
	a.st.Allocated += b.size
	a.st.Requested += n
	if a.st.Allocated > a.st.PeakAllocated {
		a.st.PeakAllocated = a.st.Allocated
	}
	if a.st.Requested > a.st.PeakRequested {
		a.st.PeakRequested = a.st.Requested
	}
	a.live = append(a.live, id)
	return ID(len(a.live) - 1), nil
}

// Size returns the block size that allocation id holds: its rounded request,
// or more when the block was not split.
func (a *Allocator) Size(id ID) int64 { return a.blocks[a.live[id]].size }

// Free returns allocation id to its pool, merging it with free neighbours.
// It panics when id is not live.
func (a *Allocator) Free(id ID) {
	bi := a.live[id]
	if bi < 0 {
		panic("allocator: double free")
	}
	a.live[id] = -1
	b := &a.blocks[bi]
	a.st.Allocated -= b.size
	a.st.Requested -= b.requested
	b.free = true
	p := a.poolOf(b.small)
	if pi := b.prev; pi >= 0 && a.blocks[pi].free {
		a.remove(p, pi)
		pb := &a.blocks[pi]
		pb.size += b.size
		pb.next = b.next
		if b.next >= 0 {
			a.blocks[b.next].prev = pi
		}
		a.spare = append(a.spare, bi)
		bi = pi
		b = pb
	}
	if ni := b.next; ni >= 0 && a.blocks[ni].free {
		a.remove(p, ni)
		nb := a.blocks[ni]
		b.size += nb.size
		b.next = nb.next
		if nb.next >= 0 {
			a.blocks[nb.next].prev = bi
		}
		a.spare = append(a.spare, ni)
	}
	a.insert(p, bi)
}

// EmptyCache releases every cached segment that holds no live block, as
// torch.cuda.empty_cache does.
func (a *Allocator) EmptyCache() {
	for _, p := range []*pool{&a.small, &a.large} {
		kept := p.ids[:0]
		for _, id := range p.ids {
			b := &a.blocks[id]
			if b.prev < 0 && b.next < 0 {
				a.st.Reserved -= b.size
				a.spare = append(a.spare, id)
				continue
			}
			kept = append(kept, id)
		}
		p.ids = kept
	}
}
