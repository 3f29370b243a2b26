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
// Under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True the same requests
// map pages of one segment that grows, and every split is made:
//
//	c, _ := allocator.ParseConf("expandable_segments:True")
//	b := allocator.NewWithConfig(c)
//	id = b.Malloc(12 << 20) // one 20 MiB page mapped: allocated 12 MiB, reserved 20 MiB
//	b.Free(id)              // allocated 0, reserved 20 MiB
//	b.Malloc(23 << 19)      // split: allocated 11.5 MiB, reserved 20 MiB
//	b.EmptyCache()          // the page is not wholly free: reserved 20 MiB
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
//   - Out of memory (a segment beyond Capacity): the cache is released and the
//     segment tried once more.
//
// # PYTORCH_CUDA_ALLOC_CONF
//
// NewWithConfig takes a Config, which ParseConf reads from the environment
// variable's syntax as PyTorch 2.11 does (2.11.0+cu130, git
// 70d99e998b4955e0049d13a98d77ae1b14db1f45: its installed headers
// c10/core/AllocatorConfig.h and c10/cuda/CUDAAllocatorConfig.h; of the
// .cpp files, c10/core/AllocatorConfig.cpp, c10/cuda/CUDAAllocatorConfig.cpp
// and c10/cuda/CUDACachingAllocator.cpp, the public index holds versions
// near that commit, not it, so every rule below was checked on an H200
// running it: calibration/allocator_conf.py, TestDeviceConf). The options
// and their rules, by function of CUDACachingAllocator.cpp:
//   - max_split_size_mb:N (N ≥ large_segment_size_mb, 20 by default):
//     get_free_block refuses a best-fit block of at least N MiB to a request
//     below N MiB, and to a request of at least N MiB a block that is
//     max_non_split_rounding_mb (default: the large segment size, 20 MiB) or
//     more larger; should_split never splits for a request of at least N MiB;
//     out of memory, release_available_cached_blocks runs between the first
//     and the last attempt (alloc_block; release_available_cached_blocks and
//     alloc_block; release_cached_blocks and alloc_block): it releases the
//     smallest free oversize segment that holds max(request, N MiB), or else
//     the largest free oversize segments, from the largest down, until as
//     much is released (when it cannot release as much, what it released
//     stays released and the last attempt follows). Oversize reports
//     oversize_allocations and oversize_segments.
//   - expandable_segments:True: one segment per pool, an address space
//     mapped in pages of 2 MiB (small pool) or the large segment size (large
//     pool, 20 MiB by default). A miss maps pages at the lowest address where
//     free and unmapped blocks in a row (starting at an unmapped block or the
//     free block just before it) hold the request, merging with free
//     neighbours (find_expandable_block, map_block); every split leaving 512
//     bytes or more is made, in either pool; best fit walks on from an
//     expandable block to the next larger one while that one could grow to
//     less (a free block's size plus the unmapped space after it);
//     EmptyCache and the out-of-memory path unmap the pages that free blocks
//     wholly cover (unmap_block), and release a segment left with none
//     mapped; reserved bytes are the mapped pages. The Capacity check of
//     alloc_block counts the segment size the request would get without
//     expandable segments (20 MiB for 5 MiB, 26 MiB for 25 MiB), whatever is
//     mapped, even when nothing needs to be; release_available_cached_blocks
//     never releases expandable blocks.
//   - roundup_power2_divisions:D or [B:D,...,>:D]: round_size rounds a
//     request up to the next of D steps between two powers of two, for the
//     interval [2^(20+i), 2^(21+i)) bytes that D is set for (Config.RoundSize).
//   - garbage_collection_threshold:T, only under a Capacity (PyTorch: under a
//     memory fraction): before alloc_block, once reserved bytes exceed
//     T × Capacity, wholly free large-pool segments whose age (get_free_block
//     calls on the large pool since the block became free) is at least the
//     mean age are released, round after round, until the excess is
//     released (garbage_collect_cached_blocks).
//   - max_non_split_rounding_mb:N and large_segment_size_mb:N (above 10; the
//     segment for requests between 1 and 10 MiB, and the large-pool page of
//     expandable segments).
//   - per_process_memory_fraction:F: the Capacity that Config.CapacityFor
//     gives; the caller sets it.
//   - Accepted and ignored, as they change no device-memory accounting:
//     backend:native, release_lock_on_cudamalloc, pinned_use_cuda_host_register,
//     pinned_num_register_threads, pinned_use_background_threads,
//     pinned_reserve_segment_size_mb, graph_capture_record_stream_reuse.
//     backend:cudaMallocAsync and unknown keys are errors.
//
// Not yet checked on the device (calibration/allocator_conf.py --more
// measures them): large_segment_size_mb's two uses, taken from versions of
// CUDACachingAllocator.cpp after the option came in; the capacity of
// per_process_memory_fraction (DeviceCachingAllocator's constructor calls
// setMemoryFraction with it); max_non_split_rounding_mb above 20 MiB (parsed
// as checked, but no recorded request met a block between 20 and 40 MiB
// larger). The address space of an expandable segment is taken as unbounded
// (PyTorch reserves 1⅛ × the device's memory, which the simulation does not
// know).
//
// Addresses are simulated: each new segment lies just below the last, as
// cudaMalloc's addresses fall on the H200 (the segments that
// calibration/allocator_conf.py recorded), so ties between equal free blocks
// go to the newest segment, as they do there; or, with Placement BottomUp,
// just above it. The driver also reuses the ranges of released segments
// and packs segments into ranges it reserved, which the simulation does
// not; that can change which of two equal blocks is taken (calibration
// §11, §29).
package allocator

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
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

