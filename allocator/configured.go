package allocator

import "math"

// The configured path: TryMalloc, Free and EmptyCache of an allocator made by
// NewWithConfig with a Config other than the default. Each function names the
// function of c10/cuda/CUDACachingAllocator.cpp it follows.

// configured is an Allocator on its configured path: the functions of
// CUDACachingAllocator.cpp that only PYTORCH_CUDA_ALLOC_CONF's options
// take, apart from the default path of allocator.go.
type configured struct{ *Allocator }

// expandableSpace is the address space of an expandable segment. PyTorch
// reserves 1⅛ × the device's memory (ExpandableSegment's max_handles_); the
// simulation knows no device, so the space is taken as unbounded: one
// segment per pool, as PyTorch has on any device where the mapped pages fit.
const expandableSpace = 1 << 46

// pageSize is the page of an expandable segment (its segment_size_):
// kSmallBuffer in the small pool, the large segment size in the large pool.
func (cs *confState) pageSize(small bool) int64 {
	if small {
		return SmallBuffer
	}
	return cs.large
}

// segmentSize is get_allocation_size: SegmentSize with the large segment
// size for requests between 1 and 10 MiB.
func (cs *confState) segmentSize(rounded int64) int64 {
	if rounded > SmallSize && rounded < MinLargeAlloc {
		return cs.large
	}
	return SegmentSize(rounded)
}

// confState is the state that only the configured path uses.
type confState struct {
	maxSplit int64 // max_split_size in bytes, math.MaxInt64 when unlimited
	rounding int64 // max_non_split_rounding_size in bytes
	large    int64 // large_segment_size in bytes
	// gc is set when garbage_collection_threshold is (it acts only under a
	// Capacity): calls counts get_free_block calls per pool (small, large)
	// and base holds each free block's count when it entered its pool
	// (gc_count_base), by block index.
	gc    bool
	calls [2]int64
	base  []int64
	// unmapped lists, per pool (small, large), the unmapped blocks of its
	// expandable segment in address order (BlockPool::unmapped); seg is the
	// segment's first address, valid while seg exists.
	unmapped [2][]int32
	seg      [2]int64
	segLive  [2]bool
	// oversize_allocations.current and oversize_segments.current.
	oversizeAllocations, oversizeSegments int64
}

func (cs *confState) init(c Config) {
	cs.maxSplit = math.MaxInt64
	if c.MaxSplitSize > 0 {
		cs.maxSplit = c.MaxSplitSize
	}
	cs.large = LargeBuffer
	if c.LargeSegmentSize > 0 {
		cs.large = c.LargeSegmentSize
	}
	cs.rounding = cs.large
	if c.MaxNonSplitRounding > 0 {
		cs.rounding = c.MaxNonSplitRounding
	}
	cs.gc = c.GarbageCollectionThreshold > 0
}

func poolIndex(small bool) int {
	if small {
		return 0
	}
	return 1
}

// inserted records that free block id entered its pool
// (BlockPool::insert_into_blocks).
func (cs *confState) inserted(id int32, small bool) {
	if !cs.gc {
		return
	}
	for int(id) >= len(cs.base) {
		cs.base = append(cs.base, 0)
	}
	cs.base[id] = cs.calls[poolIndex(small)]
}

// Oversize returns oversize_allocations.current and
// oversize_segments.current of torch.cuda.memory_stats: live blocks and
// cudaMalloc'd segments of at least max_split_size bytes (always 0 without
// max_split_size_mb).
func (a *Allocator) Oversize() (allocations, segments int64) {
	return a.cs.oversizeAllocations, a.cs.oversizeSegments
}

