package liveness

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"testing"
)

// sizes returns a size function over a table of buffer sizes.
func sizes(s ...int64) func(int32) int64 { return func(b int32) int64 { return s[b] } }

// alloc and free make events.
func alloc(b int32) Event { return Event{Buf: b} }
func free(b int32) Event  { return Event{Buf: b, Free: true} }

// example is the worked example of the package comment: buffers of 8, 10,
// 20, 5 and 7 bytes, buffer 0 live from the start, buffer 4 never touched.
var (
	example        = []Event{alloc(1), alloc(2), free(1), alloc(3), free(0), free(2)}
	exampleSizes   = []int64{8, 10, 20, 5, 7}
	exampleInitial = []int32{0}
)

// liveCheck is the live set expected just after event at.
type liveCheck struct {
	at   int
	live []int32
}

// TestAnalyze checks Analyze on hand-made programs: every field of the
// Analysis, and the live set and live bytes at chosen points.
func TestAnalyze(t *testing.T) {
	for _, c := range []struct {
		name      string
		events    []Event
		size      []int64
		initial   []int32
		intervals []Interval
		curve     []int64
		base      int64
		peak      int64
		peakAt    int
		live      []liveCheck
	}{
		{
			name: "worked example", events: example, size: exampleSizes, initial: exampleInitial,
			intervals: []Interval{{-1, 4}, {0, 2}, {1, 5}, {3, 6}, {NotLive, NotLive}},
			curve:     []int64{18, 38, 28, 33, 25, 5}, base: 8, peak: 38, peakAt: 1,
			live: []liveCheck{{-1, []int32{0}}, {0, []int32{1, 0}}, {1, []int32{2, 1, 0}}, {2, []int32{2, 0}},
				{3, []int32{2, 0, 3}}, {4, []int32{2, 3}}, {5, []int32{3}}},
		},
		{
			name: "empty program, no buffers", intervals: []Interval{}, curve: []int64{}, peakAt: -1,
			live: []liveCheck{{-1, nil}, {0, nil}},
		},
		{
			name: "empty program, initial buffers", size: []int64{3, 9, 4}, initial: []int32{2, 0},
			intervals: []Interval{{-1, 0}, {NotLive, NotLive}, {-1, 0}},
			curve:     []int64{}, base: 7, peak: 7, peakAt: -1,
			live: []liveCheck{{-1, []int32{2, 0}}, {5, []int32{2, 0}}},
		},
		{
			name: "the peak before the first event", events: []Event{free(0), alloc(1)}, size: []int64{10, 5},
			initial:   []int32{0},
			intervals: []Interval{{-1, 0}, {1, 2}},
			curve:     []int64{0, 5}, base: 10, peak: 10, peakAt: -1,
			live: []liveCheck{{-1, []int32{0}}, {0, nil}, {1, []int32{1}}},
		},
		{
			name: "an event reaching Base does not move the peak", events: []Event{free(0), alloc(1)}, size: []int64{10, 10},
			initial:   []int32{0},
			intervals: []Interval{{-1, 0}, {1, 2}},
			curve:     []int64{0, 10}, base: 10, peak: 10, peakAt: -1,
		},
		{
			name: "the first of equal maxima", events: []Event{alloc(0), alloc(1), free(1), alloc(2)}, size: []int64{5, 4, 4},
			intervals: []Interval{{0, 4}, {1, 2}, {3, 4}},
			curve:     []int64{5, 9, 5, 9}, peak: 9, peakAt: 1,
			live: []liveCheck{{1, []int32{0, 1}}, {3, []int32{0, 2}}},
		},
		{
			name: "never freed: End is len(events)", events: []Event{alloc(1), alloc(0)}, size: []int64{1, 2},
			intervals: []Interval{{1, 2}, {0, 2}},
			curve:     []int64{2, 3}, peak: 3, peakAt: 1,
			live: []liveCheck{{1, []int32{1, 0}}},
		},
		{
			name: "zero-byte buffers are live but weigh nothing", events: []Event{alloc(0), alloc(1), free(0)}, size: []int64{0, 0},
			intervals: []Interval{{0, 2}, {1, 3}},
			curve:     []int64{0, 0, 0}, peak: 0, peakAt: -1,
			live: []liveCheck{{-1, nil}, {1, []int32{0, 1}}, {2, []int32{1}}},
		},
		{
			name: "equal sizes: lower buffer first", events: []Event{alloc(3), alloc(1), alloc(4), alloc(0)},
			size:      []int64{10, 20, 5, 20, 10},
			intervals: []Interval{{3, 4}, {1, 4}, {NotLive, NotLive}, {0, 4}, {2, 4}},
			curve:     []int64{20, 40, 50, 60}, peak: 60, peakAt: 3,
			live: []liveCheck{{3, []int32{1, 3, 0, 4}}},
		},
		{
			name: "large sizes", events: []Event{alloc(0), alloc(1)}, size: []int64{1 << 50, 1<<50 + 1},
			intervals: []Interval{{0, 2}, {1, 2}},
			curve:     []int64{1 << 50, 1<<51 + 1}, peak: 1<<51 + 1, peakAt: 1,
			live: []liveCheck{{1, []int32{1, 0}}},
		},
	} {
		a, err := Analyze(c.events, len(c.size), c.initial, sizes(c.size...))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !slices.Equal(a.Intervals, c.intervals) {
			t.Errorf("%s: Intervals = %v, want %v", c.name, a.Intervals, c.intervals)
		}
		if !slices.Equal(a.Curve, c.curve) || len(a.Curve) != len(c.events) {
			t.Errorf("%s: Curve = %v, want %v", c.name, a.Curve, c.curve)
		}
		if a.Base != c.base || a.Peak != c.peak || a.PeakAt != c.peakAt {
			t.Errorf("%s: Base, Peak, PeakAt = %d, %d, %d, want %d, %d, %d", c.name, a.Base, a.Peak, a.PeakAt, c.base, c.peak, c.peakAt)
		}
		for _, l := range c.live {
			if got := a.LiveAt(l.at); !slices.Equal(got, l.live) {
				t.Errorf("%s: LiveAt(%d) = %v, want %v", c.name, l.at, got, l.live)
			}
			var sum int64
			for _, b := range l.live {
				sum += c.size[b]
			}
			if got := a.LiveBytes(l.at); got != sum {
				t.Errorf("%s: LiveBytes(%d) = %d, want %d", c.name, l.at, got, sum)
			}
		}
	}
}

