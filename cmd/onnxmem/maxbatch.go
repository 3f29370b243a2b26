package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/onnxmem/onnxmem/family/yolov9/dataset"
	"github.com/onnxmem/onnxmem/onnxmem"
)

func cmdMaxBatch(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("maxbatch",
		"onnxmem maxbatch [-img N] [-budget GiB | -device NAME] [-step run|train|eval|model] [-limit N | -for-batch N] [-amp|-half] [-segments K] [-eval [-eval-float]] [-alloc-conf OPTS]\n"+
			"                        [-train [-boxes N] [-optimizer NAME] [-ema=false] [-warm-steps N]]\n"+
			"                        [-data FILE.yaml [-epochs E] [-iters N] [-seed S] [-workers N] [-close-mosaic N]] [-gpus N [-sync-bn]] [-json|-csv] MODEL.onnx",
		"Maxbatch finds the largest batch size, up to -limit, whose step fits: the model\n"+
			"step (fp32 unless -amp or -half, checkpointed with -segments), with -train a\n"+
			"full training step of train_dual.py, or with -eval its validation step (which\n"+
			"runs at twice the training batch). A step fits when it runs to its end under\n"+
			"the caching allocator's limit without running out of memory, as PyTorch runs\n"+
			"it: a request that would cross the limit first releases the cached segments\n"+
			"and retries. The limit is the card's usable memory with -device (its total\n"+
			"less the CUDA context: see onnxmem devices), or -budget GiB (80 without either),\n"+
			"what torch.cuda.set_per_process_memory_fraction sets.\n\n"+
			"With -for-batch N it answers another question: the fewest checkpoint segments\n"+
			"with which batch N fits. It tries 0, 2, 3, 4, 6, 8, 12, 16, … segments and the\n"+
			"number of top-level layers, the other settings as given.\n\n"+
			"With -data FILE.yaml (the YOLO data file train_dual.py's --data takes) it finds\n"+
			"the largest batch with which the whole training run completes on that dataset,\n"+
			"as onnxmem run -data simulates it: the setup, -epochs epochs (default 2) of its\n"+
			"training images, each epoch's validation at twice the batch and the checkpoint\n"+
			"save, in one process, under AMP unless -amp=false, each batch's images and\n"+
			"boxes as the official dataloader gives them (-workers, -close-mosaic). With\n"+
			"the built-in data, or over GPUs, they are drawn from -seed, and another draw\n"+
			"may move the answer by one. With -gpus N the run is DistributedDataParallel's over N cards\n"+
			"(see onnxmem run -h): the answer is the total batch, a multiple of N, with which\n"+
			"every rank's run completes.\n\n"+
			"-csv writes the answer as one CSV row (the -json fields, a result's prefixed\n"+
			"with result.), or with -for-batch one row for each segment count tried.",
		"onnxmem maxbatch -device a100-40 -amp yolov9-c")
	img, set, train, eval, ddp := f.imgFlag(), f.settingFlags(), f.trainFlags(), f.evalFlags(), f.ddpFlags()
	stepName := f.stepFlag()
	limits := f.limitFlags()
	limit := f.positive("limit", onnxmem.MaxBatchLimit, "largest batch `size` to consider")
	forBatch := f.Int64("for-batch", 0, "find the fewest checkpoint segments with which batch `N` fits, instead of the largest batch")
	data := f.String("data", "", "find the largest batch whose whole training run on the YOLO dataset of the data `FILE.yaml` completes")
	epochs := f.positive("epochs", runEpochs, "`E` epochs of a -data run (run's default, so that both answer alike)")
	iters := f.Int("iters", 0, "the first `N` iterations of each epoch of a -data run (default: all of them)")
	loader := loaderFlags(f, "`seed` of the run's box counts (without -data, or over -gpus)")
	asJSON, asCSV := f.jsonFlag(), f.csvFlag()
	f.familyFlag()
	path, code, ok := f.parseModel(args, false, stdout, stderr)
	if !ok {
		return code
	}
	st, err := set()
	if err == nil {
		st, err = train(st)
	}
	if err == nil {
		st, err = eval(st)
	}
	if err == nil {
		st, err = ddp(st)
	}
	if err == nil {
		err = st.warmNeedsAMP()
	}
	if err != nil {
		return f.usageError(stderr, "%v", err)
	}
	c, err := limits()
	switch {
	case err != nil:
		return f.usageError(stderr, "%v", err)
	case f.isSet("for-batch") && *forBatch < 1:
		return f.usageError(stderr, "-for-batch must be at least 1")
	case f.isSet("for-batch") && st.Eval:
		return f.usageError(stderr, "-for-batch finds checkpoint segments, and validation checkpoints nothing: drop -eval")
	case f.isSet("for-batch") && f.isSet("segments"):
		return f.usageError(stderr, "-for-batch tries the segments itself: drop -segments")
	case f.isSet("for-batch") && f.isSet("limit"):
		return f.usageError(stderr, "-limit bounds the search for the largest batch: it does not apply with -for-batch")
	}
	m, err := f.load(path)
	if err != nil {
		return fail(stderr, err)
	}
	if st.Train && !f.isSet("ema") {
		st.EMA = *f.ema // the family's default, which load set
	}
	// The whole run unless a step is named (-step, -train, -eval,
	// -for-batch, -half), for a family whose training script onnxmem runs.
	if *stepName != "" && (f.isSet("train") || f.isSet("eval")) {
		return f.usageError(stderr, "-step and -%s: give one", map[bool]string{true: "train", false: "eval"}[f.isSet("train")])
	}
	runMode := *data != "" || wantsRun(m, *stepName, st.Train || st.Eval || f.isSet("for-batch") || st.Half)
	if !runMode {
		for _, name := range []string{"epochs", "iters", "seed", "workers", "close-mosaic", "gpus", "sync-bn"} {
			if f.isSet(name) {
				return f.usageError(stderr, "-%s applies to a training run: drop -step, or add -data", name)
			}
		}
	} else {
		for _, name := range []string{"for-batch", "eval", "boxes", "warm-steps", "half"} {
			if f.isSet(name) {
				return f.usageError(stderr, "-%s does not apply to a whole training run (the default): add -step train, eval or model for one step", name)
			}
		}
		if *iters < 0 {
			return f.usageError(stderr, "-iters must be 0 (the whole epoch) or more")
		}
		st.Train, st.AMP = true, st.AMP || !f.isSet("amp")
		if !f.isSet("train") {
			st.Optimizer, st.EMA = "SGD", true
		}
		if *data != "" {
			if m, err = f.dataClasses(m, *data); err != nil {
				return fail(stderr, err)
			}
		}
		p := onnxmem.RunPlan{Epochs: int(*epochs), Iterations: *iters, Data: *data, GPUs: st.GPUs}
		if err := loader(&p); err != nil {
			return f.usageError(stderr, "%v", err)
		}
		return runMaxBatchCmd(m, c, st, *img, p, *limit, *asJSON, *asCSV, stdout, stderr)
	}
	switch *stepName {
	case "train":
		st.Train, st.Boxes, st.Optimizer, st.EMA = true, onnxmem.DefaultBoxes, "SGD", true
	case "eval":
		st.Eval = true
	}
	if *forBatch > 0 {
		return forBatchCmd(m, c, st, *forBatch, *img, *asJSON, *asCSV, stdout, stderr)
	}
	n, r, b, err := searchBand(c.scenario(st.scenario(1, *img)), c.banded(), *limit, m.MaxBatch)
	if err != nil {
		return fail(stderr, err)
	}
	if c.banded() && n > 0 {
		sc := c.scenario(st.scenario(1, *img))
		sc.Batch, sc.NoWorkspaces = n, true
		if b.low, err = m.Simulate(sc); err != nil {
			return fail(stderr, err)
		}
		b.high = r
	}
	if *asJSON || *asCSV {
		js := maxBatchJSON{Model: m.Name, Limit: *limit, MaxBatch: n, MaxBatchPossible: b.possiblePtr()}
		c.setJSON(&js.Budget, &js.Device)
		if r != nil {
			rj := newResultJSON(r, false)
			js.Result = &rj
		}
		if *asCSV {
			return exit(stderr, writeCSV(stdout, []maxBatchJSON{js}))
		}
		return exit(stderr, writeJSON(stdout, js))
	}
	c.printHeader(stdout, m, st.scenario(1, *img))
	if r == nil {
		// Say how far off batch 1 is.
		if r, _, err = c.fit(m, st.scenario(1, *img)); err != nil {
			return fail(stderr, err)
		}
		_, err = fmt.Fprintf(stdout, "max batch 0: not even batch 1 fits in %s; it %s\n", c.limitText(), c.needs(r))
	} else {
		fmt.Fprintf(stdout, "max batch %d: %s (%s)", n, c.uses(r), where(r))
		if n == *limit {
			fmt.Fprintf(stdout, "; the search stopped at -limit %d", *limit)
		}
		fmt.Fprint(stdout, b.text(c))
		if st.Eval {
			fmt.Fprintf(stdout, "\nthis is validation alone, next to the float32 model; train_dual.py validates at twice its training batch (%d here),\nin the training process beside the optimizer's state and the cache that training left: onnxmem run simulates that", n/2)
		}
		_, err = fmt.Fprintln(stdout)
	}
	return exit(stderr, err)
}

