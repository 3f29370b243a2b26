package sim_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestTrainStepFields replays calibration/train_step.py's train steps with
// the ground truth's other scenario fields (results/train_step_fields.jsonl,
// each in a fresh process of the official code): images of 320 to 1280 and
// a rectangle, checkpoint segments (the layer loop cut as
// checkpoint_sequential cuts it), nc, autocast to bfloat16 and the previous
// iteration's pred alive into the next forward. Measured on the H200
// (2026-12-05): every requested peak is the predicted one within 440 bytes,
// so the program (workspaces, the loss's tensors for the image's anchors and
// nc classes, the recomputation, the carried pred) is the real one; the
// allocated peaks are within 0.15%. The reserved peaks are the measured ones
// to the byte in 8 of 17, within 0.2% in 14, and within 2.3% in all: the
// rectangle (yolov9-s 384×640) −2.3%, yolov9-c with the previous pred alive
// +2.0%, gelan-c with two segments +1.8%, each moved by where the
// iterations GradScaler skipped left the cache's blocks (the rectangle's is
// +0.2% with one warm-up iteration, −2.3% with 2 to 9).
func TestTrainStepFields(t *testing.T) {
	built := builtins{}
	pct := func(got, want int64) float64 { return 100 * float64(got-want) / float64(want) }
	var table strings.Builder
	fmt.Fprintf(&table, "%-9s %5s %5s %9s %2s %3s %5s  %10s %8s  %10s  %10s %8s\n", "cfg", "prec", "batch", "image", "k", "nc", "prev",
		"peak MiB", "error", "req error", "reserved", "error")
	var reserved []float64
	exact := 0
	for _, l := range jsonLines[trainStepRecord](t, "train_step_fields.jsonl") {
		m := built.classes(t, l.Cfg, l.NC)
		s := l.scenario()
		h, w := s.Height, s.Width
		r, err := m.Simulate(s)
		if err != nil {
			t.Fatalf("%s batch %d: %v", l.Cfg, l.Batch, err)
		}
		prec := map[bool]string{false: "fp32", true: "amp"}[l.AMP]
		if l.AMPDType == "bfloat16" {
			prec = "bf16"
		}
		me := l.Measured
		what := fmt.Sprintf("%s %s batch %d %dx%d k%d nc %d prev %v", l.Cfg, prec, l.Batch, h, w, l.Segments, l.NC, l.PrevPredAlive)
		fmt.Fprintf(&table, "%-9s %5s %5d %4dx%-4d %2d %3d %5v  %10.1f %+7.2f%%  %+8d B  %10.1f %+7.2f%%\n", l.Cfg, prec, l.Batch, h, w, l.Segments, l.NC, l.PrevPredAlive,
			float64(me.Peak)/(1<<20), pct(r.Peak, me.Peak), r.PeakRequested-me.PeakReq, float64(me.PeakReserved)/(1<<20), pct(r.PeakReserved, me.PeakReserved))
		if d := r.PeakRequested - me.PeakReq; d < -512 || d > 512 {
			t.Errorf("%s: requested peak %d, measured %d", what, r.PeakRequested, me.PeakReq)
		}
		if e := pct(r.Peak, me.Peak); e > 0.3 || e < -0.3 {
			t.Errorf("%s: allocated peak %+.2f%%, beyond 0.3%%", what, e)
		}
		e := pct(r.PeakReserved, me.PeakReserved)
		if e > 3 || e < -3 {
			t.Errorf("%s: reserved peak %+.2f%%, beyond 3%%", what, e)
		}
		reserved = append(reserved, max(e, -e))
		if r.PeakReserved == me.PeakReserved {
			exact++
		}
	}
	t.Logf("%d fresh train steps with other fields, %d reserving the measured bytes exactly\n%s", len(reserved), exact, table.String())
	if len(reserved) != 17 {
		t.Fatalf("train_step_fields.jsonl: %d steps, want 17", len(reserved))
	}
	if slices.Sort(reserved); reserved[len(reserved)/2] > 1 {
		t.Errorf("reserved peaks: median error %.2f%%, beyond 1%%", reserved[len(reserved)/2])
	}
}
