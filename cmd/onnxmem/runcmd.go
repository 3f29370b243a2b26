package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/onnxmem/onnxmem/internal/regular"

	"github.com/onnxmem/onnxmem/family/yolov9/dataset"
	"github.com/onnxmem/onnxmem/internal/sim"
	"github.com/onnxmem/onnxmem/onnxmem"
)

func cmdRun(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("run",
		"onnxmem run [-batch N] [-img N] [-amp] [-segments K] [-optimizer NAME] [-ema=false] [-alloc-conf OPTS]\n"+
			"            [-epochs E] [-iters N] [-val-images N] [-mean-boxes M] [-data FILE.yaml] [-seed S] [-events FILE.json]\n"+
			"            [-workers N] [-close-mosaic N] [-gpus N [-sync-bn]] [-device NAME|SIZE] [-json|-csv] [-svg FILE] [MODEL.onnx]",
		"Run simulates a whole training run of train_dual.py in one process: the setup\n"+
			"(model, optimizer, EMA), -epochs epochs of -iters iterations with per-image box\n"+
			"counts drawn from a long-tailed distribution of mean -mean-boxes, each epoch's\n"+
			"validation of -val-images images at twice the batch on rectangular images, and\n"+
			"its checkpoint save. -data FILE.yaml (the YOLO data file train_dual.py's --data\n"+
			"takes) trains on that dataset instead: every epoch its training images, each\n"+
			"batch's images and boxes as the official dataloader gives them (its shuffle,\n"+
			"mosaic, perspective and mixup draws reproduced, which -workers and -close-mosaic\n"+
			"decide and no seed changes), -iters of them if set; validation on its images'\n"+
			"rectangular batches as the dataloader shapes them; the head's classes from its nc. Under -amp GradScaler skips the optimizer step of the first\n"+
			"three iterations (its scale falls from 65536), so the optimizer's state comes\n"+
			"with the fourth. -events FILE.json gives the events instead, as a JSON list in\n"+
			"predict's train_run format (\"skipped\": true marks the iterations GradScaler\n"+
			"skipped, if known). It prints allocated and reserved memory after each\n"+
			"event (GPU_mem is what the training loop prints) and the run's peaks; with\n"+
			"-device, whether the run fits under that card's limit. -svg plots memory over\n"+
			"the run (GPU_mem, allocated, the card's limit; validations shaded).\n\n"+
			"-gpus N runs it as torch.distributed.run --nproc_per_node N does: N ranks of\n"+
			"DistributedDataParallel, each training batch / N images an iteration, with\n"+
			"DDP's gradient buckets; rank 0 alone keeps the EMA, validates at twice its\n"+
			"batch and saves. The events are rank 0's; a table gives every rank's peaks,\n"+
			"and each card's limit is its usable memory less NCCL's share.",
		"onnxmem run -batch 16 -amp -epochs 2 -iters 20 -device rtx4090 yolov9-s")
	batch := f.positive("batch", 16, "training batch `size`")
	img, set, ddp := f.imgFlag(), f.settingFlags(), f.ddpFlags()
	opt := optimizerValue("SGD")
	f.Var(&opt, "optimizer", "`NAME` of the optimizer: SGD, Adam, AdamW (YOLOv9: with amsgrad), Lion or none")
	ema := f.Bool("ema", true, "keep an EMA copy of the model, validated at each epoch end (-ema=false: none)")
	epochs := f.positive("epochs", runEpochs, "`E` epochs")
	iters := f.positive("iters", 20, "`N` train iterations per epoch")
	valImages := f.Int64("val-images", 0, "validation images at each epoch end, in batches of twice -batch (default 4 batches' worth; 0 with -val-images=0 set: no validation)")
	meanBoxes := f.Float64("mean-boxes", 7.3, "mean ground-truth boxes per image (COCO: 7.3)")
	loader := loaderFlags(f, "`seed` of the box counts (of a run without -data, or over -gpus)")
	data := f.String("data", "", "train on the YOLO dataset of the data `FILE.yaml`")
	eventsFile := f.String("events", "", "read the events from `FILE.json` (a list of {\"setup\":{}}, {\"train\":{\"boxes_per_img\":[...]}}, {\"val\":{...}}, {\"ckpt\":{}})")
	device := f.deviceFlag()
	asJSON, asCSV := f.jsonFlag(), f.csvFlag()
	svg := f.svgFlag("the plot of memory over the run")
	f.familyFlag()
	m, code, ok := f.parseAndLoad(args, stdout, stderr)
	if !ok {
		return code
	}
	st, err := set()
	if err == nil {
		st, err = ddp(st)
	}
	if err != nil {
		return f.usageError(stderr, "%v", err)
	}
	ranks := int64(max(st.GPUs, 1))
	if *batch%ranks != 0 {
		return f.usageError(stderr, "-batch %d over -gpus %d: the batch must be a multiple of the GPUs (train_dual.py asserts it)", *batch, st.GPUs)
	}
	if *data != "" {
		for _, name := range []string{"val-images", "mean-boxes", "events"} {
			if f.isSet(name) {
				return f.usageError(stderr, "-%s and -data exclude each other: the dataset gives the box counts and the validation images", name)
			}
		}
		if m, err = f.dataClasses(m, *data); err != nil {
			return fail(stderr, err)
		}
	}
	if st.Half {
		return f.usageError(stderr, "-half does not apply to a training run: train_dual.py trains float32 parameters, with or without -amp")
	}
	d, err := device()
	if err != nil {
		return f.usageError(stderr, "%v", err)
	}
	if *meanBoxes < 0 {
		return f.usageError(stderr, "-mean-boxes must be 0 or more")
	}
	st.Train, st.Optimizer, st.EMA = true, string(opt), *ema
	st.AMP = st.AMP || !f.isSet("amp") // train_dual.py's default
	sc := st.scenario(*batch, *img)
	if d != nil {
		sc.Device = d.Name
	}
	var events []onnxmem.RunEvent
	var p onnxmem.RunPlan
	if *eventsFile != "" {
		for _, name := range []string{"epochs", "iters", "val-images", "mean-boxes", "seed", "workers", "close-mosaic"} {
			if f.isSet(name) {
				return f.usageError(stderr, "-%s and -events exclude each other: the file gives the events", name)
			}
		}
		if events, err = readRunEvents(*eventsFile, sc.Batch/ranks); err != nil {
			return fail(stderr, err)
		}
	} else {
		p = onnxmem.RunPlan{Epochs: int(*epochs), Iterations: int(*iters), Batch: *batch / ranks, Height: sc.Height, Width: sc.Width,
			ValImages: *valImages, MeanBoxes: *meanBoxes, Data: *data, GPUs: st.GPUs}
		if err := loader(&p); err != nil {
			return f.usageError(stderr, "%v", err)
		}
		synthetic := f.isSet("mean-boxes") || f.isSet("val-images")
		switch {
		case *data != "" || !synthetic:
			p.ValImages, p.MeanBoxes = 0, 0
			if !f.isSet("iters") {
				p.Iterations = 0
			}
		case !f.isSet("val-images"):
			p.ValImages = 8 * p.Batch
		}
		events, err = m.PlanRun(p)
		if err != nil {
			return fail(stderr, err)
		}
	}
	r, err := m.Run(sc, events)
	if err != nil {
		return fail(stderr, err)
	}
	var none *onnxmem.RunResult // on a card whose workspaces were not measured
	if d != nil && !d.Exact() {
		s := sc
		s.NoWorkspaces = true
		if none, err = m.Run(s, events); err != nil {
			return fail(stderr, err)
		}
	}
	if err := writeSVG(*svg, runPlot(m.Name, r, events, d)); err != nil {
		return fail(stderr, err)
	}
	if *asCSV {
		return exit(stderr, writeCSV(stdout, runRows(r, events)))
	}
	if *asJSON {
		js := runJSON{Model: m.Name, Device: deviceName(d), Limit: rankLimit(d, r), Fits: !runOOM(r),
			Source: runSource(events, *eventsFile, p), Predicted: newRunPredicted(r)}
		if st.GPUs > 0 {
			js.GPUs, js.NCCL, js.Ranks = st.GPUs, r.NCCL, rankRows(r)
		}
		if none != nil {
			js.Band = bandVerdict(r, none)
		}
		return exit(stderr, writeJSON(stdout, js))
	}
	return exit(stderr, printRun(stdout, m.Name, runSource(events, *eventsFile, p), r, none, events, d))
}

