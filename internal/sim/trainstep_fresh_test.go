package sim_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// trainStepRecord is one line of calibration/train_step.py's output: a
// train step in predict's format with what was measured.
type trainStepRecord struct {
	Cfg, Trainer  string
	Batch, Img    int64
	ImgH          int64 `json:"img_h"`
	ImgW          int64 `json:"img_w"`
	AMP           bool
	AMPDType      string `json:"amp_dtype"`
	Segments      int
	NC            int
	PrevPredAlive bool  `json:"prev_pred_alive"`
	Boxes         int64 `json:"boxes_per_img"`
	Optimizer     string
	EMA           bool
	Measured      struct {
		Peak         int64
		PeakReq      int64 `json:"peak_req"`
		PeakReserved int64 `json:"peak_reserved"`
		WarmSteps    int   `json:"warm_steps"`
	}
}

// jsonLines reads a file of calibration/results that holds one T a line.
func jsonLines[T any](t *testing.T, name string) []T {
	t.Helper()
	f, err := os.Open(measured.Path(name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return decodeLines[T](t, name, f)
}

// decodeLines decodes one T a line of r, the file name.
func decodeLines[T any](t *testing.T, name string, r io.Reader) []T {
	t.Helper()
	var out []T
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<28)
	for sc.Scan() {
		var l T
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

// scenario is the record's step as a Scenario, with the default warm steps.
func (l trainStepRecord) scenario() sim.Options {
	h, w := l.Img, l.Img
	if l.ImgH != 0 {
		h, w = l.ImgH, l.ImgW
	}
	return sim.Options{Batch: l.Batch, Height: h, Width: w, AMP: l.AMP, AMPDType: l.AMPDType, Segments: l.Segments, Train: true,
		Boxes: l.Boxes, Optimizer: sim.Optimizer(l.Optimizer), EMA: l.EMA, Trainer: l.Trainer, PrevPredAlive: l.PrevPredAlive}
}

// TestTrainStepFresh replays calibration/train_step.py: train steps of the
// official YOLOv9 code measured as the ground truth measures them (the
// model, its EMA, SGD, GradScaler and the loss resident; warm-up steps
// until the optimizer has state, then the measured step; 16 boxes an
// image), each in a fresh process, for yolov9-t, -s, -m, -c, -e and
// gelan-c (train.py's loss), fp32 and AMP. The ground truth's train
// steps are yolov9-s and yolov9-c only, taken one after another in one
// process; fresh, the first of them (yolov9-s at batch 1, fp32) reserves
// what onnxmem predicts for a fresh process to the byte, where the ground
// truth's process read 5.1% less. The allocated peak is within 0.3% of
// each measured one; the reserved peak the measured one to the byte in 11
// of 14 and within 0.9% in all (yolov9-e under AMP at batch 2 read 3.1%
// low until the warm-up ran the iterations GradScaler skips,
// DefaultAMPWarmSteps). train_step_more.jsonl (2026-12-05) adds 17 more:
// small AMP batches of every YOLOv9 and GELAN size, AdamW, no EMA, 4 and 64
// boxes, where GradScaler skipped 3 to 9 iterations: allocated within
// 0.02%, reserved to the byte in 13 (yolov9-e at batch 8 0.42% high), all
// with the default warm steps.
func TestTrainStepFresh(t *testing.T) {
	models := builtins{}
	var table strings.Builder
	fmt.Fprintf(&table, "%-9s %5s %5s  %10s %8s  %10s %8s\n", "cfg", "prec", "batch", "peak MiB", "error", "reserved", "error")
	n, exact := 0, 0
	worst := 0.0
	for _, file := range []string{"train_step.jsonl", "train_step_more.jsonl"} {
		for _, l := range jsonLines[trainStepRecord](t, file) {
			r, err := models.get(t, l.Cfg).Simulate(l.scenario())
			if err != nil {
				t.Fatalf("%s batch %d: %v", l.Cfg, l.Batch, err)
			}
			pct := func(got, want int64) float64 { return 100 * float64(got-want) / float64(want) }
			prec := map[bool]string{false: "fp32", true: "amp"}[l.AMP]
			me := l.Measured
			fmt.Fprintf(&table, "%-9s %5s %5d  %10.1f %+7.2f%%  %10.1f %+7.2f%%\n", l.Cfg, prec, l.Batch,
				float64(me.Peak)/(1<<20), pct(r.Peak, me.Peak), float64(me.PeakReserved)/(1<<20), pct(r.PeakReserved, me.PeakReserved))
			if e := pct(r.Peak, me.Peak); e > 0.3 || e < -0.3 {
				t.Errorf("%s %s batch %d: allocated peak %+.2f%%, beyond 0.3%%", l.Cfg, prec, l.Batch, e)
			}
			e := pct(r.PeakReserved, me.PeakReserved)
			worst = max(worst, e, -e)
			if r.PeakReserved == me.PeakReserved {
				exact++
			}
			n++
		}
	}
	t.Logf("%d fresh train steps: reserved peak %d to the byte, the worst %.2f%%\n%s", n, exact, worst, table.String())
	// 24 to the byte before the head's stride and DFL weights became
	// residents (calibration §29: the official model's memory after
	// loading to the byte); two steps then came one 2 MiB small segment
	// short and one to the byte.
	if n != 31 || exact < 23 || worst > 1 {
		t.Errorf("want 31 steps, the reserved peak to the byte in at least 23 and within 1%% in all")
	}
}

// TestWarmStepsSettle checks what DefaultAMPWarmSteps rests on: the cache
// that the iterations GradScaler skips leave settles after two of them.
// calibration/train_step.py's yolov9-e under AMP at batch 2 skipped 7
// before the step that made the optimizer's state; its measured step
// reserved 3,867,148,288 bytes. Simulated with 0 or 1 skipped iterations
// the reserved peak reads 3.1% and 2.9% low; with 2 to 7 it is the same,
// within one small segment of the measured one.
func TestWarmStepsSettle(t *testing.T) {
	m, err := sim.Builtin("yolov9-e")
	if err != nil {
		t.Fatal(err)
	}
	// Within one small segment (2 MiB): the model's small tensors beyond
	// the graph (the head's stride and DFL weights, calibration §29) leave
	// the small pool one segment short of the device's.
	const measured, segment = 3867148288, 2 << 20
	near := func(r int64) bool { return r <= measured && r >= measured-segment }
	var settled int64
	for w := 1; w <= 8; w++ {
		r, err := m.Simulate(sim.Options{Batch: 2, Height: 640, Width: 640, AMP: true, Train: true, Boxes: 16, EMA: true, WarmSteps: w})
		if err != nil {
			t.Fatal(err)
		}
		if w == 3 {
			settled = r.PeakReserved
		}
		if ok := near(r.PeakReserved) && (w < 3 || r.PeakReserved == settled); ok != (w >= 3) {
			t.Errorf("warm steps %d: reserved peak %d, measured %d", w, r.PeakReserved, int64(measured))
		}
	}
	r, err := m.Simulate(sim.Options{Batch: 2, Height: 640, Width: 640, AMP: true, Train: true, Boxes: 16, EMA: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.PeakReserved != settled {
		t.Errorf("default warm steps: reserved peak %d, settled at %d (measured %d)", r.PeakReserved, settled, int64(measured))
	}
}

// TestWarmStepsCombinations runs the skipped warm-up iterations with what
// else a train step can carry: the previous iteration's outputs alive
// (their buffers pass from one iteration to the next), checkpoint
// segments (the recomputation runs in each), per-image box counts, and a
// limit that the warm-up already crosses, which ends the step out of
// memory instead of failing. The default under float16 AMP is
// DefaultAMPWarmSteps, and the skipped iterations leave the measured
// step's requested peak as it is: they move only where its blocks fall.
func TestWarmStepsCombinations(t *testing.T) {
	m, err := sim.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	base := sim.Options{Batch: 4, Height: 320, Width: 320, AMP: true, Train: true, BoxCounts: []int64{3, 0, 9, 1},
		EMA: true, PrevPredAlive: true, Segments: 2}
	def, err := m.Simulate(base)
	if err != nil {
		t.Fatal(err)
	}
	explicit := base
	explicit.WarmSteps = sim.DefaultAMPWarmSteps
	r, err := m.Simulate(explicit)
	if err != nil {
		t.Fatal(err)
	}
	if r.Peak != def.Peak || r.PeakReserved != def.PeakReserved {
		t.Errorf("warm steps %d: peak %d, reserved %d; the default's %d, %d", sim.DefaultAMPWarmSteps, r.Peak, r.PeakReserved, def.Peak, def.PeakReserved)
	}
	one := base
	one.WarmSteps = 1
	r1, err := m.Simulate(one)
	if err != nil {
		t.Fatal(err)
	}
	if d := def.PeakRequested - r1.PeakRequested; d != 0 {
		t.Errorf("skipped iterations moved the measured step's requested peak by %d bytes", d)
	}
	capped := base
	capped.Capacity = 64 << 20
	rc, err := m.Simulate(capped)
	if err != nil {
		t.Fatal(err)
	}
	if !rc.OOM {
		t.Errorf("a 64 MiB limit: the step ran (reserved %d)", rc.PeakReserved)
	}
}

// TestWarmStepsUsed checks the warm steps a scenario simulates: its own,
// or the default of its precision; none for a step that is not a train
// step.
func TestWarmStepsUsed(t *testing.T) {
	for _, c := range []struct {
		sc   sim.Options
		want int
	}{
		{sim.Options{Train: true, AMP: true}, sim.DefaultAMPWarmSteps},
		{sim.Options{Train: true, AMP: true, AMPDType: "bfloat16"}, 1},
		{sim.Options{Train: true}, 1},
		{sim.Options{Train: true, AMP: true, WarmSteps: 2}, 2},
		{sim.Options{Train: true, AMP: true, WarmSteps: 1}, 1},
		{sim.Options{AMP: true}, 0},
	} {
		if got := c.sc.WarmStepsUsed(); got != c.want {
			t.Errorf("%+v: %d warm steps, want %d", c.sc, got, c.want)
		}
	}
}
