package main

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/onnxmem/onnxmem/onnxmem"
)

// runReport is report's default: the training run as train_dual.py runs
// it, at one batch size, on a dataset (the data file's, or the built-in
// COCO-like one); the largest batch whose run completes on each card,
// the same search as maxbatch's and run's; and the step of the run's
// densest iteration, explained.
type runReport struct {
	Model, Path string
	model       *onnxmem.Model
	Default     bool
	Plan        onnxmem.RunPlan
	Events      []onnxmem.RunEvent
	Run         *onnxmem.RunResult
	Devices     []onnxmem.Device
	// MaxBatch is each card's largest batch; Possible, on a card whose
	// cuDNN workspaces were not measured, the largest that may fit
	// (MaxBatch is then the sure one), else 0.
	MaxBatch, Possible []int64
	// Worst is the event whose allocated peak is the run's; Detail is its
	// step simulated alone, for where the peak falls and what makes it.
	Worst  int
	Detail *onnxmem.Result
	// Draws are the same run at seeds Plan.Seed, Plan.Seed+1, …: another
	// order of the dataloader's batches, whose reserved peak can differ
	// widely (docs/limitations.md); a run that is the dataloader's own
	// stream (RunPlan.Drawn false) is one.
	Draws []*onnxmem.RunResult
}

// runDraws is how many seeds the report's run is drawn at.
const runDraws = 8

// simulate runs the plan at p.Batch, searches each card's largest batch
// and explains the densest iteration's step.
func (rep *runReport) simulate(sc onnxmem.Scenario, stderr io.Writer, verbose bool) error {
	m := rep.model
	step := steps(stderr, verbose, "report", 1+len(rep.Devices))
	var err error
	if rep.Events, err = m.PlanRun(rep.Plan); err != nil {
		return err
	}
	if rep.Run, err = m.Run(sc, rep.Events); err != nil {
		return err
	}
	step(fmt.Sprintf("the run at batch %d", sc.Batch))
	draws := runDraws
	if !rep.Plan.Drawn() {
		draws = 1 // the dataloader's own stream: one run
	}
	rep.Draws = make([]*onnxmem.RunResult, draws)
	rep.Draws[0] = rep.Run
	err = parallel(draws-1, func(i int) error {
		p := rep.Plan
		p.Seed = cmp.Or(p.Seed, onnxmem.DefaultSeed) + uint64(i) + 1
		events, err := m.PlanRun(p)
		if err == nil {
			rep.Draws[i+1], err = m.Run(sc, events)
		}
		return err
	})
	if err != nil {
		return err
	}
	rep.MaxBatch = make([]int64, len(rep.Devices))
	rep.Possible = make([]int64, len(rep.Devices))
	err = parallel(len(rep.Devices), func(i int) error {
		s := sc
		s.Device = rep.Devices[i].Name
		d := rep.Devices[i]
		n, _, b, err := searchBand(s, !d.Exact(), 0, runSearch(m, rep.Plan))
		rep.MaxBatch[i], rep.Possible[i] = n, b.possible
		step("the largest batch on " + rep.Devices[i].Name)
		return err
	})
	if err != nil {
		return err
	}
	for i, s := range rep.Run.Steps {
		if s.Peak > rep.Run.Steps[rep.Worst].Peak {
			rep.Worst = i
		}
	}
	e := rep.Events[rep.Run.Steps[rep.Worst].Event]
	d := sc
	d.Device = "" // what makes the peak, whole, not where a limit cuts it
	switch e.Kind {
	case "train":
		d.BoxCounts, d.Boxes = e.BoxCounts, 0
	case "val":
		d = onnxmem.Scenario{Step: onnxmem.EvalStep, Batch: e.Batch, Height: e.Height, Width: e.Width, EvalFloat: !sc.AMP, AllocConf: sc.AllocConf}
	default:
		return nil // a run that peaks outside its steps explains nothing more
	}
	rep.Detail, err = m.Simulate(d)
	return err
}

// limit is the card the run at the report's batch ran under: -device's,
// or nil for none (the report's three cards).
func (rep *runReport) limit() *onnxmem.Device {
	if rep.Run.Scenario.Device == "" {
		return nil
	}
	return &rep.Devices[0]
}

