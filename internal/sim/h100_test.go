package sim_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestH100CrossCheck compares the built-in models with steps measured on an
// NVIDIA H100 80GB HBM3 (torch 2.11.0+cu130, cuDNN 91900), each in a fresh
// process: twelve model steps of yolov9_segments.py --fresh
// (results/h100_big_steps.json: images of 704 to 1280, batch 96 and 128 at
// 640, float32 and AMP, 0 to 4 segments) and four eval steps of
// eval_step.py (results/h100_big_eval.json: batch 96 and 128 at 640, 32 at
// 960, 16 at 1280), the calls that conv_sweep_big.sh added to the cuDNN
// tables, run where the tables were not measured.
//
// The workspaces onnxmem looks up were measured on the H200. On the H100
// the requested peaks are the predicted ones within 2.2 KiB in fifteen of
// the sixteen steps, so cuDNN took workspaces of the same sizes there; in
// the sixteenth (yolov9-m AMP at batch 4 on 896) the measured request is
// 3.7 MiB below the prediction, one call's workspace. The allocated peaks
// are within 0.06%, the reserved ones within 0.9%. So the tables stand for
// an H100 with the same torch and cuDNN; for other cards or versions they
// are an assumption (docs/limitations.md, "Known gaps").
func TestH100CrossCheck(t *testing.T) {
	const mib = 1 << 20
	pct := func(got, want int64) float64 { return 100 * float64(got-want) / float64(want) }
	var table strings.Builder
	fmt.Fprintf(&table, "%-5s %-9s %4s %2s %5s %9s  %10s %7s  %10s  %8s\n", "step", "cfg", "prec", "k", "batch", "image",
		"peak MiB", "error", "req error", "reserved")
	check := func(what string, r *sim.Result, me map[string]int64, reqSlack int64) {
		if d := r.PeakRequested - me["peak_req"]; d < -reqSlack || d > reqSlack {
			t.Errorf("%s: requested peak %d, measured %d", what, r.PeakRequested, me["peak_req"])
		}
		if e := pct(r.Peak, me["peak"]); e > 0.1 || e < -0.1 {
			t.Errorf("%s: peak %+.3f%%, beyond 0.1%%", what, e)
		}
		if e := pct(r.PeakReserved, me["peak_reserved"]); e > 1 || e < -1 {
			t.Errorf("%s: reserved at the peak %+.2f%%, beyond 1%%", what, e)
		}
	}
	models := builtins{}
	steps := ownRuns(t, "h100_big_steps.json")
	for _, s := range steps {
		r := s.simulate(t, models)
		prec := map[bool]string{false: "fp32", true: "amp"}[s.AMP]
		what := fmt.Sprintf("h100_big_steps.json: %s %s segments %d batch %d at %d", s.Cfg, prec, s.Segments, s.Batch, s.Img)
		// One call of yolov9-m's took another algorithm on the H100.
		slack := int64(512)
		if s.Cfg == "yolov9-m" && s.AMP && s.Img == 896 {
			slack = 4 << 20
		}
		check(what, r, s.Result, slack)
		fmt.Fprintf(&table, "%-5s %-9s %4s %2d %5d %4dx%-4d  %10.1f %+6.2f%%  %+8d B  %+7.2f%%\n", "model", s.Cfg, prec, s.Segments, s.Batch, s.Img, s.Img,
			float64(s.Result["peak"])/mib, pct(r.Peak, s.Result["peak"]), r.PeakRequested-s.Result["peak_req"], pct(r.PeakReserved, s.Result["peak_reserved"]))
	}
	for _, s := range h100Evals(t) {
		m := models.get(t, s.Cfg)
		r, err := m.Simulate(sim.Options{Batch: s.Batch, Height: s.ImgH, Width: s.ImgW, Eval: true, EmptyCache: ownHarness})
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("h100_big_eval.json: %s batch %d at %dx%d", s.Cfg, s.Batch, s.ImgH, s.ImgW), r, s.Result, 4096)
		fmt.Fprintf(&table, "%-5s %-9s %4s %2d %5d %4dx%-4d  %10.1f %+6.2f%%  %+8d B  %+7.2f%%\n", "eval", s.Cfg, "half", 0, s.Batch, s.ImgH, s.ImgW,
			float64(s.Result["peak"])/mib, pct(r.Peak, s.Result["peak"]), r.PeakRequested-s.Result["peak_req"], pct(r.PeakReserved, s.Result["peak_reserved"]))
	}
	t.Log("\n" + table.String())
}

// h100Evals returns the eval steps of results/h100_big_eval.json that ran,
// failing the test when the file was not measured on an H100 and naming
// the scenarios that failed.
func h100Evals(t *testing.T) []evalRun {
	t.Helper()
	gpu, evals := scenarioFile[evalRun](t, "h100_big_eval.json")
	if !strings.Contains(gpu, "H100") {
		t.Fatalf("h100_big_eval.json: measured on %q, want an H100", gpu)
	}
	var ran []evalRun
	for _, s := range evals {
		if s.Error != "" {
			t.Errorf("h100_big_eval.json: a scenario failed: %s", s.Error)
			continue
		}
		ran = append(ran, s)
	}
	return ran
}