// tryMallocConf is DeviceCachingAllocator::malloc.
func (a configured) tryMallocConf(n int64) (ID, error) {
	size := a.cfg.RoundSize(n)
	small := size <= SmallSize
	p := a.poolOf(small)
	id, ok := a.getFreeBlock(p, small, size)
	if !ok {
		if a.cs.gc && a.Capacity > 0 {
			a.garbageCollect()
		}
		seg := a.cs.segmentSize(size)
		id, ok = a.allocBlock(p, small, size, seg)
		if !ok && a.releaseAvailable(p, size) {
			id, ok = a.allocBlock(p, small, size, seg)
		}
		if !ok {
			a.st.Retries++
			a.releaseCached()
			id, ok = a.allocBlock(p, small, size, seg)
		}
		if !ok {
			return -1, &ErrOutOfMemory{Requested: n, Reserved: a.st.Reserved, Capacity: a.Capacity}
		}
	}
	// should_split, then alloc_found_block.
	b := &a.blocks[id]
	rest := b.size - size
	var split bool
	if small || a.cfg.ExpandableSegments {
		split = rest >= MinBlockSize
	} else {
		split = size < a.cs.maxSplit && rest > SmallSize
	}
	if split {
		r := a.newBlock(block{addr: b.addr + size, size: rest, small: small, free: true,
			expandable: b.expandable, prev: id, next: b.next})
		b = &a.blocks[id]
		if b.next >= 0 {
			a.blocks[b.next].prev = r
		}
		b.next = r
		b.size = size
		a.insert(p, r)
		a.cs.inserted(r, small)
	}
	b.free = false
	b.requested = n
	a.st.Allocated += b.size
	a.st.Requested += n
	a.st.PeakAllocated = max(a.st.PeakAllocated, a.st.Allocated)
	a.st.PeakRequested = max(a.st.PeakRequested, a.st.Requested)
	if b.size >= a.cs.maxSplit {
		a.cs.oversizeAllocations++
	}
	a.live = append(a.live, id)
	return ID(len(a.live) - 1), nil
}

// expandableSize is get_free_block's expandable_size: a block's size and,
// when the address space after it is unmapped, that space's size.
func (a configured) expandableSize(id int32) int64 {
	b := &a.blocks[id]
	if b.next >= 0 && a.blocks[b.next].unmapped {
		return b.size + a.blocks[b.next].size
	}
	return b.size
}

// getFreeBlock is get_free_block: best fit, walked on through expandable
// blocks while the next one can grow to less, then refused when it is
// oversize for a small request or too much larger than an oversize one.
func (a configured) getFreeBlock(p *pool, small bool, size int64) (int32, bool) {
	if a.cs.gc && a.Capacity > 0 {
		a.cs.calls[poolIndex(small)]++
	}
	q := a.search(p, size)
	if !p.valid(q) {
		return -1, false
	}
	for a.blocks[p.at(q)].expandable {
		nq := a.next(p, q)
		if !p.valid(nq) || a.expandableSize(p.at(nq)) >= a.expandableSize(p.at(q)) {
			break
		}
		q = nq
	}
	bs := a.blocks[p.at(q)].size
	if size < a.cs.maxSplit && bs >= a.cs.maxSplit {
		return -1, false
	}
	if size >= a.cs.maxSplit && bs-size >= a.cs.rounding {
		return -1, false
	}
	return a.takeAt(p, q), true
}

// allocBlock is alloc_block: the Capacity check on the segment size the
// request would get (seg, also with expandable segments), then a new
// segment, or pages mapped into the pool's expandable segment.
func (a configured) allocBlock(p *pool, small bool, size, seg int64) (int32, bool) {
	if a.Capacity > 0 && a.st.Reserved+seg > a.Capacity {
		return -1, false
	}
	if a.cfg.ExpandableSegments {
		return a.allocExpandable(p, small, size), true
	}
	id := a.newBlock(block{addr: a.mallocAddr(seg), size: seg, small: small, prev: -1, next: -1})
	a.reserve(seg)
	if seg >= a.cs.maxSplit {
		a.cs.oversizeSegments++
	}
	return id, true
}

func (a configured) reserve(n int64) {
	a.st.Reserved += n
	a.st.PeakReserved = max(a.st.PeakReserved, a.st.Reserved)
}

// releaseBlock is release_block: a wholly free segment, id, goes back to
// the device.
func (a configured) releaseBlock(p *pool, id int32) {
	a.remove(p, id)
	b := &a.blocks[id]
	a.st.Reserved -= b.size
	if b.size >= a.cs.maxSplit {
		a.cs.oversizeSegments--
	}
	a.spare = append(a.spare, id)
}

// releaseAvailable is release_available_cached_blocks, with
// max_split_size_mb only: the smallest free oversize segment at least as
// large as the request (or as max_split_size) is released; failing one, the
// largest free oversize segments, from the largest down, until as much was
// released; blocks of expandable segments are never released here.
func (a configured) releaseAvailable(p *pool, size int64) bool {
	if a.cs.maxSplit == math.MaxInt64 {
		return false
	}
	key := max(size, a.cs.maxSplit)
	q := a.search(p, key)
	if p.valid(q) && !a.blocks[p.at(q)].expandable {
		a.releaseBlock(p, p.at(q))
		return true
	}
	j, ok := a.prev(p, q)
	var released int64
	for ok && released < key && a.blocks[p.at(j)].size >= a.cs.maxSplit {
		cur := p.at(j)
		// The place before j stays where it is when cur goes.
		j, ok = a.prev(p, j)
		if !a.blocks[cur].expandable {
			released += a.blocks[cur].size
			a.releaseBlock(p, cur)
		}
	}
	return released >= key
}

