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

import (
	"fmt"
	"sort"
)

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

// block is a contiguous range of one segment.
type block struct {
	addr, size int64
	small      bool
	free       bool
	prev, next *block // neighbours within the segment
	requested  int64  // the request it serves, while allocated
}

// pool is the set of free blocks of one kind, ordered by (size, addr).
type pool []*block

func (p *pool) less(a *block, size, addr int64) bool {
	if a.size != size {
		return a.size < size
	}
	return a.addr < addr
}

// search returns the index of the first block not less than (size, addr).
func (p pool) search(size, addr int64) int {
	return sort.Search(len(p), func(i int) bool { return !p.less(p[i], size, addr) })
}

func (p *pool) insert(b *block) {
	i := p.search(b.size, b.addr)
	*p = append(*p, nil)
	copy((*p)[i+1:], (*p)[i:])
	(*p)[i] = b
}

func (p *pool) remove(b *block) {
	i := p.search(b.size, b.addr)
	if i >= len(*p) || (*p)[i] != b {
		panic("allocator: free block missing from its pool")
	}
	*p = append((*p)[:i], (*p)[i+1:]...)
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
// The zero value is not ready; use New.
type Allocator struct {
	small, large pool
	live         []*block // indexed by ID; nil once freed
	nextAddr     int64
	st           Stats
	// Capacity, when positive, is the device memory available for segments;
	// a request that would need more makes Malloc report ErrOutOfMemory after
	// releasing cached segments, as the real allocator does.
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
// negative size. With a Capacity set, use TryMalloc to see out-of-memory.
func (a *Allocator) Malloc(n int64) ID {
	id, err := a.TryMalloc(n)
	if err != nil {
		// Without a capacity TryMalloc cannot fail; with one, callers must use TryMalloc.
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
	p := &a.large
	if small {
		p = &a.small
	}
	var b *block
	if i := p.search(size, -1); i < len(*p) {
		b = (*p)[i]
		*p = append((*p)[:i], (*p)[i+1:]...)
	} else {
		seg := SegmentSize(size)
		if a.Capacity > 0 && a.st.Reserved+seg > a.Capacity {
			a.EmptyCache()
			if a.st.Reserved+seg > a.Capacity {
				return -1, &ErrOutOfMemory{Requested: n, Reserved: a.st.Reserved, Capacity: a.Capacity}
			}
		}
		b = &block{addr: a.nextAddr, size: seg, small: small}
		a.nextAddr += seg
		a.st.Reserved += seg
		if a.st.Reserved > a.st.PeakReserved {
			a.st.PeakReserved = a.st.Reserved
		}
	}
	rest := b.size - size
	if (small && rest >= MinBlockSize) || (!small && rest > SmallSize) {
		r := &block{addr: b.addr + size, size: rest, small: small, free: true, prev: b, next: b.next}
		if b.next != nil {
			b.next.prev = r
		}
		b.next = r
		b.size = size
		p.insert(r)
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
	a.live = append(a.live, b)
	return ID(len(a.live) - 1), nil
}

// Size returns the block size that allocation id holds: its rounded request,
// or more when the block was not split.
func (a *Allocator) Size(id ID) int64 { return a.live[id].size }

// Free returns allocation id to its pool, merging it with free neighbours.
// It panics when id is not live.
func (a *Allocator) Free(id ID) {
	b := a.live[id]
	if b == nil {
		panic("allocator: double free")
	}
	a.live[id] = nil
	a.st.Allocated -= b.size
	a.st.Requested -= b.requested
	b.free = true
	p := &a.large
	if b.small {
		p = &a.small
	}
	if n := b.prev; n != nil && n.free {
		p.remove(n)
		n.size += b.size
		n.next = b.next
		if b.next != nil {
			b.next.prev = n
		}
		b = n
	}
	if n := b.next; n != nil && n.free {
		p.remove(n)
		b.size += n.size
		b.next = n.next
		if n.next != nil {
			n.next.prev = b
		}
	}
	p.insert(b)
}

// EmptyCache releases every cached segment that holds no live block, as
// torch.cuda.empty_cache does.
func (a *Allocator) EmptyCache() {
	for _, p := range []*pool{&a.small, &a.large} {
		kept := (*p)[:0]
		for _, b := range *p {
			if b.prev == nil && b.next == nil {
				a.st.Reserved -= b.size
				continue
			}
			kept = append(kept, b)
		}
		*p = kept
	}
}
