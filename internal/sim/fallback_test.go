package sim

import (
	"testing"

	"github.com/onnxmem/onnxmem/allocator"
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
