// Package liveness computes the liveness of one step's program: from a
// straight-line sequence of allocate and free events over integer buffers it
// finds each buffer's live interval, the live bytes after every event, the
// peak, and the buffers live at any point. It knows nothing of graphs or
// tensors; a buffer is an integer ID with a size in bytes.
//
// Worked example. Five buffers of 8, 10, 20, 5 and 7 bytes; buffer 0 (the
// input batch, say) is live before the first event, and no event touches
// buffer 4:
//
//	event       live after   bytes
//	(before)    0              8   Base
//	0 alloc 1   0 1           18
//	1 alloc 2   0 1 2         38   ← Peak, PeakAt 1
//	2 free 1    0 2           28
//	3 alloc 3   0 2 3         33
//	4 free 0    2 3           25
//	5 free 2    3              5
//
// Each buffer is live just after the events of a half-open interval
// [Start, End): Start is the event that allocates it (-1 for a buffer live
// before the first event) and End the event that frees it (len(events), 6
// here, for a buffer that nothing frees):
//
//	buffer  bytes  interval    -1  0  1  2  3  4  5
//	0         8    [-1, 4)      ■  ■  ■  ■  ■
//	1        10    [0, 2)          ■  ■
//	2        20    [1, 5)             ■  ■  ■  ■
//	3         5    [3, 6)                   ■  ■  ■
//	4         7    NotLive
//
// So Curve is [18 38 28 33 25 5] from Base 8, Peak is 38 at event 1, and
// LiveAt(1), the live set at the peak, is [2 1 0]: 20, 10 and 8 bytes,
// largest first.
//
// This is the liveness analysis of the Go compiler
// (cmd/compile/internal/liveness/plive.go), which finds the stack variables
// live at each safe point of a function, cut down to a program without
// branches. plive.go solves backward dataflow equations over the basic blocks
// because a variable dies at its last use, which has to be found; here the
// program has a single block and says when each buffer dies, so one forward
// pass suffices, and since each buffer is allocated at most once its live
// points form one interval, as in the interval sweeps of linear-scan register
// allocation (Poletto and Sarkar, 1999). The live set at a point is then the
// intervals that contain it, found by a scan of the intervals rather than a
// replay of the events. The events are what PyTorch's
// torch.cuda.memory._record_memory_history records in a snapshot's device
// traces ("alloc" and "free_completed" entries, one storage each), with
// storages numbered instead of addressed by pointer.
//
// Buffers are not reused: an ID names one allocation, as a storage does in
// PyTorch, so a buffer is allocated at most once in a program, and a buffer
// live before the first event is never allocated by one. A program that
// reuses an ID is rejected rather than given a second interval.
package liveness

import (
	"cmp"
	"fmt"
	"slices"
)

// Event allocates or frees buffer Buf.
type Event struct {
	Buf  int32
	Free bool
}

// NotLive is the Start and End of the interval of a buffer that is never
// live: one that no event allocates and that is not live before the first
// event. Such an interval contains no event index.
const NotLive = -2

// Interval is the live range of one buffer: the buffer is live just after
// event at for Start <= at < End, where at == -1 stands for the point before
// the first event. Start is the index of the event that allocates the buffer,
// or -1 for a buffer live before the first event; End is the index of the
// event that frees it, or len(events) when no event does. A buffer that is
// never live has Start == End == NotLive.
type Interval struct {
	Start, End int
}

// Contains reports whether the buffer is live just after event at, an event
// index or -1 for the point before the first event.
func (iv Interval) Contains(at int) bool {
	return iv.Start <= at && at < iv.End
}

// String returns the interval as "[Start, End)", or "not live" for a buffer
// that is never live.
func (iv Interval) String() string {
	if iv.Start == NotLive {
		return "not live"
	}
	return fmt.Sprintf("[%d, %d)", iv.Start, iv.End)
}

// Analysis is the liveness of one program. Its fields are read-only: the
// methods rely on them.
type Analysis struct {
	// Intervals are the buffers' live ranges, by buffer ID; there is one for
	// each of the program's buffers.
	Intervals []Interval
	// Curve is the live bytes just after each event, one value per event.
	Curve []int64
	// Base is the live bytes before the first event: those of the buffers
	// live from the start.
	Base int64
	// Peak is the largest of Base and the values of Curve.
	Peak int64
	// PeakAt is the first event index where Peak is reached, or -1 when Peak
	// is Base (no event raises the live bytes above Base, or there are no
	// events).
	PeakAt int

	// sizes are the buffers' bytes, by buffer ID; 0 for a buffer never live,
	// whose size is never asked for.
	sizes []int64
}