// forBatchCmd answers maxbatch -for-batch: the fewest checkpoint segments,
// of segmentCandidates, with which the batch fits.
func forBatchCmd(m *onnxmem.Model, c fitCriterion, st setting, batch int64, img imageSize, asJSON, asCSV bool, stdout, stderr io.Writer) int {
	ks := segmentCandidates(m.Layers())
	rs := make([]*onnxmem.Result, len(ks))
	fits := make([]bool, len(ks))
	verdicts := make([]string, len(ks))
	err := parallel(len(ks), func(i int) error {
		s := st
		s.Segments = ks[i]
		var err error
		rs[i], fits[i], verdicts[i], err = c.verdict(m, s.scenario(batch, img))
		return err
	})
	if err != nil {
		return fail(stderr, err)
	}
	first := slices.Index(fits, true) // the first that fits
	if asJSON || asCSV {
		js := forBatchJSON{Model: m.Name, Batch: batch}
		c.setJSON(&js.Budget, &js.Device)
		for i, r := range rs {
			js.Tried = append(js.Tried, triedJSON{Segments: ks[i], Peak: r.Peak, PeakReserved: r.PeakReserved, Fits: fits[i]})
			if i == first {
				rj := newResultJSON(r, false)
				js.Segments, js.Result = &ks[i], &rj
				break
			}
		}
		if asCSV {
			return exit(stderr, writeCSV(stdout, js.Tried))
		}
		return exit(stderr, writeJSON(stdout, js))
	}
	c.printHeader(stdout, m, st.scenario(batch, img))
	if first < 0 {
		least := 0 // the closest to fitting
		for i, r := range rs {
			if r.PeakReserved < rs[least].PeakReserved {
				least = i
			}
		}
		tried := make([]string, len(ks))
		for i, k := range ks {
			tried[i] = strconv.Itoa(k)
		}
		_, err = fmt.Fprintf(stdout, "batch %d does not fit in %s with any of %s checkpoint segments; the closest, %s, %s\n",
			batch, c.limitText(), strings.Join(tried, ", "), segmentsText(ks[least]), c.needs(rs[least]))
		return exit(stderr, err)
	}
	// What it uses of the limit is the run under the limit.
	s := st
	s.Segments = ks[first]
	r, err := m.Simulate(c.scenario(s.scenario(batch, img)))
	if err != nil {
		return fail(stderr, err)
	}
	how := "without checkpointing"
	if ks[first] > 1 {
		how = fmt.Sprintf("with %d checkpoint segments, the fewest", ks[first])
	}
	fmt.Fprintf(stdout, "batch %d fits %s: %s (%s)\n", batch, how, c.uses(r), where(r))
	if c.banded() {
		sure := "sure: it fits with any cuDNN workspace from none to the H200's"
		if verdicts[first] != "yes" {
			sure = "not sure: with cuDNN workspaces from none to the H200's, it fits with one of the two only"
		}
		fmt.Fprintf(stdout, "band   %s's cuDNN workspaces were not measured; that answer is %s\n", c.device.Name, sure)
	}
	return exit(stderr, err)
}