// block is a contiguous range of one segment. Blocks live in
// Allocator.blocks and refer to each other by index, so that the simulation
// makes no pointers for the garbage collector to chase.
type block struct {
	addr, size int64
	requested  int64 // the request it serves, while allocated
	prev, next int32 // neighbours within the segment, or -1
	// fprev and fnext link the blocks of one pool bucket, in (size, addr)
	// order, while the block is in its pool; -1 at the ends. bucket is
	// that bucket, bucketOf(size) when it was inserted.
	fprev, fnext int32
	bucket       uint16
	small        bool
	free         bool // mapped and in its pool
	// Only with expandable segments: the block belongs to one, and (unmapped)
	// it is a range of its address space with no pages behind it, which is
	// in no pool and holds no reserved bytes.
	expandable, unmapped bool
}

// pool is the set of free blocks of one kind, ordered by (size, addr) as
// the std::set of CUDACachingAllocator.cpp's BlockPool is. It is held in
// buckets of sizes, as TLSF holds its free lists (M. Masmano et al., "TLSF:
// a new dynamic memory allocator for real-time systems", ECRTS 2004): a
// size of u = size/512 units falls in bucket u when u < 16, else in one of
// 16 equal sub-ranges of [2^f, 2^(f+1)), bucket 16·f + ⌊u/2^(f-4)⌋ mod 16,
// for f = ⌊log2 u⌋; every size of a bucket is below every size of the next.
// Each bucket is a doubly linked list through its blocks (block.fprev,
// fnext) sorted by (size, addr), and a bitmap marks the buckets that hold
// blocks. A search for the best fit walks the request's bucket, then takes
// the first block of the next marked one. Three inserts in four find their
// bucket empty and most searches look at none or one block, so a list is
// as fast to walk as a sorted slice is to search, and a block leaves its
// pool in constant time, with no search and nothing moved; the pool holds
// no pointers, so the garbage collector neither scans it nor puts write
// barriers on it. (Sorted slices per bucket were 20–30% slower on
// Sweep42; one sorted slice of the whole pool 20% slower still on
// BenchmarkReplay, and github.com/google/btree 2.5 times slower.)
//
// Worked example: free blocks of 1 MiB (u = 2048, f = 11: bucket 176),
// 1.5 MiB (u = 3072: bucket 184) and 40 MiB (u = 81920, f = 16: bucket
// 260). A request for 1.25 MiB (u = 2560: bucket 180) finds nothing in its
// bucket; the next marked bucket is 184, whose first block, 1.5 MiB, is
// the best fit.
type pool struct {
	head, tail [poolBuckets]int32 // by bucket: its first and last block, or -1 (valid where marked)
	mask       [poolBuckets / 64]uint64
}