// releaseCached is release_cached_blocks (torch.cuda.empty_cache, and the
// last resort before out of memory): release_blocks of the large pool, then
// of the small pool.
func (a configured) releaseCached() {
	a.releaseBlocks(&a.large, false)
	a.releaseBlocks(&a.small, true)
}

// releaseBlocks is release_blocks: wholly free segments are released, and
// every free block of an expandable segment gives up the pages it wholly
// covers; a segment left with no page mapped is released.
func (a configured) releaseBlocks(p *pool, small bool) {
	var unmap []int32
	a.each(p, func(id int32) bool {
		b := &a.blocks[id]
		switch {
		case b.expandable:
			unmap = append(unmap, id)
		case b.prev < 0 && b.next < 0:
			a.st.Reserved -= b.size
			if b.size >= a.cs.maxSplit {
				a.cs.oversizeSegments--
			}
			a.spare = append(a.spare, id)
			return false
		}
		return true
	})
	for _, id := range unmap {
		a.unmapBlock(p, small, id)
		if b := &a.blocks[id]; b.unmapped && b.prev < 0 && b.next < 0 {
			pi := poolIndex(small)
			a.cs.unmapped[pi] = a.cs.unmapped[pi][:0]
			a.cs.segLive[pi] = false
			a.spare = append(a.spare, id)
		}
	}
}

// addUnmapped and dropUnmapped keep the pool's unmapped list in address
// order.
func (a configured) addUnmapped(small bool, id int32) {
	l := &a.cs.unmapped[poolIndex(small)]
	addr := a.blocks[id].addr
	i := 0
	for i < len(*l) && a.blocks[(*l)[i]].addr < addr {
		i++
	}
	*l = append(*l, 0)
	copy((*l)[i+1:], (*l)[i:])
	(*l)[i] = id
}

func (a configured) dropUnmapped(small bool, id int32) {
	l := &a.cs.unmapped[poolIndex(small)]
	for i, u := range *l {
		if u == id {
			*l = append((*l)[:i], (*l)[i+1:]...)
			return
		}
	}
	panic("allocator: unmapped block missing from its list")
}

// mergeInto merges neighbour src into dst (try_merge_blocks, whose
// conditions the callers check): dst takes src's range; src is dropped from
// its pool or list.
func (a configured) mergeInto(p *pool, small bool, dst, src int32) {
	d, s := &a.blocks[dst], a.blocks[src]
	if s.unmapped {
		a.dropUnmapped(small, src)
	} else {
		a.remove(p, src)
	}
	if d.prev == src {
		d.addr = s.addr
		d.prev = s.prev
		if s.prev >= 0 {
			a.blocks[s.prev].next = dst
		}
	} else {
		d.next = s.next
		if s.next >= 0 {
			a.blocks[s.next].prev = dst
		}
	}
	d.size += s.size
	a.spare = append(a.spare, src)
}

// findExpandable is find_expandable_block: the lowest address, in the
// pool's expandable segment, where free and unmapped blocks in a row (a
// free block just before an unmapped one included) hold size bytes; a new
// segment when there is none.
func (a configured) findExpandable(small bool, size int64) int32 {
	pi := poolIndex(small)
	room := func(id int32) bool {
		var bytes int64
		for id >= 0 && bytes < size && (a.blocks[id].free || a.blocks[id].unmapped) {
			bytes += a.blocks[id].size
			id = a.blocks[id].next
		}
		return bytes >= size
	}
	for _, u := range a.cs.unmapped[pi] {
		c := u
		if pr := a.blocks[u].prev; pr >= 0 && a.blocks[pr].free {
			c = pr
		}
		if room(c) {
			return c
		}
	}
	if a.cs.segLive[pi] {
		panic("allocator: expandable segment out of address space")
	}
	base := a.segmentAddr(expandableSpace)
	a.cs.seg[pi], a.cs.segLive[pi] = base, true
	id := a.newBlock(block{addr: base, size: expandableSpace, small: small, expandable: true, unmapped: true, prev: -1, next: -1})
	a.addUnmapped(small, id)
	return id
}