// segmentCandidates are the segment counts -for-batch tries, in order, for
// a model of n top-level layers: 0 (no checkpointing), then 2, 3, 4, 6, 8,
// 12, 16, … (powers of two and three times them) up to n, and n itself.
func segmentCandidates(n int) []int {
	ks := []int{0}
	for p := 2; p <= n; p *= 2 {
		ks = append(ks, p)
		if q := p + p/2; q <= n {
			ks = append(ks, q)
		}
	}
	if n > 1 && ks[len(ks)-1] != n {
		ks = append(ks, n)
	}
	return ks
}

// segmentsText names a segment count in prose.
func segmentsText(k int) string {
	if k > 1 {
		return fmt.Sprintf("with %d segments", k)
	}
	return "without checkpointing"
}

// fitCriterion is the limit a step must fit under: a device's usable
// memory, or a budget given in GiB. Either is the caching allocator's
// limit, as torch.cuda.set_per_process_memory_fraction sets it; a step fits
// when it runs under it without running out of memory (Result.Fits).
type fitCriterion struct {
	device *onnxmem.Device
	budget int64 // bytes, without a device
}

// limit is the allocator's limit in bytes.
func (c fitCriterion) limit() int64 {
	if c.device != nil {
		return c.device.Usable()
	}
	return c.budget
}

