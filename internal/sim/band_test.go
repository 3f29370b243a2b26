package sim_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// bandResult is one measured step against the band onnxmem reports for a
// card whose cuDNN workspaces were not measured.
type bandResult struct {
	card, kind, what string
	measured         int64
	bottom, top      int64 // the allocated peaks without workspaces, with the H200's
}

// bandCheck simulates step twice, with the H200's measured workspaces (the
// top of the band, as the step's own test simulates it) and with none
// (Options.NoConvWorkspace, the bottom), holds the measured allocated peak
// to [min·(1−tol) − floor, max·(1+tol) + floor] where floor is slack
// applied only when it exceeds the relative tolerance (the 8 MiB noise
// floor some tests grant), and returns the comparison.
func bandCheck(t *testing.T, m *sim.Model, step sim.Options, card, kind, what string, me int64, tol float64, floor int64) bandResult {
	t.Helper()
	top, err := m.Simulate(step)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	step.NoConvWorkspace = true
	bottom, err := m.Simulate(step)
	if err != nil {
		t.Fatalf("%s, no workspaces: %v", what, err)
	}
	r := bandResult{card: card, kind: kind, what: what, measured: me, bottom: bottom.Peak, top: top.Peak}
	lo, hi := min(r.bottom, r.top), max(r.bottom, r.top)
	loLim := lo - max(int64(tol*float64(lo)), floor)
	hiLim := hi + max(int64(tol*float64(hi)), floor)
	if me < loLim || me > hiLim {
		t.Errorf("%s %s %s: measured peak %d outside the band [%d, %d] (bottom %d, top %d) widened by %.2f%% (floor %d MiB)",
			card, kind, what, me, loLim, hiLim, r.bottom, r.top, 100*tol, floor>>20)
	}
	return r
}