// poolBuckets is the number of buckets, a multiple of 64 above the last
// (16·53 + 15 for u < 2^54, sizes below 2^63 bytes).
const poolBuckets = 896

// bucketOf returns the bucket of a block of size bytes.
func bucketOf(size int64) int {
	u := uint64(size) >> 9
	if u < 16 {
		return int(u)
	}
	f := bits.Len64(u) - 1
	return f*16 + int((u>>(f-4))&15)
}

// pos is a place in a pool: the block there, or poolEnd past the largest.
type pos = int32

const poolEnd pos = -1

// valid reports whether q is a block's place, not the end.
func (p *pool) valid(q pos) bool { return q >= 0 }

// at returns the block at q.
func (p *pool) at(q pos) int32 { return q }

// marked returns the first bucket from k on that holds blocks, or
// poolBuckets.
func (p *pool) marked(k int) int {
	w := k >> 6
	if w >= len(p.mask) {
		return poolBuckets
	}
	m := p.mask[w] &^ (1<<(uint(k)&63) - 1)
	for m == 0 {
		if w++; w == len(p.mask) {
			return poolBuckets
		}
		m = p.mask[w]
	}
	return w<<6 + bits.TrailingZeros64(m)
}

// first returns the first block of bucket k on, or poolEnd.
func (p *pool) first(k int) pos {
	if k = p.marked(k); k == poolBuckets {
		return poolEnd
	}
	return p.head[k]
}

// next returns the place after q.
func (a *Allocator) next(p *pool, q pos) pos {
	b := &a.blocks[q]
	if b.fnext >= 0 {
		return b.fnext
	}
	return p.first(int(b.bucket) + 1)
}

// prev returns the place before q (q may be the end), or false at the
// first block.
func (a *Allocator) prev(p *pool, q pos) (pos, bool) {
	k := poolBuckets
	if q >= 0 {
		b := &a.blocks[q]
		if b.fprev >= 0 {
			return b.fprev, true
		}
		k = int(b.bucket)
	}
	for k--; k >= 0; k-- {
		if p.mask[k>>6]&(1<<(uint(k)&63)) != 0 {
			return p.tail[k], true
		}
	}
	return poolEnd, false
}

// search returns the place of the first block in p of at least size bytes.
func (a *Allocator) search(p *pool, size int64) pos {
	k := bucketOf(size)
	// The bucket holds a block that large only when its last one is.
	if p.mask[k>>6]&(1<<(uint(k)&63)) != 0 && a.blocks[p.tail[k]].size >= size {
		for id := p.head[k]; ; id = a.blocks[id].fnext {
			if a.blocks[id].size >= size {
				return id
			}
		}
	}
	return p.first(k + 1)
}

// each calls f with every block of p in order, keeping those for which it
// returns true.
func (a *Allocator) each(p *pool, f func(id int32) bool) {
	for k := p.marked(0); k < poolBuckets; k = p.marked(k + 1) {
		for id := p.head[k]; id >= 0; {
			next := a.blocks[id].fnext
			if !f(id) {
				a.unlink(p, k, id)
			}
			id = next
		}
	}
}

// ids returns the blocks of p in order, appended to dst.
func (a *Allocator) ids(p *pool, dst []int32) []int32 {
	for q := p.first(0); q >= 0; q = a.next(p, q) {
		dst = append(dst, q)
	}
	return dst
}

// reset empties p.
func (p *pool) reset() { p.mask = [poolBuckets / 64]uint64{} }