// Analyze computes the liveness of events over nbuf buffers, with IDs 0 to
// nbuf-1. initial lists the buffers live before the first event, in any order;
// size gives a buffer's bytes; Analyze calls it at most once per buffer, and
// only for a buffer that initial lists or an event allocates.
//
// Analyze returns an error, starting "liveness: " and naming the event (or
// the entry of initial) and the buffer, for a broken program: a buffer ID out
// of range, an initial buffer listed twice, the allocation of a buffer that
// is live or that was live earlier (buffers are not reused), the free of a
// buffer that is not live, or a negative size.
//
// Its cost is one pass over initial and events and one over the buffers; it
// allocates the Analysis and three slices, whatever the number of events.
// AnalyzeInto does the same work in the memory of an earlier Analysis.
func Analyze(events []Event, nbuf int, initial []int32, size func(int32) int64) (*Analysis, error) {
	a := &Analysis{}
	if err := AnalyzeInto(a, events, nbuf, initial, size); err != nil {
		return nil, err
	}
	return a, nil
}

// AnalyzeInto is Analyze, with the result in a: the analysis a held before
// is replaced, and its slices are reused where they are large enough, so
// that a caller that analyzes program after program allocates nothing once
// they have grown. On an error what a holds is no analysis.
func AnalyzeInto(a *Analysis, events []Event, nbuf int, initial []int32, size func(int32) int64) error {
	if nbuf < 0 {
		return fmt.Errorf("liveness: negative buffer count %d", nbuf)
	}
	if size == nil {
		return fmt.Errorf("liveness: no size function")
	}
	n := len(events)
	*a = Analysis{
		Intervals: grow(a.Intervals, nbuf),
		Curve:     grow(a.Curve, n),
		PeakAt:    -1,
		sizes:     grow(a.sizes, nbuf),
	}
	iv, sizes := a.Intervals, a.sizes
	clear(sizes)
	for b := range iv {
		iv[b] = Interval{NotLive, NotLive}
	}
	// While the events are swept, End == n marks a buffer not yet freed, so a
	// buffer is live when Start != NotLive and End == n; a free sets End to
	// the event's index, which is below n.
	var cur int64
	for i, b := range initial {
		if b < 0 || int(b) >= nbuf {
			return fmt.Errorf("liveness: initial buffer %d (initial[%d]) is out of range [0, %d)", b, i, nbuf)
		}
		if iv[b].Start != NotLive {
			j := slices.Index(initial, b)
			return fmt.Errorf("liveness: initial buffer %d is listed twice (initial[%d] and initial[%d])", b, j, i)
		}
		s := size(b)
		if s < 0 {
			return fmt.Errorf("liveness: initial buffer %d (initial[%d]) has negative size %d", b, i, s)
		}
		iv[b] = Interval{-1, n}
		sizes[b] = s
		cur += s
	}
	a.Base = cur
	peak, peakAt := cur, -1
	curve := a.Curve
	for i, e := range events {
		b := e.Buf
		if b < 0 || int(b) >= nbuf {
			what := "allocates"
			if e.Free {
				what = "frees"
			}
			return fmt.Errorf("liveness: event %d %s buffer %d, which is out of range [0, %d)", i, what, b, nbuf)
		}
		r := &iv[b]
		if e.Free {
			if r.Start == NotLive || r.End != n {
				return fmt.Errorf("liveness: event %d frees buffer %d, which is not live (%s)", i, b, history(*r, n))
			}
			r.End = i
			cur -= sizes[b]
		} else {
			if r.Start != NotLive {
				if r.End == n {
					return fmt.Errorf("liveness: event %d allocates buffer %d, which is live (%s)", i, b, history(*r, n))
				}
				return fmt.Errorf("liveness: event %d allocates buffer %d again (%s): buffers are not reused", i, b, history(*r, n))
			}
			s := size(b)
			if s < 0 {
				return fmt.Errorf("liveness: event %d allocates buffer %d with negative size %d", i, b, s)
			}
			*r = Interval{i, n}
			sizes[b] = s
			cur += s
		}
		curve[i] = cur
		if cur > peak {
			peak, peakAt = cur, i
		}
	}
	a.Peak, a.PeakAt = peak, peakAt
	return nil
}