func (rep *runReport) print(w io.Writer) error {
	r, sc := rep.Run, rep.Run.Scenario
	fmt.Fprintf(w, "model  %s (%s)\n", rep.Model, source(rep.Path, rep.model))
	if rep.Default {
		fmt.Fprintln(w, "       the default model; pass MODEL.onnx or a built-in name for another")
	}
	fmt.Fprintf(w, "run    python %s --batch %d --img %d in one process: %s, %s, EMA, GradScaler, clipping, mosaic\n"+
		"       and mixup; %d epochs, each validated at batch %d on rectangles and saved (-step for one step alone)\n",
		script(rep.model), sc.Batch, max(sc.Height, sc.Width), settingOf(sc).precision(), cmpOr(sc.Optimizer, "SGD"), cmp.Or(rep.Plan.Epochs, onnxmem.DefaultEpochs), 2*sc.Batch)
	fmt.Fprintf(w, "data   %s\n\n", runSource(rep.Events, "", rep.Plan))

	if d := rep.limit(); d == nil {
		fmt.Fprintf(w, "the run at batch %d, without a limit (a card with room to spare):\n", sc.Batch)
	} else {
		verdict := "completes"
		if r.OOM {
			verdict = "runs out of memory in " + eventWhere(rep.Events, r.OOMEvent)
		}
		fmt.Fprintf(w, "the run at batch %d on %s (limit %s GiB): %s\n", sc.Batch, d.Name, gib(d.Usable()), verdict)
	}
	fmt.Fprintf(w, "  allocated   peak %s GiB, in %s\n", gib(r.Peak), eventWhere(rep.Events, r.Steps[rep.Worst].Event))
	fmt.Fprintf(w, "  reserved    %s GiB at most", gib(r.PeakReserved))
	if n, med, p99, most, _, ok := gpuMemStats(r, rep.Events); ok {
		fmt.Fprintf(w, "; GPU_mem after the %d iterations: median %s, 99th percentile %s, largest %s", n, med, p99, most)
	}
	fmt.Fprintln(w)
	if len(rep.Draws) > 1 {
		var res, alloc []int64
		for _, d := range rep.Draws {
			res, alloc = append(res, d.PeakReserved), append(alloc, d.Peak)
		}
		slices.Sort(res)
		slices.Sort(alloc)
		g := func(n int64) string { return onnxmem.RunStep{Reserved: n}.GPUMem() }
		seed := cmp.Or(rep.Plan.Seed, onnxmem.DefaultSeed)
		fmt.Fprintf(w, "  draws       seeds %d to %d (other orders of the batches): largest GPU_mem %s to %s, median %s;\n"+
			"              allocated peak %s to %s GiB\n", seed, seed+uint64(len(rep.Draws))-1,
			g(res[0]), g(res[len(res)-1]), g(res[(len(res)-1)/2]), gib(alloc[0]), gib(alloc[len(alloc)-1]))
	}
	if by := gpuMemByEpoch(r, rep.Events); len(by) > 1 {
		fmt.Fprintf(w, "  by epoch    GPU_mem median %s (each epoch after the one before's validation)\n", strings.Join(by, ", "))
	}
	var valPeak int64
	valAt := -1
	for _, s := range r.Steps {
		if rep.Events[s.Event].Kind == "val" && s.Peak > valPeak {
			valPeak, valAt = s.Peak, s.Event
		}
	}
	if valAt >= 0 {
		fmt.Fprintf(w, "  validation  peak %s GiB allocated, in %s\n", gib(valPeak), eventWhere(rep.Events, valAt))
	}

	fmt.Fprintln(w, "\nlargest batch whose whole run completes (onnxmem maxbatch and run give the same):")
	tw := newTable(w)
	fmt.Fprint(tw, "card\tusable GiB\tmax batch\tpossible\t\n")
	banded := false
	for i, d := range rep.Devices {
		possible := "exact"
		if rep.Possible[i] > 0 {
			possible, banded = batchLimit(rep.Possible[i]), true
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", d.Name, gib(d.Usable()), batchLimit(rep.MaxBatch[i]), possible)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "completes: no allocation fails under the card's usable memory (PyTorch frees its cache and retries\n"+
		"first), batches up to %d; usable is the total less the CUDA context, %s (onnxmem devices)\n", maxBatchLimit, contextNote(rep.Devices))
	fmt.Fprint(w, cardNote(rep.Devices))
	if banded {
		fmt.Fprint(w, "band   elsewhere than on H100 and H200, max batch is the batch sure to complete with any cuDNN\n"+
			"       workspace from none to the H200's, possible the largest that may\n")
	}
	if rep.Detail == nil {
		return nil
	}
	fmt.Fprintf(w, "\nwhere the peak is: the step of %s, simulated alone:\n", eventWhere(rep.Events, r.Steps[rep.Worst].Event))
	return printPeak(w, rep.Detail, "after that step alone")
}

// runReportCmd is report's default: the whole run.
func runReportCmd(f *flagSet, conf func(setting) (setting, error), m *onnxmem.Model, path string, isDefault bool, devices []onnxmem.Device, batch int64, img imageSize, data string, epochs int, loader func(*onnxmem.RunPlan) error,
	svg string, batches []int64, asJSON, asCSV, verbose bool, stdout, stderr io.Writer) int {
	st, err := conf(setting{AMP: true, Train: true, Optimizer: "SGD", EMA: true})
	if err != nil {
		return f.usageError(stderr, "%v", err)
	}
	if data != "" {
		var err error
		if m, err = f.dataClasses(m, data); err != nil {
			return fail(stderr, err)
		}
	}
	sc := st.scenario(batch, img)
	if f.isSet("device") { // the run at the batch on that card, under its limit
		sc.Device = devices[0].Name
	}
	rep := &runReport{Model: m.Name, Path: path, model: m, Default: isDefault, Devices: devices,
		Plan: onnxmem.RunPlan{Epochs: epochs, Batch: batch, Height: sc.Height, Width: sc.Width, Data: data}}
	if err := loader(&rep.Plan); err != nil {
		return f.usageError(stderr, "%v", err)
	}
	if err := rep.simulate(sc, stderr, verbose); err != nil {
		return fail(stderr, err)
	}
	if svg != "" {
		p, err := rep.stepsPlot(st, img, batches)
		if err == nil {
			err = writeSVG(svg, p)
		}
		if err != nil {
			return fail(stderr, err)
		}
	}
	switch {
	case asJSON:
		return exit(stderr, writeJSON(stdout, rep.json()))
	case asCSV:
		cw := csv.NewWriter(stdout)
		cw.WriteAll(rep.csvRows())
		return exit(stderr, cw.Error())
	}
	return exit(stderr, rep.print(stdout))
}

// stepsPlot is report -svg's plot for the run: the peak of the step of the
// run's densest iteration at each batch size (each its own densest, as
// knobs and sweep take it) in fp32 and AMP with 0, 2 and 4 segments, the
// cards' limits drawn. The densest iteration's step makes the run's
// allocated peak, within 0.1% on yolov9-c (the report's last section).
func (rep *runReport) stepsPlot(base setting, img imageSize, batches []int64) (*plot, error) {
	run := &runStep{m: rep.model, plan: rep.Plan}
	base.Run = run
	sr := &report{Model: rep.Model, Family: rep.model.Family, Devices: rep.Devices, DetailSetting: base}
	for _, s := range settingsOf(precisions[:2], checkpointSegments) {
		s.Train, s.Optimizer, s.EMA, s.Run, s.AllocConf = true, base.Optimizer, base.EMA, run, base.AllocConf
		sr.Settings = append(sr.Settings, s)
	}
	nb := len(batches)
	sr.Results = make([][]*onnxmem.Result, len(sr.Settings))
	for i := range sr.Results {
		sr.Results[i] = make([]*onnxmem.Result, nb)
	}
	err := parallel(len(sr.Settings)*nb, func(i int) error {
		r, err := rep.model.Simulate(sr.Settings[i/nb].scenario(batches[i%nb], img))
		sr.Results[i/nb][i%nb] = r
		return err
	})
	if err == nil {
		err = run.Err()
	}
	return sr.plot(), err
}

// runReportJSON is report -json's default.
type runReportJSON struct {
	Model   string `json:"model"`
	Path    string `json:"path"`
	Builtin bool   `json:"builtin"`
	// Run is the run at the report's batch: where its box counts and
	// validation batches come from, and its counters after every event.
	Run runJSON `json:"run"`
	// Devices are the cards, each with the largest batch whose run
	// completes (max_batch).
	Devices []runReportDevice `json:"devices"`
	// Detail is the step of the run's densest iteration, simulated alone.
	Detail *resultJSON `json:"detail,omitempty"`
	// Draws are the run's peaks at other seeds of the box counts (the first
	// is Run's): other orders of the dataloader's batches.
	Draws []runDrawJSON `json:"draws"`
}

type runDrawJSON struct {
	Seed         uint64 `json:"seed"`
	Peak         int64  `json:"peak"`
	PeakReserved int64  `json:"peak_reserved"`
}

type runReportDevice struct {
	deviceJSON
	MaxBatch int64 `json:"max_batch"`
	// MaxBatchPossible: as maxbatch's, on a card whose cuDNN workspaces
	// were not measured.
	MaxBatchPossible int64 `json:"max_batch_possible,omitempty"`
}

func (rep *runReport) json() runReportJSON {
	js := runReportJSON{Model: rep.Model, Path: rep.Path, Builtin: builtin(rep.Path),
		Run: runJSON{Model: rep.Model, Fits: !rep.Run.OOM, Source: runSource(rep.Events, "", rep.Plan),
			Predicted: newRunPredicted(rep.Run)}}
	for i, d := range rep.Devices {
		dj := newDeviceJSON(d)
		dj.Sources = ""
		js.Devices = append(js.Devices, runReportDevice{deviceJSON: dj, MaxBatch: rep.MaxBatch[i], MaxBatchPossible: rep.Possible[i]})
	}
	if rep.Detail != nil {
		rj := newResultJSON(rep.Detail, true)
		js.Detail = &rj
	}
	for i, d := range rep.Draws {
		if !rep.Plan.Drawn() {
			break // the dataloader's own stream: one run, no seed
		}
		js.Draws = append(js.Draws, runDrawJSON{Seed: cmp.Or(rep.Plan.Seed, onnxmem.DefaultSeed) + uint64(i), Peak: d.Peak, PeakReserved: d.PeakReserved})
	}
	return js
}

// csvRows is report -csv's default: one row for each card.
func (rep *runReport) csvRows() [][]string {
	rows := [][]string{{"card", "usable", "max_batch", "max_batch_possible", "batch", "peak", "peak_reserved", "gpu_mem"}}
	r := rep.Run
	for i, d := range rep.Devices {
		possible := ""
		if rep.Possible[i] > 0 {
			possible = strconv.FormatInt(rep.Possible[i], 10)
		}
		rows = append(rows, []string{d.Name, strconv.FormatInt(d.Usable(), 10), strconv.FormatInt(rep.MaxBatch[i], 10), possible,
			strconv.FormatInt(r.Scenario.Batch, 10), strconv.FormatInt(r.Peak, 10), strconv.FormatInt(r.PeakReserved, 10),
			onnxmem.RunStep{Reserved: r.PeakReserved}.GPUMem()})
	}
	return rows
}

// gpuMemByEpoch is the median GPU_mem after each epoch's iterations, an
// iteration a plan left out counted with the reserved before it, as in
// gpuMemStats: validation's shapes can raise it for the epochs after.
func gpuMemByEpoch(r *onnxmem.RunResult, events []onnxmem.RunEvent) []string {
	var out []string
	var res []int64
	flush := func() {
		if len(res) > 0 {
			slices.Sort(res)
			out = append(out, onnxmem.RunStep{Reserved: res[(len(res)-1)/2]}.GPUMem())
			res = res[:0]
		}
	}
	for _, s := range r.Steps {
		switch events[s.Event].Kind {
		case "train":
			for range 1 + events[s.Event].Omitted {
				res = append(res, s.Reserved)
			}
		case "ckpt":
			flush()
		}
	}
	flush()
	return out
}
