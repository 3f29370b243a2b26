package sim_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
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
	}
	var steps []step
	for _, file := range []string{"eval_official.json", "eval_official_segments.json", "eval_official_sweep.json"} {
		b, err := measured.Read(file)
		if err != nil {
			t.Fatal(err)
		}
		var more []step
		if err := json.Unmarshal(b, &more); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		steps = append(steps, more...)
	}
	pct := func(got, want int64) float64 { return 100 * float64(got-want) / float64(want) }
	models := builtins{}
	var table strings.Builder
	for _, s := range steps {
		r, err := models.get(t, s.Cfg).Simulate(sim.Options{Batch: s.B, Height: s.H, Width: s.W, Eval: true, EmptyCache: ownHarness})
		if err != nil {
			t.Fatal(err)
		}
		p, res := pct(r.Peak, s.Peak), pct(r.PeakReserved, s.PeakReserved)
		fmt.Fprintf(&table, "%-9s %3d %4dx%-4d  peak %+6.2f%%  reserved %+6.2f%%\n", s.Cfg, s.B, s.H, s.W, p, res)
		tol, ptol := 1.0, 0.1
		switch {
		case s.Cfg == "yolov9-t" && s.B == 61:
			// The warm-up leaves other segments than the official run's
			// at 61 (calibration §22), 3.3% more reserved; open in
			// issue 35.
			tol = 3.5
		case s.Cfg == "yolov9-s" && s.B == 64 && s.H == 672 && s.W == 448, s.Cfg == "yolov9-m" && s.B == 2, s.Cfg == "gelan-t" && s.B == 2:
			// The sweep's three reserved misses, one segment each
			// (-4.3%, +3.2%, -2.0%; calibration §23): open.
			tol = 4.5
		case s.Cfg == "gelan-e" && s.B == 2:
			ptol = 0.2 // +0.19%: the DFL's transient at the smallest batch
		}
		if p > ptol || p < -ptol || res > tol || res < -tol {
			t.Errorf("%s batch %d at %dx%d: peak %+.2f%%, reserved %+.2f%% against the official code", s.Cfg, s.B, s.H, s.W, p, res)
		}
	}
	if len(steps) != 50 {
		t.Errorf("%d eval steps, want the 8 of eval_official.json, the 2 of eval_official_segments.json and the 40 of eval_official_sweep.json", len(steps))
	}
	b, err := measured.Read("eval_official_maxbatch.json")
	if err != nil {
		t.Fatal(err)
	}
	var searches []struct {
		Cfg           string
		Img           int64
		CapacityBytes int64 `json:"capacity_bytes"`
		MaxBatch      int64 `json:"max_batch"`
	}
	if err := json.Unmarshal(b, &searches); err != nil {
		t.Fatal(err)
	}
	for _, s := range searches {
		n, _, err := models.get(t, s.Cfg).MaxBatch(sim.Options{Height: s.Img, Width: s.Img, Eval: true, EmptyCache: ownHarness}, s.CapacityBytes, 1024)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&table, "%-9s max batch under %d bytes: %d, measured %d\n", s.Cfg, s.CapacityBytes, n, s.MaxBatch)
		if n != s.MaxBatch {
			t.Errorf("%s under %d bytes: max batch %d, the official code's %d", s.Cfg, s.CapacityBytes, n, s.MaxBatch)
		}
	}
	t.Log("\n" + table.String())
}