// grow returns s resliced to n elements, or a new slice when s has not the
// room; the elements' values are whatever s held.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// history describes, for an error, what the events so far did to a buffer
// whose interval is r, in a program of n events.
func history(r Interval, n int) string {
	switch {
	case r.Start == NotLive:
		return "never allocated"
	case r.Start == -1 && r.End == n:
		return "live from the start"
	case r.Start == -1:
		return fmt.Sprintf("live from the start, freed by event %d", r.End)
	case r.End == n:
		return fmt.Sprintf("allocated by event %d", r.Start)
	}
	return fmt.Sprintf("allocated by event %d, freed by event %d", r.Start, r.End)
}

// clamp maps at onto the points of the program, -1 to len(a.Curve)-1: nothing
// changes before the first event or after the last.
func (a *Analysis) clamp(at int) int {
	return max(-1, min(at, len(a.Curve)-1))
}

// LiveAt returns the buffers live just after event at (at == -1: before the
// first event), largest first, then by buffer ID. An at below -1 reads as -1
// and one past the last event as the last event. The result is a new slice,
// nil when nothing is live; LiveAt scans the intervals and costs one pass over
// the buffers and a sort of the live ones.
func (a *Analysis) LiveAt(at int) []int32 {
	at = a.clamp(at)
	k := 0
	for _, r := range a.Intervals {
		if r.Contains(at) {
			k++
		}
	}
	if k == 0 {
		return nil
	}
	out := make([]int32, 0, k)
	for b, r := range a.Intervals {
		if r.Contains(at) {
			out = append(out, int32(b))
		}
	}
	// Size, then ID, is a total order, so the result is the one a stable sort
	// by size of out (built in ID order) gives, but pdqsort gets there in a
	// third of the time.
	sizes := a.sizes
	slices.SortFunc(out, func(x, y int32) int {
		if c := cmp.Compare(sizes[y], sizes[x]); c != 0 {
			return c
		}
		return cmp.Compare(x, y)
	})
	return out
}

// Largest returns the n largest buffers live just after event at, in the
// order of LiveAt (largest first, then by ID): LiveAt(at)[:n], or all of it
// when fewer are live. It keeps only n candidates while it scans the
// intervals, so it costs little more than the scan when n is small.
func (a *Analysis) Largest(at, n int) []int32 {
	at = a.clamp(at)
	if n <= 0 {
		return nil
	}
	sizes := a.sizes
	// before reports whether buffer x comes before buffer y in LiveAt.
	before := func(x, y int32) bool {
		return sizes[x] > sizes[y] || (sizes[x] == sizes[y] && x < y)
	}
	var out []int32
	for b, r := range a.Intervals {
		if !r.Contains(at) {
			continue
		}
		id := int32(b)
		if len(out) == n && !before(id, out[n-1]) {
			continue
		}
		// Insert id in order; IDs rise, so an equal size goes after.
		i := len(out)
		if len(out) < n {
			out = append(out, id)
		} else {
			i = n - 1
		}
		for i > 0 && before(id, out[i-1]) {
			out[i] = out[i-1]
			i--
		}
		out[i] = id
	}
	return out
}

// LiveBytes returns the live bytes just after event at: Base for at == -1,
// and Curve[at] otherwise. An at below -1 reads as -1 and one past the last
// event as the last event.
func (a *Analysis) LiveBytes(at int) int64 {
	if at = a.clamp(at); at < 0 {
		return a.Base
	}
	return a.Curve[at]
}

// Live reports whether buffer b is live just after event at (at == -1: before
// the first event). An at below -1 reads as -1 and one past the last event as
// the last event; a buffer out of range is never live.
func (a *Analysis) Live(b int32, at int) bool {
	if b < 0 || int(b) >= len(a.Intervals) {
		return false
	}
	return a.Intervals[b].Contains(a.clamp(at))
}

// Size returns buffer b's bytes as Analyze got them from its size function,
// or 0 for a buffer that is never live or out of range.
func (a *Analysis) Size(b int32) int64 {
	if b < 0 || int(b) >= len(a.sizes) {
		return 0
	}
	return a.sizes[b]
}