// scenario is a scenario as run under the limit: on a device, with its
// cuBLAS workspace too.
func (c fitCriterion) scenario(sc onnxmem.Scenario) onnxmem.Scenario {
	if c.device != nil {
		sc.Device = c.device.Name
		return sc
	}
	sc.Capacity = c.budget
	return sc
}

// fit simulates sc without a limit, for its figures, and says whether it
// fits under the limit (onnxmem.Model.Fit).
func (c fitCriterion) fit(m *onnxmem.Model, sc onnxmem.Scenario) (*onnxmem.Result, bool, error) {
	return m.Fit(c.scenario(sc))
}

// limitText is the limit a step must fit under: "23.15 GiB usable on
// rtx4090" or "24.00 GiB".
func (c fitCriterion) limitText() string {
	if c.device != nil {
		return gib(c.device.Usable()) + " GiB usable on " + c.device.Name
	}
	return gib(c.budget) + " GiB"
}

// uses says what a step that fits uses of the limit.
func (c fitCriterion) uses(r *onnxmem.Result) string {
	return fmt.Sprintf("reserves %s GiB of %s (GPU_mem %s), peak %s GiB allocated", gib(r.PeakReserved), c.limitText(), r.GPUMem(), gib(r.Peak))
}

// needs says what a step that does not fit needs without a limit.
func (c fitCriterion) needs(r *onnxmem.Result) string {
	return fmt.Sprintf("would reserve %s GiB (peak %s GiB allocated) without a limit", gib(r.PeakReserved), gib(r.Peak))
}

// printHeader writes the step's title and, on a device, its memory.
func (c fitCriterion) printHeader(w io.Writer, m *onnxmem.Model, sc onnxmem.Scenario) {
	fmt.Fprintln(w, stepTitle(m, sc))
	if d := c.device; d != nil {
		fmt.Fprintf(w, "device %s (%s): %s GiB total, %s GiB CUDA context, %s GiB usable\n",
			d.Name, d.Long, gib(d.Total), gib(d.Context), gib(d.Usable()))
		fmt.Fprint(w, cardNote([]onnxmem.Device{*d}))
	}
}