// TestAnalyzeErrors checks the error of every kind of broken program.
func TestAnalyzeErrors(t *testing.T) {
	size := sizes(10, 20, 5, -1)
	for _, c := range []struct {
		name    string
		events  []Event
		nbuf    int
		initial []int32
		size    func(int32) int64
		want    string
	}{
		{"negative buffer count", nil, -1, nil, size,
			"liveness: negative buffer count -1"},
		{"no size function", nil, 3, nil, nil,
			"liveness: no size function"},
		{"initial buffer out of range", nil, 3, []int32{0, 3}, size,
			"liveness: initial buffer 3 (initial[1]) is out of range [0, 3)"},
		{"negative initial buffer", nil, 3, []int32{-1}, size,
			"liveness: initial buffer -1 (initial[0]) is out of range [0, 3)"},
		{"initial buffer listed twice", nil, 3, []int32{1, 0, 1}, size,
			"liveness: initial buffer 1 is listed twice (initial[0] and initial[2])"},
		{"initial buffer of negative size", nil, 4, []int32{3}, size,
			"liveness: initial buffer 3 (initial[0]) has negative size -1"},
		{"allocating a buffer out of range", []Event{alloc(0), alloc(3)}, 3, nil, size,
			"liveness: event 1 allocates buffer 3, which is out of range [0, 3)"},
		{"freeing a negative buffer", []Event{free(-7)}, 3, nil, size,
			"liveness: event 0 frees buffer -7, which is out of range [0, 3)"},
		{"allocating a live buffer", []Event{alloc(0), alloc(1), alloc(0)}, 3, nil, size,
			"liveness: event 2 allocates buffer 0, which is live (allocated by event 0)"},
		{"allocating an initial buffer", []Event{alloc(0), alloc(1)}, 3, []int32{1}, size,
			"liveness: event 1 allocates buffer 1, which is live (live from the start)"},
		{"allocating a buffer twice", []Event{alloc(2), free(2), alloc(2)}, 3, nil, size,
			"liveness: event 2 allocates buffer 2 again (allocated by event 0, freed by event 1): buffers are not reused"},
		{"allocating a freed initial buffer", []Event{free(0), alloc(0)}, 3, []int32{0}, size,
			"liveness: event 1 allocates buffer 0 again (live from the start, freed by event 0): buffers are not reused"},
		{"allocating a buffer of negative size", []Event{alloc(0), alloc(3)}, 4, nil, size,
			"liveness: event 1 allocates buffer 3 with negative size -1"},
		{"freeing a buffer never allocated", []Event{alloc(0), free(1)}, 3, nil, size,
			"liveness: event 1 frees buffer 1, which is not live (never allocated)"},
		{"freeing a buffer twice", []Event{alloc(1), free(1), free(1)}, 3, nil, size,
			"liveness: event 2 frees buffer 1, which is not live (allocated by event 0, freed by event 1)"},
		{"freeing an initial buffer twice", []Event{alloc(1), free(2), free(2)}, 3, []int32{2}, size,
			"liveness: event 2 frees buffer 2, which is not live (live from the start, freed by event 1)"},
	} {
		a, err := Analyze(c.events, c.nbuf, c.initial, c.size)
		if err == nil {
			t.Errorf("%s: no error, Analysis %+v", c.name, a)
			continue
		}
		if a != nil {
			t.Errorf("%s: a non-nil Analysis with the error", c.name)
		}
		if err.Error() != c.want {
			t.Errorf("%s: error\n%q, want\n%q", c.name, err, c.want)
		}
	}
}

