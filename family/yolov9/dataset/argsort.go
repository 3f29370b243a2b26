package dataset

import (
	"math"
	"slices"
)

// SIMDArgsort returns the permutation that numpy's argsort gives a float64
// array (kind "quicksort", the default) on an x86-64 CPU with
// AVX-512: numpy hands it to x86-simd-sort (github.com/intel/x86-simd-sort,
// src/xss-common-argsort.h, xss-network-keyvaluesort.hpp,
// xss-reg-networks.hpp and avx512-64bit-common.h), whose key-index sorting
// networks and vectorized partition order equal keys their own way. The
// validation dataloader sorts its images by aspect ratio with it
// (LoadImagesAndLabels(rect=True): ar.argsort()), and which images of one
// ratio share a batch, and so each batch's box counts, follows from that
// order.
//
// The algorithm, lane for lane: an array with a NaN goes to std::sort with
// NaNs last (std_argsort_withnan); an array already sorted is left as it is;
// a range of at most 256 is loaded into the fewest vectors of 8 lanes (a
// power of two) that hold it, the last ones padded with +Inf, each sorted
// by a 6-step bitonic network of cmp_merge (a lane takes the min or the max
// of itself and a partner lane, lane i's partner being i^1, i^3, i^1, i^7,
// i^2, i^1 with masks 0xAA, 0xCC, 0xAA, 0xF0, 0xCC, 0xAA; its index follows
// its key, an equal key keeps its own), then merged pairwise by bitonic
// merges (COEX of vectors, the upper half reversed; a lane swaps only when
// the second key is smaller); a longer range is partitioned around the
// median of eight keys at eighths of it, four vectors at a time from both
// ends into elements below the pivot (left, in lane order) and at or above
// it (right), and each side sorted again.
//
// Worked example: the keys [0 1 1 0 0 1 0 1] (one vector) come out as
// indices [0 3 6 4 2 1 5 7], where a stable sort gives [0 3 4 6 1 2 5 7];
// numpy 2.5.2 on an AVX-512 Xeon gives the same (TestSIMDArgsortMeasured,
// calibration/argsort_ties.py's 44 arrays and three datasets' ratios).
func SIMDArgsort(a []float64) []int {
	arg := make([]int, len(a))
	for i := range arg {
		arg[i] = i
	}
	if len(a) < 2 {
		return arg
	}
	if slices.ContainsFunc(a, math.IsNaN) {
		// xss_argsort's std_argsort_withnan: std::sort with NaNs last.
		introsort(arg, func(x, y int) bool {
			nx, ny := math.IsNaN(a[x]), math.IsNaN(a[y])
			if !nx && !ny {
				return a[x] < a[y]
			}
			return !nx
		})
		return arg
	}
	if slices.IsSorted(a) {
		return arg
	}
	s := argsorter{a: a, arg: arg}
	s.sort(0, len(a)-1, 2*int(math.Log2(float64(len(a)))))
	return arg
}

// argsorter is one argsort: the keys and the indices being ordered.
type argsorter struct {
	a   []float64
	arg []int
}

// lanes is one vector of 8 keys and their indices.
type lanes struct {
	k [8]float64
	v [8]int
}

// cmpMerge is cmp_merge of r and its lanes permuted by i^x: lane i takes
// the max of the pair where mask's bit i is set, else the min, and the
// index of the key it takes (its own on a tie).
func (r *lanes) cmpMerge(x int, mask uint8) {
	var out lanes
	for i := range 8 {
		j := i ^ x
		a, b := r.k[i], r.k[j]
		res := min(a, b)
		if mask>>i&1 == 1 {
			res = max(a, b)
		}
		out.k[i], out.v[i] = res, r.v[i]
		if res != a {
			out.v[i] = r.v[j]
		}
	}
	*r = out
}

// sort8 is sort_reg_8lanes.
func (r *lanes) sort8() {
	r.cmpMerge(1, 0xAA)
	r.cmpMerge(3, 0xCC)
	r.cmpMerge(1, 0xAA)
	r.cmpMerge(7, 0xF0)
	r.cmpMerge(2, 0xCC)
	r.cmpMerge(1, 0xAA)
}

// merge8 is bitonic_merge_reg_8lanes.
func (r *lanes) merge8() {
	r.cmpMerge(4, 0xF0)
	r.cmpMerge(2, 0xCC)
	r.cmpMerge(1, 0xAA)
}

// reverse reverses r's lanes.
func (r *lanes) reverse() {
	for i := range 4 {
		r.k[i], r.k[7-i] = r.k[7-i], r.k[i]
		r.v[i], r.v[7-i] = r.v[7-i], r.v[i]
	}
}