// runEpochs is the epochs of a run that run and maxbatch -data simulate by
// default: a run's memory repeats from its second epoch on, but for the
// box counts each epoch draws.
const runEpochs = 2

// readRunEvents reads a run's events from a JSON file in predict's
// train_run format.
func readRunEvents(path string, batch int64) ([]onnxmem.RunEvent, error) {
	f, err := regular.Open(path)
	if err != nil {
		return nil, fmt.Errorf("onnxmem: events: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxLine+1))
	if err != nil {
		return nil, fmt.Errorf("onnxmem: events: %w", err)
	}
	if len(b) > maxLine {
		return nil, fmt.Errorf("onnxmem: events %s: longer than %d bytes: a run is at most %d events of some kilobytes each", path, maxLine, sim.MaxRunEvents)
	}
	return parseRunEvents(b, path, batch)
}

// parseRunEvents decodes the events of a run -events file named path.
func parseRunEvents(b []byte, path string, batch int64) ([]onnxmem.RunEvent, error) {
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("onnxmem: events %s: want a JSON list of events such as [{\"setup\":{}}, {\"train\":{\"boxes_per_img\":[3,0,12]}}]: %v", path, err)
	}
	events := make([]onnxmem.RunEvent, len(raw))
	for i, ev := range raw {
		var err error
		if events[i], err = runEvent(ev, i, batch); err != nil {
			return nil, fmt.Errorf("%w (in %s)", err, path)
		}
	}
	return events, nil
}

func deviceName(d *onnxmem.Device) string {
	if d == nil {
		return ""
	}
	return d.Name
}

// runJSON is run -json's output.
type runJSON struct {
	Model  string `json:"model"`
	Device string `json:"device,omitempty"`
	// Limit is the caching allocator's limit in bytes (the card's usable
	// memory), 0 without -device; Fits says the run ran under it.
	Limit int64 `json:"limit_bytes,omitempty"`
	Fits  bool  `json:"fits"`
	// Band, on a card whose cuDNN workspaces were not measured, is "fits"
	// (with any engine's workspace from none to the H200's), "may not
	// fit" (with one of the two only) or "does not fit"; Fits is then the
	// answer with the H200's workspaces.
	Band string `json:"band,omitempty"`
	// Source says where the box counts and validation batches came from,
	// and what of them is exact and what drawn, as the table's data line.
	Source    string       `json:"source"`
	Predicted runPredicted `json:"predicted"`
	// With -gpus: the GPUs, NCCL's bytes on each card (outside the
	// allocator, beside the context; Limit is already less them) and each
	// rank's figures; Predicted is rank 0's.
	GPUs  int       `json:"gpus,omitempty"`
	NCCL  int64     `json:"nccl_bytes,omitempty"`
	Ranks []rankRow `json:"ranks,omitempty"`
}

// closeText says a plan's --close-mosaic, when it sets one.
func closeText(p onnxmem.RunPlan) string {
	if p.CloseMosaic == 0 {
		return ""
	}
	return fmt.Sprintf(", a new iterator each epoch: --close-mosaic %d", p.CloseMosaic)
}

// loaderFlags adds to f -seed, whose help is seedHelp, -workers and
// -close-mosaic: where a run's box counts come from. It returns what sets
// a plan's Seed, Workers and CloseMosaic once the flags are parsed: a -data
// run on one GPU is the dataloader's own stream, which the loader's
// settings decide and no seed changes; any other run is drawn from the
// seed.
func loaderFlags(f *flagSet, seedHelp string) func(p *onnxmem.RunPlan) error {
	seed := f.Uint64("seed", onnxmem.DefaultSeed, seedHelp)
	workers := f.Int("workers", 0, "the dataloader's `N` workers in a -data run, as train_dual.py's log says them (\"Using N dataloader workers\":\nmin(CPUs per GPU, --workers 8), the batch capping it) (default 8)")
	closeMosaic := f.Int("close-mosaic", 0, "train_dual.py's --close-mosaic `N` of a -data run: above 0 its loader is a plain DataLoader, a new iterator\neach epoch (the official README's command passes 15); its last N epochs without mosaic are past those simulated")
	return func(p *onnxmem.RunPlan) error {
		p.Seed, p.Workers, p.CloseMosaic = *seed, *workers, *closeMosaic
		switch {
		case f.isSet("workers") && *workers < 1:
			return fmt.Errorf("-workers %d: with --workers 0 the main process loads the images, which onnxmem does not simulate; give 1 or more", *workers)
		case *closeMosaic < 0:
			return fmt.Errorf("-close-mosaic %d: want train_dual.py's --close-mosaic, 0 or more", *closeMosaic)
		case p.Drawn() && (f.isSet("workers") || f.isSet("close-mosaic")):
			return fmt.Errorf("-workers and -close-mosaic apply to a -data run on one GPU without -gpus, whose boxes the dataloader decides: drop them")
		case !p.Drawn() && f.isSet("seed"):
			return fmt.Errorf("-seed and -data: a -data run on one GPU is the dataloader's own stream (its shuffle and augmentation draws reproduced), which no seed changes: drop -seed")
		case !p.Drawn():
			p.Seed = 0
		}
		return nil
	}
}

// runSource says where a run's box counts and validation batches come
// from (eventsFile, or p's plan), and what of them is exact and what drawn.
func runSource(events []onnxmem.RunEvent, eventsFile string, p onnxmem.RunPlan) string {
	data, meanBoxes, seed := p.Dataset(), p.MeanBoxes, p.Seed
	if eventsFile != "" {
		return "the events of " + eventsFile
	}
	var iters, vals, itersAll, valsAll int
	for _, e := range events {
		switch e.Kind {
		case "train":
			iters++
			itersAll += 1 + e.Omitted
		case "val":
			vals++
			valsAll += 1 + e.Omitted
		}
	}
	count := fmt.Sprintf("%d iterations and %d validation batches", itersAll, valsAll)
	if itersAll > iters || valsAll > vals {
		// thinEpoch and collapseVal: the rest repeat their memory.
		count += fmt.Sprintf(", %d and %d simulated (the first, densest and last; a batch per shape)", iters, vals)
	}
	switch data {
	case "":
		return fmt.Sprintf("synthetic: box counts drawn with mean %g (seed %d), validation on common aspect ratios; %s", meanBoxes, seed, count)
	case onnxmem.BuiltinData:
		return fmt.Sprintf("%s: COCO 2017's %d training and %d validation images, sizes COCO's, boxes assumed\n"+
			"       (calibration/train_data.py's draw, not COCO's labels: -data coco.yaml reads those); mosaic, perspective\n"+
			"       and mixup drawn from seed %d, validation rectangles exact;\n       %s",
			data, dataset.COCOTrainImages, dataset.COCOValImages, seed, count)
	}
	if p.Drawn() { // DDP's ranks
		return fmt.Sprintf("%s: each image's boxes drawn as the dataloader's mosaic, perspective and mixup give them (seed %d: a sample, not the run's own draw), validation in the dataloader's rectangles (exact); %s", data, seed, count)
	}
	return fmt.Sprintf("%s: each batch's images and boxes as the official dataloader gives them, its shuffle, mosaic,\n"+
		"       perspective and mixup draws reproduced (%d workers%s), exact where albumentations builds no\n"+
		"       transform; validation in its rectangles (images of one aspect ratio in numpy's AVX-512 argsort order);\n       %s", data, dataset.Workers(p.Workers, int(p.Batch)), closeText(p), count)
}

func printRun(w io.Writer, model, source string, r, none *onnxmem.RunResult, events []onnxmem.RunEvent, d *onnxmem.Device) error {
	sc := r.Scenario
	prec := "fp32"
	if sc.AMP {
		prec = "amp"
	}
	fmt.Fprintf(w, "model  %s\nrun    training run, batch %d, %s, %s, %s", model, sc.Batch, inputOf(sc), prec, sc.Optimizer)
	if sc.GPUs > 0 {
		fmt.Fprintf(w, ", DDP over %d GPU(s) (%d images a rank", sc.GPUs, sc.Batch/int64(sc.GPUs))
		if sc.SyncBN {
			fmt.Fprint(w, ", SyncBatchNorm")
		}
		fmt.Fprint(w, "; the events are rank 0's)")
	}
	if !sc.NoEMA {
		fmt.Fprint(w, ", EMA")
	}
	if sc.AllocConf != "" {
		fmt.Fprintf(w, ", PYTORCH_CUDA_ALLOC_CONF=%s", sc.AllocConf)
	}
	fmt.Fprintf(w, "\ndata   %s\n", source)
	if d == nil {
		fmt.Fprint(w, "limit  none: a card with room to spare (-device NAME|SIZE runs it under a card's usable memory)\n")
	} else if r.NCCL > 0 {
		fmt.Fprintf(w, "limit  %s GiB a rank, %s's usable memory less NCCL's %d MiB (measured with one GPU; more over several)\n", gib(rankLimit(d, r)), d.Name, r.NCCL>>20)
	} else {
		fmt.Fprintf(w, "limit  %s GiB, %s's usable memory\n", gib(d.Usable()), d.Name)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "event\tkind\tdetail\tallocated GiB\treserved GiB\tpeak GiB\tGPU_mem\t")
	for _, s := range r.Steps {
		e := events[s.Event]
		detail := ""
		switch e.Kind {
		case "train":
			mx := int64(0)
			for _, c := range e.BoxCounts {
				mx = max(mx, c)
			}
			detail = fmt.Sprintf("max %d boxes", mx)
		case "val":
			detail = fmt.Sprintf("%dx%dx%d", e.Batch, e.Height, e.Width)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.Event, e.Kind, detail, gib(s.Allocated), gib(s.Reserved), gib(s.Peak), s.GPUMem())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nover the run: peak %s GiB allocated, %s GiB reserved (max GPU_mem %s)\n", gib(r.Peak), gib(r.PeakReserved),
		onnxmem.RunStep{Reserved: r.PeakReserved}.GPUMem())
	if line := gpuMemSummary(r, events); line != "" {
		fmt.Fprintln(w, line)
	}
	if sc.GPUs > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "ranks	peak GiB	reserved GiB	max GPU_mem	NCCL GiB	ends	")
		for _, row := range rankRows(r) {
			ends := "completes"
			if row.OOM {
				ends = "out of memory"
			}
			fmt.Fprintf(tw, "%s	%s	%s	%s	%s	%s	\n", row.Ranks, gib(row.Peak), gib(row.PeakReserved), row.GPUMem, gib(row.NCCL), ends)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if d != nil {
		ends := func(r *onnxmem.RunResult) string {
			if r.OOM {
				return fmt.Sprintf("runs out of memory in event %d (%s)", r.OOMEvent, events[r.OOMEvent].Kind)
			}
			return "completes"
		}
		verdict := "fits"
		switch {
		case none != nil:
			verdict = bandVerdict(r, none)
		case r.OOM:
			verdict = "does not fit: it " + ends(r)
		case runOOM(r):
			verdict = "does not fit: the other ranks run out of memory in event " + strconv.Itoa(r.Others.OOMEvent)
		}
		nccl := ""
		if r.NCCL > 0 {
			nccl = fmt.Sprintf(" and NCCL's %d MiB", r.NCCL>>20)
		}
		fmt.Fprintf(w, "on %s (limit %s GiB: %s GiB less a %d MiB CUDA context%s): %s\n", d.Name, gib(rankLimit(d, r)), gib(d.Total), d.Context>>20, nccl, verdict)
		if none != nil {
			fmt.Fprintf(w, "band   cuDNN workspaces not measured on %s: with the H200's the run %s, with none it %s\n", d.Name, ends(r), ends(none))
		}
	}
	return nil
}

// bandVerdict is whether a run fits a card whose cuDNN workspaces were not
// measured, from the run with the H200's workspaces and the run with none:
// "fits" when both complete, "does not fit" when neither does, else "may
// not fit".
func bandVerdict(h200, none *onnxmem.RunResult) string {
	switch {
	case !runOOM(h200) && !runOOM(none):
		return "fits"
	case runOOM(h200) && runOOM(none):
		return "does not fit"
	}
	return "may not fit"
}

// gpuMemSummary says how GPU_mem, as the training loop prints it after each
// iteration, spreads over the run's iterations (median, 99th percentile,
// largest), and which iteration peaked first, with its densest image;
// empty for a run of fewer than two iterations. An iteration a plan left
// out counts with the reserved of the one before it: reserved only grows
// in a run that does not run out, so that is its least.
func gpuMemSummary(r *onnxmem.RunResult, events []onnxmem.RunEvent) string {
	n, med, p99, most, worst, ok := gpuMemStats(r, events)
	if !ok {
		return ""
	}
	w := r.Steps[worst]
	densest := int64(0)
	for _, c := range events[w.Event].BoxCounts {
		densest = max(densest, c)
	}
	return fmt.Sprintf("GPU_mem after the %d iterations: median %s, 99th percentile %s, largest %s; the highest reserved peak first in event %d (%s GiB, its densest image %d boxes)",
		n, med, p99, most, w.Event, gib(w.PeakReserved), densest)
}

// gpuMemStats is GPU_mem over a run's n iterations, as gpuMemSummary says
// it: its median, 99th percentile and largest, and the step of the first
// iteration of the highest reserved peak; ok is false for a run of fewer
// than two iterations.
func gpuMemStats(r *onnxmem.RunResult, events []onnxmem.RunEvent) (n int, med, p99, most string, worst int, ok bool) {
	var res []int64
	worst = -1 // the step of the first iteration with the largest peak
	for i, s := range r.Steps {
		if s.Kind != "train" {
			continue
		}
		for range 1 + events[s.Event].Omitted {
			res = append(res, s.Reserved)
		}
		if worst < 0 || s.PeakReserved > r.Steps[worst].PeakReserved {
			worst = i
		}
	}
	if len(res) < 2 {
		return 0, "", "", "", 0, false
	}
	sorted := slices.Sorted(slices.Values(res))
	at := func(q float64) string {
		return onnxmem.RunStep{Reserved: sorted[int(q*float64(len(sorted)-1))]}.GPUMem()
	}
	return len(res), at(0.5), at(0.99), at(1), worst, true
}

// runPlot is memory over a run: reserved (GPU_mem) and allocated after
// each event and each event's peaks, against the event index, the
// validations shaded, the checkpoint saves and the run's peak marked, and
// the card's limit when there is one.
func runPlot(name string, r *onnxmem.RunResult, events []onnxmem.RunEvent, d *onnxmem.Device) *plot {
	res := series{Name: "reserved after the event (GPU_mem)", Color: "#e08a00"}
	alloc := series{Name: "allocated after the event", Color: "#1f5fbf"}
	peak := series{Name: "allocated peak during the event", Color: "#9bb7e0"}
	var marks []mark
	var bands []band
	for _, s := range r.Steps {
		x := float64(s.Event)
		res.X, res.Y = append(res.X, x), append(res.Y, gibf(s.Reserved))
		alloc.X, alloc.Y = append(alloc.X, x), append(alloc.Y, gibf(s.Allocated))
		peak.X, peak.Y = append(peak.X, x), append(peak.Y, gibf(s.Peak))
		switch events[s.Event].Kind {
		case "val":
			if n := len(bands); n > 0 && bands[n-1].X1 == x {
				bands[n-1].X1 = x + 1
			} else {
				bands = append(bands, band{X0: x, X1: x + 1, Label: "validation", Fill: "#e2f3e0"})
			}
		case "ckpt":
			marks = append(marks, mark{X: x, Y: gibf(s.Reserved), Label: "checkpoint"})
		}
	}
	p := &plot{
		Title:  fmt.Sprintf("%s: memory over the training run, batch %d", name, r.Scenario.Batch),
		XLabel: "event (setup, iterations, validation batches, checkpoint saves)", YLabel: "GiB",
		Series: []series{res, alloc, peak}, Bands: bands, Marks: marks,
		XMin: 0, XMax: float64(max(len(events), 1)),
	}
	if d != nil {
		p.Series = append(p.Series, series{Name: d.Name + " limit", Color: "#c00", X: []float64{0, p.XMax}, Y: []float64{gibf(rankLimit(d, r)), gibf(rankLimit(d, r))}})
	}
	return p
}

// runRow is one event of run -csv.
type runRow struct {
	Event     int    `json:"event"`
	Kind      string `json:"kind"`
	Batch     int64  `json:"batch"`
	Height    int64  `json:"img_h"`
	Width     int64  `json:"img_w"`
	MaxBoxes  int64  `json:"max_boxes"`
	Allocated int64  `json:"allocated_after"`
	Reserved  int64  `json:"reserved_after"`
	Peak      int64  `json:"event_peak"`
	GPUMem    string `json:"gpu_mem"`
}

func runRows(r *onnxmem.RunResult, events []onnxmem.RunEvent) []runRow {
	var out []runRow
	for _, s := range r.Steps {
		e := events[s.Event]
		row := runRow{Event: s.Event, Kind: e.Kind, Batch: e.Batch, Height: e.Height, Width: e.Width,
			Allocated: s.Allocated, Reserved: s.Reserved, Peak: s.Peak, GPUMem: s.GPUMem()}
		if e.Kind == "train" {
			row.Batch, row.Height, row.Width = r.Scenario.Batch, r.Scenario.Height, r.Scenario.Width
		}
		for _, c := range e.BoxCounts {
			row.MaxBoxes = max(row.MaxBoxes, c)
		}
		out = append(out, row)
	}
	return out
}

// rankLimit is the caching allocator's limit of each rank of run r on d:
// the card's usable memory less NCCL's share under DDP; 0 without d.
func rankLimit(d *onnxmem.Device, r *onnxmem.RunResult) int64 {
	if d == nil {
		return 0
	}
	return d.Usable() - r.NCCL
}

// oomEvent is the event in which run r ran out of memory, on rank 0 or
// else on the other ranks.
func oomEvent(r *onnxmem.RunResult) int {
	if !r.OOM && r.Others != nil {
		return r.Others.OOMEvent
	}
	return r.OOMEvent
}

// runOOM reports whether any rank of run r ran out of memory.
func runOOM(r *onnxmem.RunResult) bool { return r.OOM || r.Others != nil && r.Others.OOM }

// rankRow is one line of a DDP run's table of ranks.
type rankRow struct {
	// Ranks names them: "0", or "1" or "1-3" for the others, which run
	// alike.
	Ranks        string `json:"ranks"`
	Peak         int64  `json:"peak"`
	PeakReserved int64  `json:"peak_reserved"`
	// GPUMem is the largest GPU_mem the rank would print; NCCL its card's
	// bytes outside the allocator beside the CUDA context.
	GPUMem string `json:"max_gpu_mem"`
	NCCL   int64  `json:"nccl_bytes"`
	OOM    bool   `json:"oom,omitempty"`
}

// rankRows lists the ranks of a DDP run: rank 0, then the others.
func rankRows(r *onnxmem.RunResult) []rankRow {
	row := func(name string, q *onnxmem.RunResult) rankRow {
		return rankRow{Ranks: name, Peak: q.Peak, PeakReserved: q.PeakReserved, GPUMem: onnxmem.RunStep{Reserved: q.PeakReserved}.GPUMem(), NCCL: q.NCCL, OOM: q.OOM}
	}
	rows := []rankRow{row("0", r)}
	if o := r.Others; o != nil {
		name := "1"
		if n := o.Scenario.GPUs; n > 2 {
			name = fmt.Sprintf("1-%d", n-1)
		}
		rows = append(rows, row(name, o))
	}
	return rows
}

// dataClasses returns m with the classes of the data yaml file's nc, as
// train_dual.py builds its model for the dataset; -nc, if given, must
// agree.
func (f *flagSet) dataClasses(m *onnxmem.Model, file string) (*onnxmem.Model, error) {
	d, err := dataset.ReadData(file)
	if err != nil {
		return nil, fmt.Errorf("onnxmem: -data: %w", err)
	}
	c, err := m.Classes()
	if err != nil || c == d.NC {
		return m, err
	}
	if f.isSet("nc") {
		return nil, fmt.Errorf("onnxmem: -nc %d and -data's nc %d disagree: leave -nc out", *f.nc, d.NC)
	}
	return withClasses(m, d.NC)
}

// eventWhere says where event i of a run falls, for people: "iteration
// 412 of epoch 1 (its densest image 187 boxes)", counting the iterations
// a plan left out, or "a validation batch of 32x672x672 after epoch 2".
func eventWhere(events []onnxmem.RunEvent, i int) string {
	epoch, iter := 1, 0
	for _, e := range events[:i] {
		switch e.Kind {
		case "train":
			iter += 1 + e.Omitted
		case "ckpt":
			epoch, iter = epoch+1, 0
		}
	}
	e := events[i]
	switch e.Kind {
	case "train":
		most := int64(0)
		for _, c := range e.BoxCounts {
			most = max(most, c)
		}
		return fmt.Sprintf("iteration %d of epoch %d (event %d; its densest image %d boxes)", iter+1, epoch, i, most)
	case "val":
		return fmt.Sprintf("a validation batch of %dx%dx%d after epoch %d (event %d)", e.Batch, e.Height, e.Width, epoch, i)
	case "ckpt":
		return fmt.Sprintf("the checkpoint save after epoch %d (event %d)", epoch, i)
	}
	return fmt.Sprintf("the %s (event %d)", e.Kind, i)
}
