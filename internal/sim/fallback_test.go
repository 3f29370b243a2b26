package sim

import (
	"encoding/json"
	"testing"

	"github.com/onnxmem/onnxmem/allocator"
	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/schedule"
)

// TestCuDNNFallback replays, under a limit, a convolution whose workspace
// the allocator cannot serve: cuDNN runs the call with another engine
// (Conv_v8.cpp's try_configs catches the out-of-memory error), so the step
// goes on without that workspace and without an error; the allocator
// released its cache first; the plan cache keeps the engine, so a later
// call of the same shape takes no workspace even with memory to spare,
// while a call of another shape takes its own. A reduction's staging is
// no cuDNN call: when it cannot be had, the step runs out of memory.
func TestCuDNNFallback(t *testing.T) {
	const mib = int64(1) << 20
	call := schedule.ConvCall{Phase: schedule.Forward, Which: "fwd", N: 8, Cin: 64, Cout: 64, H: 80, W: 80, KH: 3, KW: 3, ElemSize: 2}
	other := call
	other.Cin = 32
	again := call
	again.Phase = schedule.Backward // the same shape, called again later
	q := &schedule.Program{
		Calls: []schedule.ConvCall{call, again, other},
		Buffers: []schedule.Buffer{
			{Bytes: 60 * mib},          // 0: an activation
			{Bytes: 40 * mib, Call: 1}, // 1: call's workspace
			{Bytes: 40 * mib, Call: 2}, // 2: the same shape's, later
			{Bytes: 20 * mib, Call: 3}, // 3: another shape's
			{Bytes: 8 * mib},           // 4: a 20 MiB segment, cached, then released
			{Bytes: 40 * mib},          // 5: a reduction's staging
		},
		Events: []schedule.Event{
			{Buf: 4}, {Buf: 4, Free: true}, // a cached segment
			{Buf: 0},
			{Buf: 1}, {Buf: 1, Free: true}, // cannot be had: falls back
			{Buf: 0, Free: true},
			{Buf: 2}, {Buf: 2, Free: true}, // would fit, but the cached plan takes none
			{Buf: 3}, {Buf: 3, Free: true}, // another shape: its own workspace
		},
	}
	a := allocator.New()
	a.Capacity = 80 * mib
	rp := &replayer{a: a}
	ids := make([]allocator.ID, len(q.Buffers))
	rp.step(q, ids, false, false, false)
	if rp.oom {
		t.Fatal("the step ran out of memory: the convolution should have fallen back")
	}
	key := call
	key.Phase = 0
	if len(rp.fellBack) != 1 || !rp.fellBack[key] {
		t.Fatalf("fell back: %v, want the one shape", rp.fellBack)
	}
	st := a.Stats()
	if st.PeakAllocated != 60*mib {
		t.Errorf("peak allocated %d MiB, want 60 (no workspace of the shape that fell back)", st.PeakAllocated/mib)
	}
	if st.Reserved != 60*mib || st.PeakReserved != 80*mib {
		t.Errorf("reserved %d MiB (peak %d), want 60 (80): the cached 20 MiB segment released, the other shape's workspace cut from the activation's freed segment", st.Reserved/mib, st.PeakReserved/mib)
	}

	// A reduction's staging (no Call) that cannot be had is out of memory.
	q.Events = []schedule.Event{{Buf: 0}, {Buf: 5}, {Buf: 5, Free: true}, {Buf: 0, Free: true}}
	a = allocator.New()
	a.Capacity = 80 * mib
	rp = &replayer{a: a}
	rp.step(q, ids, false, false, false)
	if !rp.oom {
		t.Error("a reduction's staging beyond the limit did not run out of memory")
	}
}