// TestSizeCalls checks that Analyze asks each live buffer's size once and
// never asks the size of a buffer that is never live.
func TestSizeCalls(t *testing.T) {
	calls := make([]int, len(exampleSizes))
	size := func(b int32) int64 {
		calls[b]++
		return exampleSizes[b]
	}
	a, err := Analyze(example, len(exampleSizes), exampleInitial, size)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 1, 1, 1, 0}; !slices.Equal(calls, want) {
		t.Errorf("size calls by buffer = %v, want %v", calls, want)
	}
	for b, want := range []int64{8, 10, 20, 5, 0} {
		if got := a.Size(int32(b)); got != want {
			t.Errorf("Size(%d) = %d, want %d", b, got, want)
		}
	}
	if a.Size(-1) != 0 || a.Size(5) != 0 {
		t.Errorf("Size out of range = %d, %d, want 0, 0", a.Size(-1), a.Size(5))
	}
}

// TestOutOfRange checks the queries outside the program: an at below -1 reads
// as -1, one past the last event as the last event, and a buffer out of range
// is never live.
func TestOutOfRange(t *testing.T) {
	a, err := Analyze(example, len(exampleSizes), exampleInitial, sizes(exampleSizes...))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ at, same int }{{-2, -1}, {-100, -1}, {6, 5}, {1 << 40, 5}} {
		if got, want := a.LiveAt(c.at), a.LiveAt(c.same); !slices.Equal(got, want) {
			t.Errorf("LiveAt(%d) = %v, want LiveAt(%d) = %v", c.at, got, c.same, want)
		}
		if got, want := a.LiveBytes(c.at), a.LiveBytes(c.same); got != want {
			t.Errorf("LiveBytes(%d) = %d, want LiveBytes(%d) = %d", c.at, got, c.same, want)
		}
		for b := range int32(len(exampleSizes)) {
			if got, want := a.Live(b, c.at), a.Live(b, c.same); got != want {
				t.Errorf("Live(%d, %d) = %v, want Live(%d, %d) = %v", b, c.at, got, b, c.same, want)
			}
		}
	}
	for _, b := range []int32{-1, 5, 1 << 30} {
		if a.Live(b, 1) {
			t.Errorf("Live(%d, 1) = true for a buffer out of range", b)
		}
	}
	// An empty program has one point, before (and after) its no events.
	e, err := Analyze(nil, 2, []int32{1}, sizes(3, 4))
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{-3, -1, 0, 7} {
		if got := e.LiveAt(at); !slices.Equal(got, []int32{1}) || e.LiveBytes(at) != 4 || !e.Live(1, at) || e.Live(0, at) {
			t.Errorf("empty program at %d: LiveAt %v, LiveBytes %d, Live(1) %v, Live(0) %v", at, got, e.LiveBytes(at), e.Live(1, at), e.Live(0, at))
		}
	}
}