// coex is COEX of two vectors: lane by lane the smaller key (and its
// index) to a, the larger to b; equal keys stay.
func coex(a, b *lanes) {
	for i := range 8 {
		if b.k[i] < a.k[i] {
			a.k[i], b.k[i] = b.k[i], a.k[i]
			a.v[i], b.v[i] = b.v[i], a.v[i]
		}
	}
}

// mergeVecs is bitonic_merge_n_vec of len(vs) sorted runs.
func mergeVecs(vs []lanes) {
	n := len(vs)
	for i := range n / 2 {
		vs[n-1-i].reverse()
		coex(&vs[i], &vs[n-1-i])
		vs[n-1-i].reverse()
	}
	for num := n / 2; num >= 2; num /= 2 {
		for j := 0; j < n; j += num {
			for i := range num / 2 {
				coex(&vs[i+j], &vs[i+j+num/2])
			}
		}
	}
	for i := range vs {
		vs[i].merge8()
	}
}

// sortN is argsort_n<…, 256> of arg[left:left+n], n at most 256.
func (s *argsorter) sortN(left, n int) {
	vecs := 32
	for vecs > 1 && n*2 <= vecs*8 {
		vecs /= 2
	}
	vs := make([]lanes, vecs)
	for i := range vs {
		for l := range 8 {
			if p := i*8 + l; p < n {
				vs[i].k[l], vs[i].v[l] = s.a[s.arg[left+p]], s.arg[left+p]
			} else {
				vs[i].k[l], vs[i].v[l] = math.Inf(1), math.MaxInt
			}
		}
		vs[i].sort8()
	}
	for per := 2; per <= vecs; per *= 2 {
		for i := 0; i < vecs/per; i++ {
			mergeVecs(vs[i*per : (i+1)*per])
		}
	}
	for p := range n {
		s.arg[left+p] = vs[p/8].v[p%8]
	}
}

// sort is argsort_ of arg[left..right], right inclusive.
func (s *argsorter) sort(left, right, iters int) {
	if iters <= 0 {
		// A range whose pivot is its smallest key makes no progress (the
		// right part is the whole range again) until iters runs out:
		// std::sort then.
		introsort(s.arg[left:right+1], func(x, y int) bool { return s.a[x] < s.a[y] })
		return
	}
	if right+1-left <= 256 {
		s.sortN(left, right+1-left)
		return
	}
	pivot := s.pivot(left, right)
	at, smallest, biggest := s.partition(left, right+1, pivot)
	if pivot != smallest {
		s.sort(left, at-1, iters-1)
	}
	if pivot != biggest {
		s.sort(at, right, iters-1)
	}
}

// pivot is get_pivot_64bit: the fifth smallest of the keys at eighths of
// arg[left..right].
func (s *argsorter) pivot(left, right int) float64 {
	size := (right - left) / 8
	var keys [8]float64
	for i := range keys {
		keys[i] = s.a[s.arg[left+(i+1)*size]]
	}
	slices.Sort(keys[:])
	return keys[4]
}

// partition is argpartition_unrolled<…, 4> of arg[left:right] around
// pivot, longer than 256: it returns where the keys at or above the pivot
// start, and the smallest and largest key.
func (s *argsorter) partition(left, right int, pivot float64) (at int, smallest, biggest float64) {
	const unroll, width = 4, 8
	smallest, biggest = math.Inf(1), math.Inf(-1)
	for i := (right - left) % (unroll * width); i > 0; i-- {
		x := s.a[s.arg[left]]
		smallest, biggest = min(smallest, x), max(biggest, x)
		if !(x < pivot) {
			right--
			s.arg[left], s.arg[right] = s.arg[right], s.arg[left]
		} else {
			left++
		}
	}
	if left == right {
		return left, smallest, biggest
	}
	load := func(from int) (v [width]int) {
		copy(v[:], s.arg[from:from+width])
		return v
	}
	var vecLeft, vecRight [unroll][width]int
	for ii := range unroll {
		vecLeft[ii] = load(left + width*ii)
		vecRight[ii] = load(right - width*(unroll-ii))
	}
	rStore, lStore := right-width, left
	left += unroll * width
	right -= unroll * width
	store := func(v [width]int) {
		var below, above []int
		for _, idx := range v {
			x := s.a[idx]
			smallest, biggest = min(smallest, x), max(biggest, x)
			if x >= pivot {
				above = append(above, idx)
			} else {
				below = append(below, idx)
			}
		}
		copy(s.arg[lStore:], below)
		copy(s.arg[rStore+width-len(above):], above)
		lStore += width - len(above)
		rStore -= len(above)
	}
	for right != left {
		var cur [unroll][width]int
		if rStore+width-right < left-lStore {
			right -= unroll * width
			for ii := range unroll {
				cur[ii] = load(right + ii*width)
			}
		} else {
			for ii := range unroll {
				cur[ii] = load(left + ii*width)
			}
			left += unroll * width
		}
		for ii := range unroll {
			store(cur[ii])
		}
	}
	for ii := range unroll {
		store(vecLeft[ii])
	}
	for ii := range unroll {
		store(vecRight[ii])
	}
	return lStore, smallest, biggest
}