// cardNote says, for the cards of other compute capabilities than the
// H100's and H200's 9.0, that cuDNN's workspaces were measured on 9.0 only
// (cuDNN's heuristics choose by GPU generation), so their answers are
// bands, and that the context is an assumption; "" when every card is 9.0.
func cardNote(ds []onnxmem.Device) string {
	var other, volta []string
	for _, d := range ds {
		if d.Capability != "9.0" {
			other = append(other, d.Name+" ("+cmpOr(d.Capability, "sm unknown")+")")
		}
		if c, err := strconv.ParseFloat(d.Capability, 64); err == nil && c < 7.5 {
			volta = append(volta, d.Name)
		}
	}
	if len(other) == 0 {
		return ""
	}
	note := "note   cuDNN workspaces measured on sm 9.0 only: a band on " + strings.Join(other, ", ") + "; CUDA context assumed\n"
	if len(volta) > 0 {
		// PyTorch 2.11's CUDA 12.8 and 13.0 wheels are built for sm 7.5 and
		// newer; an older card needs the CUDA 12.6 build, whose cuDNN is
		// older than the 9.19 measured.
		note += "note   " + strings.Join(volta, ", ") + ": torch 2.11 runs there only as its cu126 build, with an older cuDNN than the one measured\n"
	}
	return note
}

// setJSON fills a JSON output's budget, or its device.
func (c fitCriterion) setJSON(budget *int64, device **deviceJSON) {
	if c.device == nil {
		*budget = c.budget
		return
	}
	d := newDeviceJSON(*c.device)
	d.Sources = ""
	*device = &d
}

type maxBatchJSON struct {
	Model string `json:"model"`
	// Budget is the caching allocator's limit without -device; with it,
	// Device's usable memory is. A step fits when it runs to its end under
	// the limit.
	Budget   int64       `json:"budget,omitempty"`
	Device   *deviceJSON `json:"device,omitempty"`
	Limit    int64       `json:"limit"`
	MaxBatch int64       `json:"max_batch"`
	// MaxBatchPossible is set on a card whose cuDNN workspaces were not
	// measured (Device.Exact): the largest batch that may fit, MaxBatch
	// being the one sure to (see batchBand).
	MaxBatchPossible *int64 `json:"max_batch_possible,omitempty"`
	// Result is the prediction at MaxBatch; absent when it is 0.
	Result *resultJSON `json:"result,omitempty"`
}

// batchBand is the answer on a card whose cuDNN workspaces were not
// measured, where any engine's workspace may be taken, from none (cuDNN's
// fallback list always holds such an engine) to the H200's choice: the
// batch sure to fit with either and the batch that may fit with one, and
// at the sure one the step with none (low) and with the H200's (high),
// either of which may allocate or reserve more under the limit. Zero for a
// measured card.
type batchBand struct {
	sure, possible int64
	low, high      *onnxmem.Result
}

// newBatchBand returns the band of the answers with the H200's workspaces
// (h200, whose step is high) and with none.
func newBatchBand(h200, none int64) batchBand {
	return batchBand{sure: min(h200, none), possible: max(h200, none)}
}

// possiblePtr is possible for JSON: nil without a band.
func (b batchBand) possiblePtr() *int64 {
	if b.sure == 0 && b.possible == 0 {
		return nil
	}
	return &b.possible
}