// TestIntervalString checks how intervals print.
func TestIntervalString(t *testing.T) {
	for _, c := range []struct {
		iv   Interval
		want string
	}{{Interval{-1, 4}, "[-1, 4)"}, {Interval{3, 6}, "[3, 6)"}, {Interval{NotLive, NotLive}, "not live"}} {
		if got := c.iv.String(); got != c.want {
			t.Errorf("%#v.String() = %q, want %q", c.iv, got, c.want)
		}
	}
}

// truth is what the brute-force oracle finds for a valid program. Points are
// numbered at+1, so that point 0 is before the first event.
type truth struct {
	live      [][]int32 // by point, largest first, then by ID
	bytes     []int64   // by point
	intervals []Interval
	peak      int64
	peakAt    int
}

// oracle replays events one by one over a table of live buffers and, at each
// point, lists the live buffers and sums their bytes, from scratch. It
// derives the intervals and the peak from those lists alone. For a broken
// program it returns ok false and the event that breaks it, or -1 with the
// entry of initial that does.
func oracle(events []Event, nbuf int, initial []int32, size []int64) (w *truth, bad int, badInit int, ok bool) {
	const (
		unborn = iota
		live
		dead
	)
	state := make([]int, nbuf)
	for i, b := range initial {
		if b < 0 || int(b) >= nbuf || state[b] != unborn || size[b] < 0 {
			return nil, -1, i, false
		}
		state[b] = live
	}
	w = &truth{}
	record := func() {
		var set []int32
		var sum int64
		for b := range nbuf {
			if state[b] == live {
				set = append(set, int32(b))
				sum += size[b]
			}
		}
		sort.Slice(set, func(i, j int) bool {
			x, y := set[i], set[j]
			if size[x] != size[y] {
				return size[x] > size[y]
			}
			return x < y
		})
		w.live = append(w.live, set)
		w.bytes = append(w.bytes, sum)
	}
	record()
	for i, e := range events {
		if e.Buf < 0 || int(e.Buf) >= nbuf {
			return nil, i, -1, false
		}
		switch {
		case e.Free && state[e.Buf] == live:
			state[e.Buf] = dead
		case !e.Free && state[e.Buf] == unborn && size[e.Buf] >= 0:
			state[e.Buf] = live
		default:
			return nil, i, -1, false
		}
		record()
	}
	w.intervals = make([]Interval, nbuf)
	for b := range w.intervals {
		w.intervals[b] = Interval{NotLive, NotLive}
		for p, set := range w.live {
			if slices.Contains(set, int32(b)) {
				if w.intervals[b].Start == NotLive {
					w.intervals[b].Start = p - 1
				}
				w.intervals[b].End = p // the last live point's at, plus 1
			}
		}
	}
	w.peak, w.peakAt = w.bytes[0], -1
	for p, v := range w.bytes {
		if v > w.peak {
			w.peak, w.peakAt = v, p-1
		}
	}
	return w, 0, 0, true
}

