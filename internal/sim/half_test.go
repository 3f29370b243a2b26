package sim_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestHalfMeasured compares model steps in pure half precision
// (model.half(), a half input, no autocast; the ground truth's "half")
// with calibration/yolov9_segments.py's, each in a fresh process on the
// H200: yolov9-t, -s and -c, with and without segments, one at 512 and
// batch 12. The requested peak is the program's and matches within the
// script's 64 bytes; the allocated and reserved peaks and what is allocated
// before the step are exact, now that the load is replayed as it runs: the
// model made in float32, then halved tensor by tensor (Module._apply), each
// half tensor landing in the blocks that the float32 ones left
// (Program.ResidentLoad). Loading the half tensors directly read yolov9-c's
// bytes before the step 4.3% low and its peak 0.2% low.
func TestHalfMeasured(t *testing.T) {
	runs := ownRuns(t, "half_steps.json")
	if len(runs) != 6 {
		t.Fatalf("half_steps.json: %d scenarios, want 6", len(runs))
	}
	models := builtins{}
	var table strings.Builder
	for _, s := range runs {
		if !s.Half {
			t.Fatalf("half_steps.json: %s batch %d not in half precision", s.Cfg, s.Batch)
		}
		r := s.simulate(t, models)
		me := s.Result
		pct := func(got, want int64) float64 { return 100 * float64(got-want) / float64(want) }
		what := fmt.Sprintf("%s half segments %d batch %d at %d", s.Cfg, s.Segments, s.Batch, s.Img)
		fmt.Fprintf(&table, "%-40s peak %+6.2f%%  requested %+4d B  reserved %+6.2f%%  m0 %+6.2f%%\n", what,
			pct(r.Peak, me["peak"]), r.PeakRequested-me["peak_req"], pct(r.PeakReserved, me["peak_reserved"]), pct(r.M0, me["m0"]))
		if d := r.PeakRequested - me["peak_req"]; d < -512 || d > 512 {
			t.Errorf("%s: requested peak %d, measured %d", what, r.PeakRequested, me["peak_req"])
		}
		for _, c := range []struct {
			name      string
			got, want int64
		}{{"peak", r.Peak, me["peak"]}, {"reserved peak", r.PeakReserved, me["peak_reserved"]}, {"before the step", r.M0, me["m0"]}} {
			if e := pct(c.got, c.want); e < -0.05 || e > 0.05 {
				t.Errorf("%s: %s %+.2f%%, beyond 0.05%%", what, c.name, e)
			}
		}
	}
	t.Log("\n" + table.String())
}
