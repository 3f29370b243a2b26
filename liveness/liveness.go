// Package liveness computes live bytes over a sequence of allocate and free
// events: the curve, its peak, and the buffers alive at any point. It knows
// nothing of graphs or tensors; buffers are integers with sizes.
//
// Worked example. Buffers 0, 1 and 2 of 10, 20 and 5 bytes:
//
//	alloc 0   live 10
//	alloc 1   live 30   ← peak: buffers 1 and 0 are alive, largest first
//	free 0    live 20
//	alloc 2   live 25
//	free 1    live  5
//
// Peak returns 30 at event 1; LiveAt(events, 1) returns [1 0].
//
// This is the classic interval sweep of register allocators and of the Go
// compiler's stack-slot liveness, on a straight-line program: one pass, no
// dataflow, since the program has no branches.
package liveness

import "sort"

// Event allocates or frees buffer Buf.
type Event struct {
	Buf  int32
	Free bool
}

// Curve returns the live bytes after each event, starting from base bytes
// already live. size gives each buffer's bytes.
func Curve(events []Event, size func(int32) int64, base int64) []int64 {
	out := make([]int64, len(events))
	cur := base
	for i, e := range events {
		if e.Free {
			cur -= size(e.Buf)
		} else {
			cur += size(e.Buf)
		}
		out[i] = cur
	}
	return out
}

// Peak returns the largest value of curve and the first index where it is
// reached, or (0, -1) for an empty curve.
func Peak(curve []int64) (int64, int) {
	best, at := int64(0), -1
	for i, v := range curve {
		if at < 0 || v > best {
			best, at = v, i
		}
	}
	return best, at
}

// LiveAt returns the buffers alive just after event at (buffers allocated by
// an event at or before it and not freed by then), ordered by size, largest
// first, then by buffer ID. Buffers live before the first event are given in
// initial.
func LiveAt(events []Event, at int, initial []int32, size func(int32) int64) []int32 {
	var live []bool
	mark := func(b int32, v bool) {
		for int(b) >= len(live) {
			live = append(live, false)
		}
		live[b] = v
	}
	for _, b := range initial {
		mark(b, true)
	}
	for i := 0; i <= at && i < len(events); i++ {
		mark(events[i].Buf, !events[i].Free)
	}
	var out []int32
	for b, ok := range live {
		if ok {
			out = append(out, int32(b))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return size(out[i]) > size(out[j]) })
	return out
}