// agree checks an Analysis against the oracle's truth at every point, and at
// points outside the program.
func agree(t *testing.T, what string, a *Analysis, w *truth, nbuf int) {
	t.Helper()
	n := len(w.bytes) - 1
	if len(a.Curve) != n || !slices.Equal(a.Curve, w.bytes[1:]) {
		t.Fatalf("%s: Curve = %v, oracle %v", what, a.Curve, w.bytes[1:])
	}
	if a.Base != w.bytes[0] || a.Peak != w.peak || a.PeakAt != w.peakAt {
		t.Fatalf("%s: Base, Peak, PeakAt = %d, %d, %d, oracle %d, %d, %d", what, a.Base, a.Peak, a.PeakAt, w.bytes[0], w.peak, w.peakAt)
	}
	if !slices.Equal(a.Intervals, w.intervals) {
		t.Fatalf("%s: Intervals = %v, oracle %v", what, a.Intervals, w.intervals)
	}
	for at := -1; at < n; at++ {
		set := w.live[at+1]
		if got := a.LiveAt(at); !slices.Equal(got, set) {
			t.Fatalf("%s: LiveAt(%d) = %v, oracle %v", what, at, got, set)
		}
		for _, k := range []int{0, 1, 3, 20} {
			want := set[:min(k, len(set))]
			if got := a.Largest(at, k); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("%s: Largest(%d, %d) = %v, oracle %v", what, at, k, got, want)
			}
		}
		if got := a.LiveBytes(at); got != w.bytes[at+1] {
			t.Fatalf("%s: LiveBytes(%d) = %d, oracle %d", what, at, got, w.bytes[at+1])
		}
		for b := int32(-1); b <= int32(nbuf); b++ {
			if got, want := a.Live(b, at), slices.Contains(set, b); got != want {
				t.Fatalf("%s: Live(%d, %d) = %v, oracle %v", what, b, at, got, want)
			}
		}
	}
	if !slices.Equal(a.LiveAt(-2), w.live[0]) || !slices.Equal(a.LiveAt(n), w.live[n]) {
		t.Fatalf("%s: LiveAt outside the program = %v, %v, oracle %v, %v", what, a.LiveAt(-2), a.LiveAt(n), w.live[0], w.live[n])
	}
}

// eventErr and initialErr parse the event or the entry of initial, and the
// buffer, that an error names.
var (
	eventErr   = regexp.MustCompile(`^liveness: event (\d+) (?:allocates|frees) buffer (-?\d+)[ ,]`)
	initialErr = regexp.MustCompile(`^liveness: initial buffer (-?\d+) (?:\(initial\[(\d+)\]\)|is listed twice \(initial\[\d+\] and initial\[(\d+)\]\))`)
)

// check runs Analyze on a program and checks it against the oracle: the same
// verdict, the same broken event or initial entry, and for a valid program
// the same liveness. It reports whether the program was valid.
func check(t *testing.T, what string, events []Event, nbuf int, initial []int32, size []int64) bool {
	t.Helper()
	calls := make([]int, nbuf)
	a, err := Analyze(events, nbuf, initial, func(b int32) int64 {
		calls[b]++ // out of range panics: Analyze must not ask
		return size[b]
	})
	for b, k := range calls {
		if k > 1 {
			t.Fatalf("%s: size(%d) called %d times", what, b, k)
		}
	}
	w, bad, badInit, ok := oracle(events, nbuf, initial, size)
	switch {
	case ok && err != nil:
		t.Fatalf("%s: %v; the oracle finds the program valid", what, err)
	case !ok && err == nil:
		t.Fatalf("%s: no error; the oracle finds event %d or initial[%d] broken", what, bad, badInit)
	case ok:
		agree(t, what, a, w, nbuf)
		return true
	}
	if a != nil {
		t.Fatalf("%s: a non-nil Analysis with the error %v", what, err)
	}
	msg := err.Error()
	if bad >= 0 {
		m := eventErr.FindStringSubmatch(msg)
		if m == nil || m[1] != strconv.Itoa(bad) || m[2] != strconv.Itoa(int(events[bad].Buf)) {
			t.Fatalf("%s: error %q, want one naming event %d and buffer %d", what, msg, bad, events[bad].Buf)
		}
		return false
	}
	m := initialErr.FindStringSubmatch(msg)
	if m == nil || m[1] != strconv.Itoa(int(initial[badInit])) || m[2]+m[3] != strconv.Itoa(badInit) {
		t.Fatalf("%s: error %q, want one naming initial[%d], buffer %d", what, msg, badInit, initial[badInit])
	}
	return false
}

// randomSize returns a buffer size: often 0, often a shared value (ties in
// the ordering), sometimes above a terabyte.
func randomSize(rng *rand.Rand) int64 {
	switch rng.IntN(6) {
	case 0:
		return 0
	case 1:
		return 64
	case 2:
		return 1<<40 + rng.Int64N(1<<40)
	}
	return 1 + rng.Int64N(1000)
}