// insert puts block id into p, in (size, addr) order within its bucket.
func (a *Allocator) insert(p *pool, id int32) {
	b := &a.blocks[id]
	k := bucketOf(b.size)
	b.bucket = uint16(k)
	bit := uint64(1) << (uint(k) & 63)
	if p.mask[k>>6]&bit == 0 {
		// Three inserts in four find their bucket empty.
		p.mask[k>>6] |= bit
		p.head[k], p.tail[k] = id, id
		b.fprev, b.fnext = -1, -1
		return
	}
	// after is the last block before b, or -1: the walk goes from both
	// ends at once, so that a block that belongs near either end (frees
	// in address order, up or down, as a chain of layers makes them) is
	// placed in a step or two however long the bucket is.
	less := func(x int32) bool {
		xb := &a.blocks[x]
		return xb.size < b.size || (xb.size == b.size && xb.addr < b.addr)
	}
	after := int32(-1)
	for lo, hi := p.head[k], p.tail[k]; ; {
		if !less(lo) {
			after = a.blocks[lo].fprev
			break
		}
		if less(hi) {
			after = hi
			break
		}
		lo, hi = a.blocks[lo].fnext, a.blocks[hi].fprev
	}
	b.fprev = after
	if after < 0 {
		b.fnext = p.head[k]
		p.head[k] = id
	} else {
		b.fnext = a.blocks[after].fnext
		a.blocks[after].fnext = id
	}
	if b.fnext < 0 {
		p.tail[k] = id
	} else {
		a.blocks[b.fnext].fprev = id
	}
}

// remove takes block id, which is in p, out of it.
func (a *Allocator) remove(p *pool, id int32) {
	a.unlink(p, int(a.blocks[id].bucket), id)
}

// unlink takes block id out of bucket k of p. It panics when the block is
// not free, so in no pool: a broken invariant.
func (a *Allocator) unlink(p *pool, k int, id int32) {
	b := &a.blocks[id]
	if !b.free {
		panic("allocator: a block in no pool taken out of one")
	}
	if b.fprev >= 0 {
		a.blocks[b.fprev].fnext = b.fnext
	} else {
		p.head[k] = b.fnext
	}
	if b.fnext >= 0 {
		a.blocks[b.fnext].fprev = b.fprev
	} else {
		p.tail[k] = b.fprev
	}
	if p.head[k] < 0 {
		p.mask[k>>6] &^= 1 << (uint(k) & 63)
	}
}