// TestBandHoldsMeasured checks issue 34: on the H100 and the H200, the band
// onnxmem reports for a card whose cuDNN workspaces were not measured must
// hold every measured step. The band runs from the allocated peak with no
// convolution workspace at all (Options.NoConvWorkspace, the bottom: cuDNN
// always has an engine that needs none) to the peak with the H200's
// measured workspaces (the top). Each step is simulated both ways, as its
// own test simulates it, and its measured allocated peak must lie in
// [min(bottom, top), max(bottom, top)] widened by the tolerance that test
// holds the prediction to: for the ground truth's YOLOv9 model and eval
// steps max(1%, 8 MiB), its train steps 2% (the product's target), its
// torchvision model steps 3%, and the H100's model and eval steps of
// TestH100CrossCheck 0.1%. So the band is not merely a guess for an
// unmeasured card: on the two cards measured, the truth lies in it as
// closely as the prediction itself lies to the truth.
//
// The edges are taken as min and max because the bottom is not always the
// lower: in about a third of the steps the peak without workspaces is the
// higher one (by up to 0.4%, 85 MiB, for yolov9-s at batch 32), with the
// same requested peak, at the end of the forward where no workspace is
// live. Allocated bytes count whole blocks, and without the workspaces'
// blocks the caching allocator places the tensors in other ones. The test
// logs how many steps lie strictly inside the band, the widest band, and
// per card and kind the count and the farthest a measured peak lies
// outside.
func TestBandHoldsMeasured(t *testing.T) {
	const mib = 1 << 20
	var results []bandResult
	add := func(r bandResult) { results = append(results, r) }
	prec := func(amp bool) string { return map[bool]string{false: "fp32", true: "amp"}[amp] }

	// The H100's model and eval steps (calibration/results, no ../shared
	// needed), simulated as TestH100CrossCheck does.
	t.Run("h100", func(t *testing.T) {
		models := builtins{}
		for _, s := range ownRuns(t, "h100_big_steps.json") {
			// The scenario of ownRun.simulate.
			sc := sim.Options{Batch: s.Batch, Height: s.Img, Width: s.Img, AMP: s.AMP, Half: s.Half,
				Segments: s.Segments, AllocConf: s.AllocConf, EmptyCache: ownHarness}
			what := fmt.Sprintf("%s %s segments %d batch %d at %d", s.Cfg, prec(s.AMP), s.Segments, s.Batch, s.Img)
			add(bandCheck(t, models.get(t, s.Cfg), sc, "H100", "model_step", what, s.Result["peak"], 0.001, 0))
		}
		for _, s := range h100Evals(t) {
			sc := sim.Options{Batch: s.Batch, Height: s.ImgH, Width: s.ImgW, Eval: true, EmptyCache: ownHarness}
			what := fmt.Sprintf("%s batch %d at %dx%d", s.Cfg, s.Batch, s.ImgH, s.ImgW)
			add(bandCheck(t, models.get(t, s.Cfg), sc, "H100", "eval_step", what, s.Result["peak"], 0.001, 0))
		}
	})

	// The H100's torchvision model steps (torchvision_new.jsonl), within
	// 3% as TestTorchvisionNewModelSteps holds them.
	t.Run("h100 torchvision", func(t *testing.T) {
		bandTorchvision(t, "H100", jsonLines[torchvisionLine](t, "torchvision_new.jsonl"), measured.Path, add)
	})

	// The H200 ground truth's YOLOv9 steps, as TestCalibrationModelStep,
	// TestCalibrationEvalStep and TestCalibrationTrainStep simulate them.
	t.Run("h200 groundtruth", func(t *testing.T) {
		calibrations(t, "model_step", func(l calibrationLine, m *sim.Model) {
			what := fmt.Sprintf("%s %s segments %d batch %d img %d", l.Cfg, prec(l.AMP), l.Segments, l.Batch, l.Img)
			add(bandCheck(t, m, l.scenario(), "H200", "model_step", what, l.Measured.Peak, toleranceFor(l).peak, 8*mib))
		})
		calibrations(t, "eval_step", func(l calibrationLine, m *sim.Model) {
			what := fmt.Sprintf("%s batch %d img %d", l.Cfg, l.Batch, l.Img)
			add(bandCheck(t, m, l.scenario(), "H200", "eval_step", what, l.Measured.Peak, 0.01, 8*mib))
		})
		calibrations(t, "train_step", func(l calibrationLine, m *sim.Model) {
			what := fmt.Sprintf("%s %s segments %d batch %d boxes %d %s ema=%v", l.Cfg, prec(l.AMP), l.Segments, l.Batch, l.Boxes, l.Optimizer, l.EMA)
			add(bandCheck(t, m, l.scenario(), "H200", "train_step", what, l.Measured.Peak, 0.02, 0))
		})
	})

	// The H200 ground truth's torchvision model steps, within 3% as
	// TestTorchvisionModelSteps holds them.
	t.Run("h200 groundtruth torchvision", func(t *testing.T) {
		b, err := os.ReadFile(onnxbuild.Shared(t, "groundtruth/torchvision.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		var lines []torchvisionLine
		for _, s := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			var l torchvisionLine
			if err := json.Unmarshal(s, &l); err != nil {
				t.Fatalf("torchvision.jsonl: %v", err)
			}
			lines = append(lines, l)
		}
		bandTorchvision(t, "H200", lines, func(model string) string { return onnxbuild.Shared(t, model) }, add)
	})

	if len(results) == 0 {
		return
	}
	// The summary: the band's width as a share of its larger edge; how far
	// a measured peak lies outside [min, max] as a share of the nearer edge,
	// signed (below the band negative).
	type counts struct {
		n, inside int
		out       float64
		outAt     string
	}
	byKind := map[string]*counts{}
	var kinds []string
	inside, above, below, flipped := 0, 0, 0, 0
	widest, widestAt := 0.0, ""
	for _, r := range results {
		lo, hi := min(r.bottom, r.top), max(r.bottom, r.top)
		key := r.card + " " + r.kind
		c := byKind[key]
		if c == nil {
			c = &counts{}
			byKind[key] = c
			kinds = append(kinds, key)
		}
		c.n++
		if r.bottom > r.top {
			flipped++
		}
		out := 0.0
		switch {
		case r.measured > lo && r.measured < hi:
			inside++
			c.inside++
		case r.measured >= hi:
			above++
			out = 100 * float64(r.measured-hi) / float64(hi)
		default:
			below++
			out = -100 * float64(lo-r.measured) / float64(lo)
		}
		if out*out > c.out*c.out {
			c.out, c.outAt = out, fmt.Sprintf("%s: measured %d, bottom %d, top %d", r.what, r.measured, r.bottom, r.top)
		}
		if w := 100 * float64(hi-lo) / float64(hi); w > widest {
			widest, widestAt = w, r.card+" "+r.kind+" "+r.what
		}
	}
	slices.Sort(kinds)
	var per strings.Builder
	for _, k := range kinds {
		c := byKind[k]
		fmt.Fprintf(&per, "  %-16s %4d steps, %4d strictly inside, farthest outside %+.3f%%", k, c.n, c.inside, c.out)
		if c.outAt != "" {
			fmt.Fprintf(&per, " (%s)", c.outAt)
		}
		per.WriteString("\n")
	}
	t.Logf("%d measured steps: %d strictly inside [min, max] of bottom and top, %d at or above it, %d at or below it; "+
		"the bottom above the top in %d; widest band %.2f%% of its larger edge (%s)\n%s",
		len(results), inside, above, below, flipped, widest, widestAt, per.String())
}

// bandTorchvision checks the model steps of torchvision lines (a model's
// sizes are skipped, as checkTorchvisionSteps skips them) against the band
// within 3%, the bound TestTorchvisionModelSteps and its siblings hold the
// prediction to, loading each model from path(l.Model) once.
func bandTorchvision(t *testing.T, card string, lines []torchvisionLine, path func(model string) string, add func(bandResult)) {
	t.Helper()
	models := map[string]*sim.Model{}
	n := 0
	for _, l := range lines {
		if l.Kind != "model_step" || l.Measured.Peak == 0 {
			continue
		}
		m := models[l.Model]
		if m == nil {
			var err error
			if m, err = sim.Load(path(l.Model)); err != nil {
				t.Fatal(err)
			}
			models[l.Model] = m
		}
		sc := sim.Options{Batch: l.Batch, Height: l.Img, Width: l.Img, AMP: l.AMP, Segments: l.Segments}
		what := fmt.Sprintf("%s %s batch %d", l.Cfg, map[bool]string{false: "fp32", true: "amp"}[l.AMP], l.Batch)
		add(bandCheck(t, m, sc, card, "torchvision", what, l.Measured.Peak, 0.03, 0))
		n++
	}
	if n == 0 {
		t.Errorf("%s: no torchvision model step", card)
	}
}