// randomProgram returns a valid program of at most maxEvents events: some
// buffers live from the start, in a random order; each buffer allocated at
// most once and then maybe freed; buffers that nothing touches.
func randomProgram(rng *rand.Rand, maxBuf, maxEvents int) (events []Event, nbuf int, initial []int32, size []int64) {
	nbuf = rng.IntN(maxBuf + 1)
	size = make([]int64, nbuf)
	for b := range size {
		size[b] = randomSize(rng)
	}
	const (
		unborn = iota
		live
		dead
	)
	state := make([]int, nbuf)
	for _, b := range rng.Perm(nbuf) {
		if rng.IntN(5) == 0 {
			initial = append(initial, int32(b))
			state[b] = live
		}
	}
	if nbuf == 0 {
		return nil, 0, initial, size
	}
	target := rng.IntN(maxEvents + 1)
	for try := 0; try < 10*target && len(events) < target; try++ {
		b := rng.IntN(nbuf)
		switch state[b] {
		case unborn:
			events = append(events, alloc(int32(b)))
			state[b] = live
		case live:
			if rng.IntN(2) == 0 {
				events = append(events, free(int32(b)))
				state[b] = dead
			}
		}
	}
	return events, nbuf, initial, size
}

// TestOracle checks Analyze against the brute-force oracle on 200 seeded
// random valid programs of up to 300 events.
func TestOracle(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		events, nbuf, initial, size := randomProgram(rng, 80, 300)
		if !check(t, fmt.Sprintf("seed %d", seed), events, nbuf, initial, size) {
			t.Fatalf("seed %d: the random program is not valid", seed)
		}
	}
}

// TestOracleBroken checks Analyze against the oracle on 400 seeded random
// programs broken by one change each: a random event inserted (a buffer out
// of range, an allocation of a live or dead buffer, a free of one that is not
// live), an event removed, or a bad initial entry. Some changes leave the
// program valid, and then the liveness must still agree.
func TestOracleBroken(t *testing.T) {
	broken := 0
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 2))
		events, nbuf, initial, size := randomProgram(rng, 40, 200)
		switch k := rng.IntN(10); {
		case k < 6: // insert a random event, its buffer maybe out of range
			at := rng.IntN(len(events) + 1)
			e := Event{Buf: int32(rng.IntN(nbuf+2)) - 1, Free: rng.IntN(2) == 0}
			if rng.IntN(8) == 0 {
				e.Buf = int32(rng.Uint32())
			}
			events = slices.Insert(events, at, e)
		case k < 8 && len(events) > 0: // remove an event: frees may lose their allocation
			i := rng.IntN(len(events))
			events = slices.Delete(events, i, i+1)
		case k < 9 && len(initial) > 0: // list an initial buffer twice
			initial = slices.Insert(initial, rng.IntN(len(initial)+1), initial[rng.IntN(len(initial))])
		default: // an initial buffer out of range
			initial = slices.Insert(initial, rng.IntN(len(initial)+1), []int32{-1, int32(nbuf)}[rng.IntN(2)])
		}
		if !check(t, fmt.Sprintf("seed %d", seed), events, nbuf, initial, size) {
			broken++
		}
	}
	if broken < 200 {
		t.Errorf("only %d of 400 changed programs are broken", broken)
	}
}

// decode turns bytes into a program: the first byte gives the buffer count
// (0 to 31), the second how many of the next bytes list initial buffers (0 to
// 7), and each byte after them is an event, freeing when its top bit is set.
// Buffer IDs run from -1 to the buffer count, one out of range on each side.
// Sizes come from the IDs, and include 0 and sizes above a terabyte.
func decode(data []byte) (events []Event, nbuf int, initial []int32, size []int64) {
	next := func() (byte, bool) {
		if len(data) == 0 {
			return 0, false
		}
		c := data[0]
		data = data[1:]
		return c, true
	}
	c, _ := next()
	nbuf = int(c % 32)
	id := func(c byte) int32 { return int32(c&0x7f)%int32(nbuf+2) - 1 }
	c, _ = next()
	for range c % 8 {
		c, ok := next()
		if !ok {
			break
		}
		initial = append(initial, id(c))
	}
	for _, c := range data {
		events = append(events, Event{Buf: id(c), Free: c&0x80 != 0})
	}
	size = make([]int64, nbuf)
	for b := range size {
		size[b] = int64(b%5) << (3 * b % 43)
	}
	return events, nbuf, initial, size
}