// text is the line that says the answer is a band, or "".
func (b batchBand) text(c fitCriterion) string {
	if b.sure == 0 && b.possible == 0 {
		return ""
	}
	s := fmt.Sprintf("\nband   with cuDNN workspaces from none to the H200's: max batch %d sure, %d possible", b.sure, b.possible)
	if b.low != nil && b.high != nil {
		lo, hi := b.low, b.high
		if lo.Peak > hi.Peak {
			lo, hi = hi, lo
		}
		gl, gh := b.low, b.high
		if gl.ReservedAfter > gh.ReservedAfter {
			gl, gh = gh, gl
		}
		s += fmt.Sprintf(";\n       at %d, peak %s to %s GiB allocated, GPU_mem %s to %s", b.sure, gib(lo.Peak), gib(hi.Peak), gl.GPUMem(), gh.GPUMem())
	}
	return s
}

// searchBand runs a max-batch search (Model.MaxBatch, or MaxBatchRun for
// one plan) and, on a card whose cuDNN workspaces were not measured
// (banded), the same search without workspaces: the band. The batch and
// result it returns are then the sure ones.
func searchBand[R any](sc onnxmem.Scenario, banded bool, limit int64, search func(onnxmem.Scenario, int64) (int64, R, error)) (int64, R, batchBand, error) {
	n, r, err := search(sc, limit)
	if err != nil || !banded {
		return n, r, batchBand{}, err
	}
	none := sc
	none.NoWorkspaces = true
	k, _, err := search(none, limit)
	if err != nil {
		return 0, r, batchBand{}, err
	}
	b := newBatchBand(n, k)
	if b.sure < n {
		n, r, err = search(sc, b.sure)
	}
	return n, r, b, err
}

// runSearch is Model.MaxBatchRun for the run plan p, as searchBand takes it.
func runSearch(m *onnxmem.Model, p onnxmem.RunPlan) func(onnxmem.Scenario, int64) (int64, *onnxmem.RunResult, error) {
	return func(sc onnxmem.Scenario, limit int64) (int64, *onnxmem.RunResult, error) {
		return m.MaxBatchRun(sc, p, limit)
	}
}

// verdict is fit, and its answer in words: "yes" or "no"; on a card whose
// cuDNN workspaces were not measured, "yes" when the step fits with the
// H200's workspaces and with none, "no" when with neither, else "maybe".
// fits is the answer with the H200's.
func (c fitCriterion) verdict(m *onnxmem.Model, sc onnxmem.Scenario) (*onnxmem.Result, bool, string, error) {
	r, fits, err := c.fit(m, sc)
	if err != nil || !c.banded() {
		return r, fits, yesNo(fits), err
	}
	none := sc
	none.NoWorkspaces = true
	_, also, err := c.fit(m, none)
	switch {
	case fits && also:
		return r, fits, "yes", err
	case !fits && !also:
		return r, fits, "no", err
	}
	return r, fits, "maybe", err
}

// bandVerdictOf is a verdict for JSON: "" where the answer is no band.
func bandVerdictOf(c fitCriterion, verdict string) string {
	if !c.banded() {
		return ""
	}
	return verdict
}

// banded reports whether the answer under c is a batchBand: on a card whose
// cuDNN workspaces were not measured.
func (c fitCriterion) banded() bool { return c.device != nil && !c.device.Exact() }

// forBatchJSON is maxbatch -for-batch's answer.
type forBatchJSON struct {
	Model  string      `json:"model"`
	Budget int64       `json:"budget,omitempty"`
	Device *deviceJSON `json:"device,omitempty"`
	Batch  int64       `json:"batch"`
	// Segments is the fewest checkpoint segments with which the batch fits,
	// null when none tried does; Result the prediction with them.
	Segments *int        `json:"segments"`
	Result   *resultJSON `json:"result,omitempty"`
	// Tried lists the segment counts tried, in order, up to the first that
	// fits.
	Tried []triedJSON `json:"tried"`
}

type triedJSON struct {
	Segments     int   `json:"segments"`
	Peak         int64 `json:"peak"`
	PeakReserved int64 `json:"peak_reserved"`
	Fits         bool  `json:"fits"`
}

// gibValue is a flag.Value: a positive size in GiB.
type gibValue float64