// takeAt takes the block at q out of p and returns it.
func (a *Allocator) takeAt(p *pool, q pos) int32 {
	a.remove(p, q)
	return q
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

// Stats are the counters of torch.cuda.memory_stats that the simulation keeps:
// bytes, current and peak since the last ResetPeaks, and a count of
// retries since the allocator was made.
type Stats struct {
	Allocated, Requested, Reserved             int64
	PeakAllocated, PeakRequested, PeakReserved int64
	// Retries is num_alloc_retries: the requests that the allocator could
	// serve only after releasing its cache (or that it could not serve
	// then), under Capacity.
	Retries int64
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
	nextAddr     int64   // the next expandable segment's address range
	down         int64   // the bytes of cudaMalloc segments made (Placement)
	st           Stats
	// Capacity, when positive, is the device memory available for segments;
	// a request that would need more makes TryMalloc report ErrOutOfMemory
	// after releasing cached segments, as the real allocator does. It is
	// PyTorch's allowed_memory_maximum: set_per_process_memory_fraction(f)
	// gives int64(f × total device memory).
	Capacity int64

	// conf is set when cfg is not the default: TryMalloc, Free and
	// EmptyCache then take the configured path of configured.go, and the default
	// path stays as it is.
	conf bool
	cfg  Config
	cs   confState
	// Observe, when set, is told of every block handed out and freed and
	// of every segment reserved and released, in order, as
	// torch.cuda.memory._record_memory_history records them (its actions:
	// "alloc", "free_completed", "segment_alloc", "segment_free", "oom"),
	// with the request's size for an alloc or a free, as its trace has them.
	// Only the default allocator reports (not a Config's).
	Observe func(action string, addr, size int64)

	// Placement is where cudaMalloc puts each new segment relative to those
	// before it (TopDown unless set). Reset sets it to TopDown again.
	Placement Placement

	// SegmentAddr, when set, gives the address of each new cudaMalloc
	// segment of size bytes in place of Placement's, as a replay of a
	// device recording does: the address the device gave the segment
	// (torch.cuda.memory._record_memory_history's segment_alloc). A
	// segment it has no address for (false) is placed by Placement. It
	// takes precedence over a test's address hint, which then waits for
	// the next segment. Reset clears it; CopyFrom keeps a's own.
	SegmentAddr func(size int64) (addr int64, ok bool)

	// addrHint, when not 0, is where the next segment created (a cudaMalloc,
	// or an expandable segment's address space) starts; tests that replay a
	// device recording set it to the address the device returned.
	addrHint int64
}

// Placement is the order of the addresses that cudaMalloc gives new
// segments. The allocator serves a request from the smallest free block
// that holds it and, among blocks of that size, from the one at the lowest
// address, so the order of the segments' addresses decides which block a
// request gets when several of one size are free, and with it how the
// cache fragments. Where the driver puts a segment depends on what else
// the process mapped (cuDNN's and cuBLAS's modules, loaded lazily), which
// a simulation does not see (calibration §11, §29); the two placements
// bound it.
type Placement uint8

const (
	// TopDown puts each new segment below every earlier one, as the
	// driver puts a new chunk of address space at the top of the free
	// range below the last.
	TopDown Placement = iota
	// BottomUp puts each new segment above every earlier one, as the
	// driver does where it packs segments into a range it reserved.
	BottomUp
)

// New returns an empty allocator with PyTorch's default settings.
func New() *Allocator { return &Allocator{} }

// NewWithConfig returns an empty allocator that follows c, as PyTorch does
// when PYTORCH_CUDA_ALLOC_CONF is set before CUDA starts. New() and
// NewWithConfig(Config{}) behave the same.
func NewWithConfig(c Config) *Allocator {
	a := &Allocator{}
	if c != (Config{}) {
		a.conf, a.cfg = true, c
		a.cs.init(c)
	}
	return a
}

// Reset empties the allocator and sets its configuration to c, as
// NewWithConfig(c) makes it, keeping the memory of its tables for the next
// simulation. Its Capacity is 0 and its Placement TopDown again.
func (a *Allocator) Reset(c Config) {
	a.small.reset()
	a.large.reset()
	*a = Allocator{
		small:  a.small,
		large:  a.large,
		blocks: a.blocks[:0],
		spare:  a.spare[:0],
		live:   a.live[:0],
	}
	if c != (Config{}) {
		a.conf, a.cfg = true, c
		a.cs.init(c)
	}
}

// CopyFrom makes a the copy of src: the same segments, blocks, pools,
// counters and configuration, and the same IDs for its live allocations,
// so that the same requests then give the same results in both. It keeps
// a's memory for the copy, and a's own Observe and SegmentAddr: src's
// are not copied.
func (a *Allocator) CopyFrom(src *Allocator) {
	small, large, observe, segAddr := a.small, a.large, a.Observe, a.SegmentAddr
	small.copyFrom(&src.small)
	large.copyFrom(&src.large)
	cs := a.cs
	cs.base = append(cs.base[:0], src.cs.base...)
	for i := range cs.unmapped {
		cs.unmapped[i] = append(cs.unmapped[i][:0], src.cs.unmapped[i]...)
	}
	base, unmapped := cs.base, cs.unmapped
	*a = Allocator{
		small:       small,
		large:       large,
		blocks:      append(a.blocks[:0], src.blocks...),
		spare:       append(a.spare[:0], src.spare...),
		live:        append(a.live[:0], src.live...),
		nextAddr:    src.nextAddr,
		down:        src.down,
		st:          src.st,
		Capacity:    src.Capacity,
		conf:        src.conf,
		cfg:         src.cfg,
		cs:          src.cs,
		addrHint:    src.addrHint,
		Placement:   src.Placement,
		Observe:     observe,
		SegmentAddr: segAddr,
	}
	a.cs.base, a.cs.unmapped = base, unmapped
}

// copyFrom makes p a copy of q; the links are in the blocks.
func (p *pool) copyFrom(q *pool) { *p = *q }

// Config returns the allocator's configuration.
func (a *Allocator) Config() Config { return a.cfg }

// ErrOutOfMemory is returned by TryMalloc when a segment cannot be reserved
// within Capacity.
type ErrOutOfMemory struct{ Requested, Reserved, Capacity int64 }

func (e *ErrOutOfMemory) Error() string {
	return fmt.Sprintf("allocator: out of memory: %d bytes requested with %d reserved of %d", e.Requested, e.Reserved, e.Capacity)
}

// Stats returns the current counters.
func (a *Allocator) Stats() Stats { return a.st }

// Allocated returns the allocated bytes, Stats().Allocated.
func (a *Allocator) Allocated() int64 { return a.st.Allocated }

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
	if a.conf {
		return configured{a}.tryMallocConf(n)
	}
	size := RoundSize(n)
	small := size <= SmallSize
	p := a.poolOf(small)
	var id int32
	found := a.search(p, size)
	if p.valid(found) {
		id = a.takeAt(p, found)
	} else {
		var err error
		if id, err = a.newSegment(n, size, small); err != nil {
			return -1, err
		}
	}
	b := &a.blocks[id]
	if rest := b.size - size; splits(small, rest) {
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
	if a.Observe != nil {
		a.Observe("alloc", b.addr, n)
	}
	return ID(len(a.live) - 1), nil
}

// Transient serves a request of n bytes that is freed at once, before any
// other request, as TryMalloc and then Free would (a kernel's scratch, a
// workspace, a tensor no one keeps), and returns the block size it held:
// the counters and peaks move as they would, a segment it reserved stays
// cached, and the pools end as they were. It takes no ID. Under a
// configuration or with Observe set it runs TryMalloc and Free, and so
// takes an ID as they do.
func (a *Allocator) Transient(n int64) (int64, error) {
	if n < 0 {
		panic("allocator: negative request")
	}
	if a.conf || a.Observe != nil {
		id, err := a.TryMalloc(n)
		if err != nil {
			return 0, err
		}
		size := a.Size(id)
		a.Free(id)
		return size, nil
	}
	size := RoundSize(n)
	small := size <= SmallSize
	p := a.poolOf(small)
	var whole int64
	if found := a.search(p, size); p.valid(found) {
		// The best fit, split and merged back: the pools do not change.
		whole = a.blocks[p.at(found)].size
	} else {
		// The new segment, whole again once the block is freed.
		id, err := a.newSegment(n, size, small)
		if err != nil {
			return 0, err
		}
		a.blocks[id].free = true
		a.insert(p, id)
		whole = a.blocks[id].size
	}
	held := whole
	if splits(small, whole-size) {
		held = size
	}
	a.st.PeakAllocated = max(a.st.PeakAllocated, a.st.Allocated+held)
	a.st.PeakRequested = max(a.st.PeakRequested, a.st.Requested+n)
	return held, nil
}

// newSegment reserves the segment for a request of n bytes (size rounded,
// from the small pool or the large) and returns its one block, allocated
// and in no pool. Beyond Capacity it first releases the cache, and reports
// out of memory when that is not enough.
func (a *Allocator) newSegment(n, size int64, small bool) (int32, error) {
	seg := SegmentSize(size)
	if a.Capacity > 0 && a.st.Reserved+seg > a.Capacity {
		a.st.Retries++
		a.EmptyCache()
		if a.st.Reserved+seg > a.Capacity {
			if a.Observe != nil {
				a.Observe("oom", 0, size)
			}
			return -1, &ErrOutOfMemory{Requested: n, Reserved: a.st.Reserved, Capacity: a.Capacity}
		}
	}
	id := a.newBlock(block{addr: a.mallocAddr(seg), size: seg, small: small, prev: -1, next: -1})
	if a.Observe != nil {
		a.Observe("segment_alloc", a.blocks[id].addr, seg)
	}
	a.st.Reserved += seg
	a.st.PeakReserved = max(a.st.PeakReserved, a.st.Reserved)
	return id, nil
}

// splits reports whether a block with rest bytes beyond a request is split
// (should_split): a small one when at least 512 bytes remain, a large one
// when more than 1 MiB does.
func splits(small bool, rest int64) bool {
	return (small && rest >= MinBlockSize) || (!small && rest > SmallSize)
}

// segmentAddr returns the address of a new segment of size bytes.
func (a *Allocator) segmentAddr(size int64) int64 {
	if h := a.addrHint; h != 0 {
		a.addrHint = 0
		return h
	}
	addr := a.nextAddr
	a.nextAddr += size
	return addr
}

// mallocTop is the simulated address below which cudaMalloc's segments
// are placed, top down (above which, with BottomUp); expandable segments'
// address ranges rise from 0.
const mallocTop = 1 << 50

// mallocAddr returns the address of a new cudaMalloc segment of size
// bytes: just below the last one, or with BottomUp just above it.
func (a *Allocator) mallocAddr(size int64) int64 {
	if a.SegmentAddr != nil {
		if addr, ok := a.SegmentAddr(size); ok {
			return addr
		}
	}
	if h := a.addrHint; h != 0 {
		a.addrHint = 0
		return h
	}
	a.down += size
	if a.Placement == BottomUp {
		return mallocTop + a.down - size
	}
	return mallocTop - a.down
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
	if a.Observe != nil && !a.conf {
		a.Observe("free_completed", b.addr, b.requested)
	}
	a.st.Allocated -= b.size
	a.st.Requested -= b.requested
	if a.conf && b.size >= a.cs.maxSplit {
		a.cs.oversizeAllocations--
	}
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
	if a.conf {
		a.cs.inserted(bi, b.small)
	}
}

// EmptyCache releases every cached segment that holds no live block, as
// torch.cuda.empty_cache does.
func (a *Allocator) EmptyCache() {
	if a.conf {
		configured{a}.releaseCached()
		return
	}
	for _, p := range []*pool{&a.small, &a.large} {
		a.each(p, func(id int32) bool {
			b := &a.blocks[id]
			if b.prev >= 0 || b.next >= 0 {
				return true
			}
			if a.Observe != nil {
				a.Observe("segment_free", b.addr, b.size)
			}
			a.st.Reserved -= b.size
			a.spare = append(a.spare, id)
			return false
		})
	}
}

// Segment is one reserved segment and its blocks, in address order.
type Segment struct {
	Addr, Size int64
	Small      bool
	Blocks     []Block
}

// Block is one block of a segment: allocated (with the request it serves)
// or free in its pool.
type Block struct {
	Addr, Size, Requested int64
	Allocated             bool
}

// Segments returns the reserved segments with their blocks, in address
// order, as torch.cuda.memory_snapshot() lists them. Only the default
// allocator's (not a Config's) are listed.
func (a *Allocator) Segments() []Segment {
	spare := make([]bool, len(a.blocks))
	for _, id := range a.spare {
		spare[id] = true
	}
	var out []Segment
	for i := range a.blocks {
		b := &a.blocks[i]
		if spare[i] || b.prev >= 0 || b.unmapped {
			continue
		}
		seg := Segment{Addr: b.addr, Small: b.small}
		for j := int32(i); j >= 0; j = a.blocks[j].next {
			x := &a.blocks[j]
			blk := Block{Addr: x.addr, Size: x.size, Allocated: !x.free}
			if !x.free {
				blk.Requested = x.requested
			}
			seg.Size += x.size
			seg.Blocks = append(seg.Blocks, blk)
		}
		out = append(out, seg)
	}
	slices.SortFunc(out, func(x, y Segment) int { return cmp.Compare(x.Addr, y.Addr) })
	return out
}
