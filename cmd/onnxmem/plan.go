package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/onnxmem/onnxmem/onnxmem"
)

func cmdPlan(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("plan",
		"onnxmem plan [-batch N] [-img N] [-budget GiB | -device NAME|SIZE] [-step run|train|model] [-data FILE.yaml] [-amp|-half] [-train [-boxes N] [-optimizer NAME] [-ema=false] [-warm-steps N]]\n"+
			"             [-alloc-conf OPTS] [-json|-csv] MODEL.onnx",
		"By default, for a YOLOv9 model, the step is train_dual.py's at its run's densest\niteration (AMP, SGD, EMA; the box counts of the iteration whose densest image\ncarries the most boxes, on -data's dataset or the built-in COCO-like one);\n-step model, train or eval names another.\nPlan finds the checkpoint plan that lets the step fit with the fewest\n"+
			"recomputed FLOPs: the ranges of top-level layers to run under\n"+
			"torch.utils.checkpoint.checkpoint(use_reentrant=False). It fits in the same sense\n"+
			"as everywhere else: the step runs to its end under the caching allocator's limit\n"+
			"(-budget GiB, or the card of -device). The search simulates every candidate:\n"+
			"checkpoint_sequential's plans and one range per layer as the start, then a\n"+
			"descent that takes layers out while the step fits (onnxmem.Model.Plan). Feed\n"+
			"the plan back with -checkpoint wherever a command takes a step. A limit no plan\n"+
			"meets is an error that says the lowest peak reachable. -csv writes the -json\n"+
			"fields as one CSV row, the plan as its -checkpoint ranges.",
		"onnxmem plan -batch 16 -amp -train -budget 12 yolov9-c")
	batch := f.positive("batch", 16, "batch `size`")
	img, set := f.imgFlag(), f.stepFlags()
	step, data := f.runStepFlags()
	limits := f.limitFlags()
	asJSON, asCSV := f.jsonFlag(), f.csvFlag()
	f.familyFlag()
	m, code, ok := f.parseAndLoad(args, stdout, stderr)
	if !ok {
		return code
	}
	st, err := set()
	if err == nil {
		st, m, err = f.runDefault(m, st, *step, *data)
	}
	if err != nil {
		return f.usageError(stderr, "%v", err)
	}
	if st.Segments > 1 || len(st.Checkpoint) > 0 {
		return f.usageError(stderr, "-segments and -checkpoint do not apply: plan makes the checkpoint plan")
	}
	if !f.isSet("budget") && !f.isSet("device") {
		return f.usageError(stderr, "give the limit to fit under: -budget GiB or -device NAME|SIZE")
	}
	c, err := limits()
	if err != nil {
		return f.usageError(stderr, "%v", err)
	}
	sc := c.scenario(st.scenario(*batch, *img))
	if st.Run != nil {
		if err := st.Run.Err(); err != nil {
			return fail(stderr, err)
		}
	}
	p, err := m.Plan(sc)
	if err != nil {
		var np *onnxmem.ErrNoPlan
		if errors.As(err, &np) {
			return fail(stderr, fmt.Errorf("%v (limit: %s)", err, c.limitText()))
		}
		return fail(stderr, err)
	}
	// The best checkpoint_sequential that fits, for comparison.
	bestK, bestKFLOPs := 0, int64(-1)
	for k := 2; k <= m.Layers() && len(p.Ranges) > 0; k++ {
		s := sc
		s.Segments = k
		_, ok, err := m.Fit(s)
		if err != nil {
			return fail(stderr, err)
		}
		if !ok {
			continue
		}
		cost, err := m.Cost(s)
		if err != nil {
			return fail(stderr, err)
		}
		if bestKFLOPs < 0 || cost.Recompute < bestKFLOPs {
			bestK, bestKFLOPs = k, cost.Recompute
		}
	}
	if *asJSON || *asCSV {
		js := planJSON{Model: m.Name, Limit: c.limit(), Device: deviceName(c.device), Plan: [][2]int{}, Peak: p.Result.Peak,
			PeakReserved: p.Result.PeakReserved, RecomputeFLOPs: p.RecomputeFLOPs, ForwardFLOPs: p.ForwardFLOPs,
			Fits: p.Fits, Checkpoint: rangesFlag(p.Ranges), Simulations: p.Simulations}
		for _, r := range p.Ranges {
			js.Plan = append(js.Plan, [2]int{r.From, r.To - 1})
		}
		if bestK > 0 {
			js.BestSequential = &sequentialJSON{Segments: bestK, RecomputeFLOPs: bestKFLOPs}
		}
		if *asCSV {
			return exit(stderr, writeCSV(stdout, []planJSON{js}))
		}
		return exit(stderr, writeJSON(stdout, js))
	}
	r := p.Result
	fmt.Fprintf(stdout, "%s, batch %d\nlimit   %s\n", stepTitle(m, r.Scenario), *batch, c.limitText())
	if len(p.Ranges) == 0 {
		fmt.Fprintf(stdout, "plan    none: the step fits without checkpointing (peak %s GiB allocated, %s GiB reserved)\n", gib(r.Peak), gib(r.PeakReserved))
		st.printNote(stdout)
		return 0
	}
	pct := func(n int64) float64 { return 100 * float64(n) / float64(p.ForwardFLOPs) }
	fmt.Fprintf(stdout, "plan    checkpoint layers %s (-checkpoint %s)\n", rangesFlag(p.Ranges), rangesFlag(p.Ranges))
	fmt.Fprintf(stdout, "peak    %s GiB allocated, %s GiB reserved: fits\n", gib(r.Peak), gib(r.PeakReserved))
	if r.PeakReserved > c.limit() {
		fmt.Fprintf(stdout, "        (it would reserve more than the limit without one; under it the allocator releases its cache and retries, as PyTorch does)\n")
	}
	if c.banded() {
		// The plan, searched with the H200's workspaces, with none.
		_, _, verdict, err := c.verdict(m, r.Scenario)
		if err != nil {
			return fail(stderr, err)
		}
		sure := "it fits with none too: sure"
		if verdict != "yes" {
			sure = "with none it does not: not sure"
		}
		fmt.Fprintf(stdout, "band    %s's cuDNN workspaces were not measured; the plan fits with the H200's, %s\n", c.device.Name, sure)
	}
	fmt.Fprintf(stdout, "cost    recomputes %.1f%% of the forward's FLOPs (%.1f GFLOP)\n", pct(p.RecomputeFLOPs), float64(p.RecomputeFLOPs)/1e9)
	if bestK > 0 {
		fmt.Fprintf(stdout, "against checkpoint_sequential: the cheapest that fits, %d segments, recomputes %.1f%%\n", bestK, pct(bestKFLOPs))
	}
	fmt.Fprintf(stdout, "search  %d simulations\n", p.Simulations)
	if note := segmentsNote(m.Family); note != "" {
		fmt.Fprintf(stdout, "note    %s\n", strings.ReplaceAll(note, "\n", "\n        "))
	}
	st.printNote(stdout)
	return 0
}

// planJSON is plan -json's output: plan holds inclusive [first, last]
// layer ranges; checkpoint the same as -checkpoint takes it.
type planJSON struct {
	Model          string          `json:"model"`
	Device         string          `json:"device,omitempty"`
	Limit          int64           `json:"limit_bytes"`
	Plan           [][2]int        `json:"plan"`
	Checkpoint     string          `json:"checkpoint"`
	Peak           int64           `json:"peak"`
	PeakReserved   int64           `json:"peak_reserved"`
	RecomputeFLOPs int64           `json:"recompute_flops"`
	ForwardFLOPs   int64           `json:"forward_flops"`
	Fits           bool            `json:"fits"`
	BestSequential *sequentialJSON `json:"best_sequential,omitempty"`
	Simulations    int             `json:"simulations"`
}

type sequentialJSON struct {
	Segments       int   `json:"segments"`
	RecomputeFLOPs int64 `json:"recompute_flops"`
}