// encode is the inverse of decode, for seeds.
func encode(events []Event, nbuf int, initial []int32) []byte {
	out := []byte{byte(nbuf), byte(len(initial))}
	for _, b := range initial {
		out = append(out, byte(b+1))
	}
	for _, e := range events {
		c := byte(e.Buf + 1)
		if e.Free {
			c |= 0x80
		}
		out = append(out, c)
	}
	return out
}

// FuzzAnalyze checks that Analyze never panics and agrees with the oracle on
// programs decoded from bytes, valid or not.
func FuzzAnalyze(f *testing.F) {
	f.Add(encode(example, len(exampleSizes), exampleInitial))
	f.Add([]byte{})
	f.Add([]byte{3, 0, 1, 1})
	f.Add([]byte{4, 2, 1, 1, 0x81})
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 3))
		events, nbuf, initial, _ := randomProgram(rng, 31, 60)
		if len(initial) > 7 {
			initial = initial[:7]
		}
		f.Add(encode(events, nbuf, initial))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		events, nbuf, initial, size := decode(data)
		check(t, "fuzz", events, nbuf, initial, size)
	})
}

// TestEncode checks that decode inverts encode, so that the fuzz seeds are
// the programs they claim to be.
func TestEncode(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 4))
		events, nbuf, initial, _ := randomProgram(rng, 31, 60)
		if len(initial) > 7 {
			initial = initial[:7]
		}
		e, n, i, _ := decode(encode(events, nbuf, initial))
		if !slices.Equal(e, events) || n != nbuf || !slices.Equal(i, initial) {
			t.Fatalf("seed %d: decode(encode(%v, %d, %v)) = %v, %d, %v", seed, events, nbuf, initial, e, n, i)
		}
	}
}

// stepProgram returns a fixed random program shaped like a training step:
// 500 buffers live from the start and never freed, then 10,000 buffers each
// allocated once and freed once, for 20,000 events.
func stepProgram() (events []Event, nbuf int, initial []int32, size []int64) {
	const resident, steps = 500, 10000
	rng := rand.New(rand.NewPCG(1, 2))
	nbuf = resident + steps
	size = make([]int64, nbuf)
	for b := range size {
		size[b] = randomSize(rng)
	}
	for b := range int32(resident) {
		initial = append(initial, b)
	}
	var live []int32
	next := int32(resident)
	for len(events) < 2*steps {
		if len(live) == 0 || (int(next) < nbuf && rng.IntN(2) == 0) {
			events = append(events, alloc(next))
			live = append(live, next)
			next++
			continue
		}
		// Free a recent buffer more often than an old one, as a step does.
		i := len(live) - 1 - min(len(live)-1, int(rng.ExpFloat64()*20))
		events = append(events, free(live[i]))
		live = slices.Delete(live, i, i+1)
	}
	return events, nbuf, initial, size
}

// BenchmarkAnalyze measures Analyze on a 20,000-event program.
func BenchmarkAnalyze(b *testing.B) {
	events, nbuf, initial, size := stepProgram()
	sz := func(b int32) int64 { return size[b] }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Analyze(events, nbuf, initial, sz); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLiveAt measures the live set at the peak of the same program.
func BenchmarkLiveAt(b *testing.B) {
	events, nbuf, initial, size := stepProgram()
	a, err := Analyze(events, nbuf, initial, func(b int32) int64 { return size[b] })
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		a.LiveAt(a.PeakAt)
	}
}

// TestStepProgram checks that the benchmark's program is what it claims.
func TestStepProgram(t *testing.T) {
	events, nbuf, initial, size := stepProgram()
	if len(events) != 20000 {
		t.Fatalf("%d events, want 20000", len(events))
	}
	a, err := Analyze(events, nbuf, initial, func(b int32) int64 { return size[b] })
	if err != nil {
		t.Fatal(err)
	}
	// Only the resident buffers are left at the end.
	if got, want := len(a.LiveAt(len(events)-1)), 500; got != want {
		t.Errorf("%d buffers live at the end, want %d", got, want)
	}
}