func (g *gibValue) String() string { return strconv.FormatFloat(float64(*g), 'f', -1, 64) }

func (g *gibValue) Set(v string) error {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil || !(x > 0) || math.IsInf(x, 0) || x >= 1<<33 {
		return fmt.Errorf("want a positive number of GiB")
	}
	*g = gibValue(x)
	return nil
}

func (g gibValue) bytes() int64 { return int64(math.Round(float64(g) * (1 << 30))) }

// runMaxBatchCmd answers maxbatch -data: the largest batch, up to limit,
// with which the run p completes under c's limit (Model.MaxBatchRun), and
// where the run at one more runs out of memory.
func runMaxBatchCmd(m *onnxmem.Model, c fitCriterion, st setting, img imageSize, p onnxmem.RunPlan, limit int64, asJSON, asCSV bool, stdout, stderr io.Writer) int {
	if isTerminal(stderr) {
		fmt.Fprintf(stderr, "onnxmem: maxbatch: simulating whole runs on %s, batch after batch\n", p.Dataset())
	}
	g := int64(max(st.GPUs, 1)) // the batch is a multiple of the GPUs
	lo, best, b, err := searchBand(c.scenario(st.scenario(g, img)), c.banded(), limit, runSearch(m, p))
	if err != nil {
		return fail(stderr, err)
	}
	tried := map[int64]*onnxmem.RunResult{lo: best}
	var nextEvents []onnxmem.RunEvent
	next := lo + g
	if next <= limit { // the run at the next batch, for where it fails
		sc := c.scenario(st.scenario(next, img))
		q := p
		q.Batch, q.Height, q.Width = next/g, sc.Height, sc.Width
		events, err := m.PlanRun(q)
		if err != nil {
			return fail(stderr, err)
		}
		if tried[next], err = m.Run(sc, events); err != nil {
			return fail(stderr, err)
		}
		nextEvents = events
	}
	sc := c.scenario(st.scenario(max(lo, g), img))
	if asJSON || asCSV {
		js := runMaxBatchJSON{Model: m.Name, Data: p.Dataset(), Epochs: cmp.Or(p.Epochs, onnxmem.DefaultEpochs), Iterations: p.Iterations, Seed: p.Seed, CloseMosaic: p.CloseMosaic, Limit: limit, MaxBatch: lo, MaxBatchPossible: b.possiblePtr()}
		if !p.Drawn() {
			js.Workers = cmp.Or(p.Workers, dataset.DefaultWorkers)
		}
		c.setJSON(&js.Budget, &js.Device)
		if r := tried[lo]; r != nil {
			js.PeakReserved, js.Peak = r.PeakReserved, r.Peak
		}
		if r := tried[next]; r != nil {
			ev := oomEvent(r)
			js.NextOOMEvent = &ev
		}
		js.GPUs = st.GPUs
		if asCSV {
			return exit(stderr, writeCSV(stdout, []runMaxBatchJSON{js}))
		}
		return exit(stderr, writeJSON(stdout, js))
	}
	fmt.Fprintf(stdout, "model  %s\nrun    the whole training run of %s on %s: %d epoch(s)", m.Name, script(m), p.Dataset(), cmp.Or(p.Epochs, onnxmem.DefaultEpochs))
	if p.Iterations > 0 {
		fmt.Fprintf(stdout, " of %d iterations", p.Iterations)
	}
	ema := ", EMA"
	if sc.NoEMA {
		ema = ", no EMA"
	}
	boxes := fmt.Sprintf("boxes drawn from seed %d", p.Seed)
	if !p.Drawn() {
		boxes = "boxes as the dataloader gives them"
	}
	fmt.Fprintf(stdout, ", %s, %s%s, mosaic and mixup, image %dx%d, %s", settingOf(sc), cmpOr(sc.Optimizer, "SGD"), ema, sc.Height, sc.Width, boxes)
	limitText := c.limitText()
	if st.GPUs > 0 {
		var nccl int64
		for _, r := range tried {
			if r != nil {
				nccl = r.NCCL
			}
		}
		fmt.Fprintf(stdout, ",\n       DDP over %d GPU(s): each rank trains batch / %d, rank 0 also validates and saves; NCCL's %d MiB on each card besides the context", st.GPUs, st.GPUs, nccl>>20)
		if d := c.device; d != nil {
			limitText = fmt.Sprintf("%s GiB a rank (%s less NCCL's)", gib(d.Usable()-nccl), c.limitText())
		}
	}
	fmt.Fprintln(stdout)
	if p.Dataset() == onnxmem.BuiltinData {
		fmt.Fprint(stdout, "data   COCO 2017's image counts and sizes, its boxes assumed (-data FILE.yaml for yours)\n")
	}
	if d := c.device; d != nil {
		fmt.Fprintf(stdout, "device %s (%s): %s GiB total, %s GiB CUDA context, %s GiB usable\n", d.Name, d.Long, gib(d.Total), gib(d.Context), gib(d.Usable()))
		fmt.Fprint(stdout, cardNote([]onnxmem.Device{*d}))
	}
	if lo == 0 {
		_, err = fmt.Fprintf(stdout, "max batch 0: the run at batch %d runs out of memory in %s, in %s\n", g, limitText, eventWhere(nextEvents, oomEvent(tried[g])))
		return exit(stderr, err)
	}
	r := tried[lo]
	fmt.Fprintf(stdout, "max batch %d: the run completes, reserving at most %s GiB of %s (GPU_mem %s), peak %s GiB allocated",
		lo, gib(r.PeakReserved), limitText, onnxmem.RunStep{Reserved: r.PeakReserved}.GPUMem(), gib(r.Peak))
	if r := tried[next]; r != nil {
		fmt.Fprintf(stdout, ";\nat %d it runs out of memory in %s", next, eventWhere(nextEvents, oomEvent(r)))
		if !r.OOM {
			fmt.Fprint(stdout, " on the ranks other than 0")
		}
	}
	if lo == limit {
		fmt.Fprintf(stdout, "; the search stopped at -limit %d", limit)
	}
	fmt.Fprint(stdout, b.text(c))
	_, err = fmt.Fprintln(stdout)
	return exit(stderr, err)
}