// introsort is libstdc++'s std::sort (bits/stl_algo.h, bits/stl_heap.h) of
// p with the comparison less: an introsort loop over ranges longer than 16
// (the median of the second, middle and last element moved to the front,
// an unguarded Hoare partition, the right part first), heap sort past a
// depth of 2·log2(n), then a final insertion sort; numpy is built with GCC.
func introsort(p []int, less func(x, y int) bool) {
	if len(p) < 2 {
		return
	}
	introLoop(p, 0, len(p), 2*(bitsLen(len(p))-1), less)
	if len(p) > 16 {
		insertionSort(p, 0, 16, less)
		for i := 16; i < len(p); i++ {
			linearInsert(p, i, less)
		}
	} else {
		insertionSort(p, 0, len(p), less)
	}
}

// bitsLen is the bit length of n > 0: std::__lg(n) + 1.
func bitsLen(n int) int {
	k := 0
	for ; n > 0; n >>= 1 {
		k++
	}
	return k
}

// introLoop is std::__introsort_loop of p[first:last].
func introLoop(p []int, first, last, depth int, less func(x, y int) bool) {
	for last-first > 16 {
		if depth == 0 {
			heapSort(p[first:last], less)
			return
		}
		depth--
		mid := first + (last-first)/2
		a, b, c := first+1, mid, last-1
		switch {
		case less(p[a], p[b]):
			switch {
			case less(p[b], p[c]):
				p[first], p[b] = p[b], p[first]
			case less(p[a], p[c]):
				p[first], p[c] = p[c], p[first]
			default:
				p[first], p[a] = p[a], p[first]
			}
		case less(p[a], p[c]):
			p[first], p[a] = p[a], p[first]
		case less(p[b], p[c]):
			p[first], p[c] = p[c], p[first]
		default:
			p[first], p[b] = p[b], p[first]
		}
		lo, hi := first+1, last
		for {
			for less(p[lo], p[first]) {
				lo++
			}
			hi--
			for less(p[first], p[hi]) {
				hi--
			}
			if lo >= hi {
				break
			}
			p[lo], p[hi] = p[hi], p[lo]
			lo++
		}
		introLoop(p, lo, last, depth, less)
		last = lo
	}
}

// insertionSort is std::__insertion_sort of p[first:last].
func insertionSort(p []int, first, last int, less func(x, y int) bool) {
	for i := first + 1; i < last; i++ {
		if less(p[i], p[first]) {
			v := p[i]
			copy(p[first+1:i+1], p[first:i])
			p[first] = v
		} else {
			linearInsert(p, i, less)
		}
	}
}

// linearInsert is std::__unguarded_linear_insert of p[i].
func linearInsert(p []int, i int, less func(x, y int) bool) {
	v := p[i]
	for less(v, p[i-1]) {
		p[i] = p[i-1]
		i--
	}
	p[i] = v
}

// heapSort is std::__partial_sort(first, last, last): make_heap, then
// sort_heap.
func heapSort(p []int, less func(x, y int) bool) {
	n := len(p)
	for parent := (n - 2) / 2; n >= 2; parent-- {
		adjustHeap(p, parent, n, p[parent], less)
		if parent == 0 {
			break
		}
	}
	for last := n - 1; last > 0; last-- {
		v := p[last]
		p[last] = p[0]
		adjustHeap(p, 0, last, v, less)
	}
}

// adjustHeap is std::__adjust_heap with std::__push_heap.
func adjustHeap(p []int, hole, n, v int, less func(x, y int) bool) {
	top, child := hole, hole
	for child < (n-1)/2 {
		child = 2 * (child + 1)
		if less(p[child], p[child-1]) {
			child--
		}
		p[hole] = p[child]
		hole = child
	}
	if n&1 == 0 && child == (n-2)/2 {
		child = 2 * (child + 1)
		p[hole] = p[child-1]
		hole = child - 1
	}
	parent := (hole - 1) / 2
	for hole > top && less(p[parent], v) {
		p[hole] = p[parent]
		hole = parent
		parent = (hole - 1) / 2
	}
	p[hole] = v
}