// mapBlock is map_block: the pages of unmapped block id that cover its
// first size bytes are mapped; the block, merged with free neighbours,
// enters the pool. It returns the merged block.
func (a configured) mapBlock(p *pool, small bool, id int32, size int64) int32 {
	page := a.cs.pageSize(small)
	mapped := (size + page - 1) / page * page
	a.dropUnmapped(small, id)
	if b := a.blocks[id]; mapped < b.size {
		r := a.newBlock(block{addr: b.addr + mapped, size: b.size - mapped, small: small,
			expandable: true, unmapped: true, prev: id, next: b.next})
		if b.next >= 0 {
			a.blocks[b.next].prev = r
		}
		a.blocks[id].next = r
		a.blocks[id].size = mapped
		a.addUnmapped(small, r)
	}
	b := &a.blocks[id]
	b.unmapped, b.free = false, true
	if pr := b.prev; pr >= 0 && a.blocks[pr].free {
		a.mergeInto(p, small, id, pr)
	}
	if nx := a.blocks[id].next; nx >= 0 && a.blocks[nx].free {
		a.mergeInto(p, small, id, nx)
	}
	a.insert(p, id)
	a.cs.inserted(id, small)
	a.reserve(mapped)
	return id
}

// allocExpandable is try_allocate_expandable_block: pages are mapped at the
// lowest address that fits size bytes, and the block found is taken out of
// the pool.
func (a configured) allocExpandable(p *pool, small bool, size int64) int32 {
	c := a.findExpandable(small, size)
	if a.blocks[c].unmapped {
		c = a.mapBlock(p, small, c, min(a.blocks[c].size, size))
	}
	for a.blocks[c].size < size {
		nx := a.blocks[c].next
		c = a.mapBlock(p, small, nx, min(size-a.blocks[c].size, a.blocks[nx].size))
	}
	a.remove(p, c)
	return c
}

// unmapBlock is unmap_block: free block id of an expandable segment gives up
// the pages it wholly covers; what is left of it at either end stays free.
func (a configured) unmapBlock(p *pool, small bool, id int32) {
	page := a.cs.pageSize(small)
	base := a.cs.seg[poolIndex(small)]
	b := a.blocks[id]
	lo := base + (b.addr-base+page-1)/page*page
	hi := base + (b.addr+b.size-base)/page*page
	if lo >= hi {
		return
	}
	a.remove(p, id)
	if lo > b.addr {
		f := a.newBlock(block{addr: b.addr, size: lo - b.addr, small: small, free: true, expandable: true, prev: b.prev, next: id})
		if b.prev >= 0 {
			a.blocks[b.prev].next = f
		}
		a.blocks[id].prev = f
		a.insert(p, f)
		a.cs.inserted(f, small)
	}
	if end := b.addr + b.size; hi < end {
		f := a.newBlock(block{addr: hi, size: end - hi, small: small, free: true, expandable: true, prev: id, next: b.next})
		if b.next >= 0 {
			a.blocks[b.next].prev = f
		}
		a.blocks[id].next = f
		a.insert(p, f)
		a.cs.inserted(f, small)
	}
	u := &a.blocks[id]
	u.addr, u.size, u.free, u.unmapped = lo, hi-lo, false, true
	if pr := u.prev; pr >= 0 && a.blocks[pr].unmapped {
		a.mergeInto(p, small, id, pr)
	}
	if nx := a.blocks[id].next; nx >= 0 && a.blocks[nx].unmapped {
		a.mergeInto(p, small, id, nx)
	}
	a.addUnmapped(small, id)
	a.st.Reserved -= hi - lo
}

// garbageCollect is garbage_collect_cached_blocks: once reserved bytes pass
// garbage_collection_threshold × Capacity, wholly free large-pool segments
// whose age (get_free_block calls on the pool since they entered it) is at
// least the mean age are released, round after round, until as many bytes
// as the excess are released or none is left.
func (a configured) garbageCollect() {
	threshold := int64(a.cfg.GarbageCollectionThreshold * float64(a.Capacity))
	if a.st.Reserved <= threshold {
		return
	}
	target := a.st.Reserved - threshold
	p := &a.large
	age := func(id int32) int64 { return a.cs.calls[1] - a.cs.base[id] }
	whole := func(id int32) bool { b := &a.blocks[id]; return b.prev < 0 && b.next < 0 }
	var total, count int64
	for _, id := range a.ids(p, nil) {
		if whole(id) {
			total += age(id)
			count++
		}
	}
	var reclaimed int64
	for freed := true; reclaimed < target && freed && count > 0; {
		mean := float64(total) / float64(count)
		freed = false
		for _, id := range a.ids(p, nil) {
			if whole(id) && float64(age(id)) >= mean {
				freed = true
				reclaimed += a.blocks[id].size
				total -= age(id)
				count--
				a.releaseBlock(p, id)
			}
		}
	}
}