// TestCuDNNFallbackMeasured replays calibration/cudnn_fallback.py's
// measurement (an H100, torch 2.11, cuDNN 9.19): single convolution calls
// with a large workspace, each in a fresh process capped at the workspace
// fitting exactly, 2 MiB short, half of it and none, and capped so that it
// fits only once the allocator released 16 MiB of cached small segments.
// The replay must fall back exactly where cuDNN caught an out-of-memory
// error, release the cache where PyTorch did, and end with the reserved
// bytes measured less the segment of the workspace the fallback engine
// really took (which onnxmem takes as none: at most 2.4 MB for the float16
// calls, while the float32 forward's next engines took 422 and 212 MB, the
// largest that fit); and a second call of the shape, uncapped, keeps the
// engine that ran.
func TestCuDNNFallbackMeasured(t *testing.T) {
	var rec struct {
		Cases []struct {
			Case      string
			Spec      []any
			Output    int64
			Workspace int64
			Capped    []struct {
				Level          string
				Allowed        int64
				ReservedBefore int64 `json:"reserved_before"`
				Call           fallbackCall
				AgainUncapped  fallbackCall `json:"again_uncapped"`
			}
		}
	}
	raw, err := measured.Read("cudnn_fallback.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	const mib = int64(1) << 20
	n := 0
	for _, c := range rec.Cases {
		spec := c.Spec
		elem := int64(2)
		if spec[1] == "float" {
			elem = 4
		}
		num := func(i int) int64 { return int64(spec[i].(float64)) }
		bn, cin, cout, h, k, s := num(2), num(3), num(4), num(5), num(6), num(7)
		ho := (h+2*(k/2)-k)/s + 1
		x, w, gy := bn*cin*h*h*elem, cout*cin*k*k*elem, bn*cout*ho*ho*elem
		for _, lv := range c.Capped {
			a := allocator.New()
			for _, b := range []int64{x, w, gy} {
				a.Malloc(b)
			}
			if lv.Level == "release" {
				var small []allocator.ID
				for range 16 {
					small = append(small, a.Malloc(mib))
				}
				for _, id := range small {
					a.Free(id)
				}
			}
			before := a.Stats().Reserved
			a.Capacity = lv.Allowed
			call := schedule.ConvCall{Which: "fwd", N: bn, Cin: cin, Cout: cout, H: h, W: h, KH: k, KW: k, StrideH: s, StrideW: s, ElemSize: elem}
			q := &schedule.Program{
				Calls:   []schedule.ConvCall{call},
				Buffers: []schedule.Buffer{{Bytes: c.Output}, {Bytes: c.Workspace, Call: 1}},
				Events:  []schedule.Event{{Buf: 0}, {Buf: 1}, {Buf: 1, Free: true}, {Buf: 0, Free: true}},
			}
			rp := &replayer{a: a}
			ids := make([]allocator.ID, len(q.Buffers))
			rp.step(q, ids, false, false, false)
			what := c.Case + " " + lv.Level
			fell := len(rp.fellBack) > 0
			if rp.oom || fell != (lv.Call.NumOOMs > 0) {
				t.Errorf("%s: fell back %v (out of memory %v); cuDNN caught %d out-of-memory errors", what, fell, rp.oom, lv.Call.NumOOMs)
				continue
			}
			took := lv.Call.workspace()
			if lv.Level == "release" && before != lv.ReservedBefore {
				t.Errorf("%s: reserved before the call %d, measured %d", what, before, lv.ReservedBefore)
			}
			// The fallback engine's workspace, which the replay takes as
			// none, either fit in a cached block or took a segment of its
			// own.
			got, want := a.Stats().Reserved, lv.Call.ReservedAfter
			if got != want && !(fell && took > 0 && got == want-allocator.SegmentSize(allocator.RoundSize(took))) {
				t.Errorf("%s: reserved after the call %d, measured %d (the fallback engine took %d bytes)", what, got, want, took)
			}
			if fell && elem == 2 && took > 3*mib {
				t.Errorf("%s: the float16 call's fallback engine took %d bytes: not the workspace-free engine onnxmem assumes", what, took)
			}
			// The same shape again, without the cap: the plan cache keeps
			// the engine that ran.
			a.Capacity = 0
			rp.step(q, ids, false, false, false)
			if again := lv.AgainUncapped.workspace(); (again == c.Workspace) == fell {
				t.Errorf("%s: uncapped again, cuDNN took a workspace of %d bytes; the replay fell back %v", what, again, fell)
			}
			t.Logf("%-22s %-7s fell back %-5v (cuDNN: %2d OOMs, took %9d of %9d bytes) reserved %d", c.Case, lv.Level, fell, lv.Call.NumOOMs, took, c.Workspace, a.Stats().Reserved)
			n++
		}
	}
	if n < 25 {
		t.Fatalf("%d capped calls replayed, want the 30 of calibration/results/cudnn_fallback.json", n)
	}
}

// fallbackCall is one call's record in cudnn_fallback.json.
type fallbackCall struct {
	OK            bool
	Events        [][]any
	NumOOMs       int   `json:"num_ooms"`
	ReservedAfter int64 `json:"reserved_after"`
}

// workspace is the workspace the call took: the largest block it
// allocated and freed after the first (the output).
func (c fallbackCall) workspace() int64 {
	var ws int64
	seen := 0
	for _, e := range c.Events {
		if e[0] == "alloc" {
			if seen++; seen > 1 {
				ws = max(ws, int64(e[1].(float64)))
			}
		}
	}
	return ws
}
