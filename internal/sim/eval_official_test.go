package sim_test

import (
	"cmp"
	"fmt"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestEvalOfficial holds onnxmem to validation as the official YOLOv9 code
// runs it, measured on an H100 with calibration/eval_official.py
// (calibration §22, and §23's sweep: every YOLOv9 and GELAN model at batch
// 2 and 128 at 640, 32 at 384×672 and 64 at 672×448, all 40 peaks within
// 0.19%, 37 reserved peaks within 0.43%): the float32 model, its half copy and the cuBLAS
// workspace resident, empty_cache, a warm-up forward and the measured one
// (ownHarness: the cache emptied before the warm-up only). The peaks of
// yolov9-e at batch 8 to 64 and of yolov9-t and yolov9-c within 0.1%, the
// reserved peaks within 1% but for yolov9-t at 61; and yolov9-t's largest batch under a 1.5 GiB
// cap, 60, exactly (the command line's eval default empties the cache
// before the measured step, as the ground truth's harness did, and says
// 63 there).
func TestEvalOfficial(t *testing.T) {
	type step struct {
		Cfg          string
		B            int64 `json:"batch"`
		H            int64 `json:"img_h"`
		W            int64 `json:"img_w"`
		Peak         int64 `json:"peak"`
		PeakReserved int64 `json:"peak_reserved"`
		// Harness is where the script emptied the cache (eval_official.py
		// --harness): before the warm-up only (ownHarness, the default)
		// or again before the measured step.
		Harness sim.EmptyCache
	}
	steps := jsonArrays[step](t, "eval_official.json", "eval_official_segments.json", "eval_official_sweep.json", "eval_official_warm.json", "eval_official_step.json")
	pct := func(got, want int64) float64 { return 100 * float64(got-want) / float64(want) }
	models := builtins{}
	var table strings.Builder
	for _, s := range steps {
		r, err := models.get(t, s.Cfg).Simulate(sim.Options{Batch: s.B, Height: s.H, Width: s.W, Eval: true, EmptyCache: cmp.Or(s.Harness, ownHarness)})
		if err != nil {
			t.Fatal(err)
		}
		p, res := pct(r.Peak, s.Peak), pct(r.PeakReserved, s.PeakReserved)
		fmt.Fprintf(&table, "%-9s %3d %4dx%-4d %-13s peak %+6.2f%%  reserved %+6.2f%%\n", s.Cfg, s.B, s.H, s.W, cmp.Or(s.Harness, ownHarness), p, res)
		tol, ptol := 1.0, 0.1
		switch {
		case s.Cfg == "yolov9-t" && s.B >= 60 && s.B <= 63 && s.Harness != sim.EmptyCacheStep,
			s.Cfg == "yolov9-s" && s.B == 64 && s.H == 672 && s.W == 448, s.Cfg == "yolov9-m" && s.B == 2:
			// A warm-up from the fresh process's cache lays its segments
			// out as cudaMalloc placed them: the device's trace replayed
			// with its addresses gives the measured reserved peak to the
			// byte, with onnxmem's placement one segment more or less
			// (-3.1% to +3.3%; calibration §29). From an emptied cache
			// (before_step) the same batches are exact.
			tol = 4.5
		case s.Cfg == "gelan-e" && s.B == 2:
			ptol = 0.2 // +0.19%: the DFL's transient at the smallest batch
		}
		if p > ptol || p < -ptol || res > tol || res < -tol {
			t.Errorf("%s batch %d at %dx%d: peak %+.2f%%, reserved %+.2f%% against the official code", s.Cfg, s.B, s.H, s.W, p, res)
		}
	}
	if len(steps) != 61 {
		t.Errorf("%d eval steps, want the 8 of eval_official.json, the 2 of eval_official_segments.json, the 40 of eval_official_sweep.json, the 8 of eval_official_warm.json and the 3 of eval_official_step.json", len(steps))
	}
	type search struct {
		Cfg           string
		Img           int64
		CapacityBytes int64 `json:"capacity_bytes"`
		MaxBatch      int64 `json:"max_batch"`
		Harness       sim.EmptyCache
		Trials        []struct {
			Spec string // cfg:batch:height:width
			OK   bool
		}
	}
	searches := jsonArrays[search](t, "eval_official_maxbatch.json", "eval_official_maxbatch_warmup.json", "eval_official_maxbatch_step.json")
	if len(searches) != 3 {
		t.Errorf("%d max batch searches, want 3", len(searches))
	}
	for _, s := range searches {
		n, _, err := models.get(t, s.Cfg).MaxBatch(sim.Options{Height: s.Img, Width: s.Img, Eval: true, EmptyCache: cmp.Or(s.Harness, ownHarness)}, s.CapacityBytes, 1024)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&table, "%-9s max batch under %d bytes, %s: %d, measured %d\n", s.Cfg, s.CapacityBytes, cmp.Or(s.Harness, ownHarness), n, s.MaxBatch)
		// Each trial of the search, ran or ran out, as simulated alone.
		// At the limit that hangs on where cudaMalloc put the segments
		// (calibration §29): placed top down, batch 62 and 63 with the
		// ground truth's harness fit where the device ran out; placed
		// bottom up, 58 with the other runs out where the device ran.
		// Simulate asks for both only where the step released its cache
		// to fit (62 and 63 did, 58 did not): all 23 as on the device.
		for _, tr := range s.Trials {
			var b int64
			if _, err := fmt.Sscanf(tr.Spec, s.Cfg+":%d:", &b); err != nil {
				t.Fatalf("trial %q: %v", tr.Spec, err)
			}
			r, err := models.get(t, s.Cfg).Simulate(sim.Options{Batch: b, Height: s.Img, Width: s.Img, Eval: true, Capacity: s.CapacityBytes, EmptyCache: cmp.Or(s.Harness, ownHarness)})
			if err != nil {
				t.Fatal(err)
			}
			if r.Fits() != tr.OK {
				t.Errorf("%s batch %d under %d bytes, %s: fits %v, on the device %v", s.Cfg, b, s.CapacityBytes, cmp.Or(s.Harness, ownHarness), r.Fits(), tr.OK)
			}
		}
		if n != s.MaxBatch {
			t.Errorf("%s under %d bytes: max batch %d, the official code's %d", s.Cfg, s.CapacityBytes, n, s.MaxBatch)
		}
	}
	t.Log("\n" + table.String())
}