// runMaxBatchJSON is maxbatch -data's answer.
type runMaxBatchJSON struct {
	Model string `json:"model"`
	Data  string `json:"data"`
	// Epochs, Iterations (0: whole epochs) and Seed are the run's; Seed a
	// drawn run's, Workers and CloseMosaic the loader's of a run that is
	// the dataloader's own stream (onnxmem.RunPlan.Drawn).
	Epochs      int         `json:"epochs"`
	Iterations  int         `json:"iterations"`
	Seed        uint64      `json:"seed,omitempty"`
	Workers     int         `json:"workers,omitempty"`
	CloseMosaic int         `json:"close_mosaic,omitempty"`
	Budget      int64       `json:"budget,omitempty"`
	Device      *deviceJSON `json:"device,omitempty"`
	Limit       int64       `json:"limit"`
	MaxBatch    int64       `json:"max_batch"`
	// MaxBatchPossible: as maxBatchJSON's, on a card whose cuDNN
	// workspaces were not measured.
	MaxBatchPossible *int64 `json:"max_batch_possible,omitempty"`
	// GPUs is -gpus: MaxBatch is then the total over them, every rank's
	// run completing.
	GPUs int `json:"gpus,omitempty"`
	// Peak and PeakReserved are the run's at MaxBatch, in bytes (rank 0's).
	Peak         int64 `json:"peak,omitempty"`
	PeakReserved int64 `json:"peak_reserved,omitempty"`
	// NextOOMEvent is the event in which the run at MaxBatch+1 runs out
	// of memory, when the search tried it.
	NextOOMEvent *int `json:"next_oom_event,omitempty"`
}
