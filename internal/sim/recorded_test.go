package sim_test

import (
	"fmt"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestSegmentsRecorded replays twelve fresh timm steps whose allocator history
// calibration/timm_models.py recorded from CUDA's start
// (TIMM_TRACE_FROM=init, calibration §35 and §37, an H100: the load, the warm-up
// step and the measured one, every segment with the address cudaMalloc
// gave it), once with the simulation's own placement and once with each
// new segment at the device's address for a segment of its size, in
// order. Where the replay with the device's addresses is exact, the
// reserved peak's error came from the placement alone, which depends on
// what else the process mapped (calibration §11): mixer_b16_224 under AMP
// at batch 1 (+3.1% placed top down), cspresnet50 under AMP at batch 32
// (+1.9%) and darknet53 under AMP at batch 8 (+2.5%) are exact with the
// device's addresses, as are the three steps exact either way, each
// segment of theirs matched by one of the device's. Where it is not, the
// events differ and so do the segments: davit_tiny's AMP step at batch 1
// (-5.2% both ways: the device makes a 20 MiB segment for a 9.2 MB
// workspace of its first stage's fc1 in the warm-up's backward, which the
// simulation serves from the cache, after gradients summed out of place
// that it sums in place), levit_128s's AMP step at 32 (-3.6% both ways),
// repvgg_a2's (exact placed, -2.7% with the device's addresses) and
// nf_resnet50's (+5.1% placed, +8.8% with them: the simulation makes three
// segments more than the device, one of 26 MiB, a size the device never
// made, and two of 64 MiB, which it places itself), an open residual of
// issue 38; so are the two batch-8 steps beyond 3% traced in §37,
// mobilenetv3_large_100's AMP step (+4.7% both ways: in the warm-up's
// first forward the simulation makes a second 14 MiB segment where the
// device makes a 20 MiB one) and nf_resnet50's float32 step (-4.1% both
// ways).
func TestSegmentsRecorded(t *testing.T) {
	segments := map[string][][2]int64{} // by cfg, batch and precision: size and address, in order
	key := func(cfg string, batch int64, amp bool) string {
		return fmt.Sprintf("%s %d %v", cfg, batch, amp)
	}
	type trace struct {
		Cfg    string
		Batch  int64
		AMP    bool
		Events [][]any
	}
	for _, r := range gzLines[trace](t, "timm_init_traces.jsonl.gz") {
		for _, e := range r.Events {
			if e[0] == "segment_alloc" {
				k := key(r.Cfg, r.Batch, r.AMP)
				segments[k] = append(segments[k], [2]int64{int64(e[1].(float64)), int64(e[2].(float64))})
			}
		}
	}
	exact := map[string]bool{"mixer_b16_224": true, "cspresnet50": true, "darknet53": true, "vit_small_patch16_224": true}
	n := 0
	for _, l := range timmSteps(t, "timm_init.jsonl") {
		segs, ok := segments[key(l.Cfg, l.Batch, l.AMP)]
		if !ok {
			t.Fatalf("%s batch %d amp %v: no trace", l.Cfg, l.Batch, l.AMP)
		}
		n++
		m, err := sim.Load(measured.Path(l.Model))
		if err != nil {
			t.Fatal(err)
		}
		o := sim.Options{Batch: l.Batch, Height: l.height(), Width: l.width(), AMP: l.AMP}
		placed, err := m.Simulate(o)
		if err != nil {
			t.Fatal(err)
		}
		used := make([]bool, len(segs))
		unmatched := 0 // the simulation's segments of a size the device made no more of
		recorded, err := sim.SimulateRecorded(m, o, func(size int64) (int64, bool) {
			for i, s := range segs {
				if !used[i] && s[0] == size {
					used[i] = true
					return s[1], true
				}
			}
			unmatched++
			return 0, false
		})
		if err != nil {
			t.Fatal(err)
		}
		want := l.Measured.PeakReserved
		e := func(r *sim.Result) float64 { return 100 * float64(r.PeakReserved-want) / float64(want) }
		unused := 0 // the device's segments the simulation did not make
		for _, u := range used {
			if !u {
				unused++
			}
		}
		t.Logf("%-22s batch %2d amp %-5v reserved placed %+.2f%%, at the device's addresses %+.2f%% (%d segments unmatched, %d of the device's unused)", l.Cfg, l.Batch, l.AMP, e(placed), e(recorded), unmatched, unused)
		if exact[l.Cfg] && (recorded.PeakReserved != want || unmatched != 0 || unused != 0) {
			t.Errorf("%s batch %d amp %v: reserved %d at the device's addresses, measured %d; %d segments unmatched, %d unused", l.Cfg, l.Batch, l.AMP, recorded.PeakReserved, want, unmatched, unused)
		}
	}
	if n != 12 {
		t.Errorf("%d traced steps, want 12", n)
	}
}
