package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/onnxmem/onnxmem/internal/sim"
	"github.com/onnxmem/onnxmem/onnxmem"
)

// reportDevices names the device profiles of the report's "largest batch
// that fits" table, in its order: cards of 24, 40 and 80 GB.
var reportDevices = []string{"rtx4090", "a100-40", "a100-80"}

// cards returns the profiles of reportDevices.
func cards() []onnxmem.Device {
	out := make([]onnxmem.Device, len(reportDevices))
	for i, name := range reportDevices {
		d, err := onnxmem.ParseDevice(name)
		if err != nil {
			panic(err) // reportDevices names profiles that exist
		}
		out[i] = d
	}
	return out
}

// tensorsShown is how many of the largest tensors alive at the peak the
// report lists.
const tensorsShown = 10

// maxBatchLimit is the largest batch size the report's search considers.
const maxBatchLimit = onnxmem.MaxBatchLimit

// detailSetting is the setting whose peak the report explains: AMP without
// checkpointing, the default of YOLOv9's train_dual.py.
var detailSetting = setting{AMP: true}

func cmdReport(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("report",
		"onnxmem report [-batch N] [-img N] [-step run|train|model] [-data FILE.yaml] [-epochs E] [-seed S] [-workers N] [-close-mosaic N] [-device NAME|SIZE] [-batches LIST]\n"+
			"               [-train [-boxes N] [-optimizer NAME] [-ema=false] [-warm-steps N]] [-alloc-conf OPTS] [-json|-csv] [-svg FILE] [-v] [MODEL.onnx]",
		"Report predicts the peak of the model step (with -train, the full train_dual.py\nstep) at common batch sizes in fp32 and AMP, each without checkpointing and\nwith 2 and 4 checkpoint segments; finds the largest batch of each that fits an\nRTX 4090 and an A100 of 40 and 80 GB (the profiles rtx4090, a100-40 and a100-80\nof onnxmem devices); and explains the AMP peak at one batch size: where it\nfalls, the largest tensors alive then and the totals by kind. MODEL.onnx is an\nONNX file or the name of a built-in model (onnxmem models lists them); without\nit, report uses the built-in "+defaultModel+", which needs no file.\n-csv writes one row for each setting and batch size: the setting, its largest\nbatch on each card (max_batch.CARD) and the prediction's -json fields.",
		"onnxmem report -train -img 512 yolov9-s")
	img, batches := f.imgFlag(), f.batchesFlag()
	batch := f.positive("batch", 16, "batch `size` of the run (with -step model or train: whose AMP peak is explained in detail)")
	train, conf := f.trainFlags(), f.allocConfFlag()
	stepName := f.stepFlag()
	data := f.String("data", "", "train on the YOLO dataset of the data `FILE.yaml` (default: the built-in COCO-like one)")
	epochs := f.positive("epochs", onnxmem.DefaultEpochs, "`E` epochs of the run")
	loader := loaderFlags(f, "`seed` of the run's box counts (without -data)")
	asJSON, asCSV, verbose := f.jsonFlag(), f.csvFlag(), f.verboseFlag()
	device := f.deviceFlag()
	svg := f.svgFlag("the plot of the peak against the batch size (-batches) of each setting, fp32 and AMP with 0, 2 and 4 segments, the cards' limits drawn:\nof the step (-step model or train), or by default of the run's densest iteration's step (onnxmem run -svg plots memory over a run)")
	f.familyFlag()
	path, code, ok := f.parseModel(args, true, stdout, stderr)
	if !ok {
		return code
	}
	switch {
	case *stepName == "eval":
		return f.usageError(stderr, "report has no validation step alone: onnxmem maxbatch -step eval or explain -eval")
	case *stepName != "" && f.isSet("train"):
		return f.usageError(stderr, "-step and -train: give one")
	case *stepName == "train":
		f.Set("train", "true")
	}
	if _, err := train(detailSetting); err != nil {
		return f.usageError(stderr, "%v", err)
	}
	devices := cards()
	if d, err := device(); err != nil {
		return f.usageError(stderr, "%v", err)
	} else if d != nil {
		devices = []onnxmem.Device{*d}
	}
	isDefault := path == ""
	if isDefault {
		path = defaultModel
	}
	m, err := f.load(path)
	if err != nil {
		return fail(stderr, err)
	}
	if wantsRun(m, *stepName, f.on("train")) {
		for _, name := range []string{"batches", "boxes", "warm-steps"} {
			if f.isSet(name) && (name != "batches" || *svg == "") {
				return f.usageError(stderr, "-%s applies to one step (or -batches to -svg's plot): add -step train or model (the default is the whole run)", name)
			}
		}
		return runReportCmd(f, conf, m, path, isDefault, devices, *batch, *img, *data, int(*epochs), loader, *svg, *batches, *asJSON, *asCSV, *verbose, stdout, stderr)
	}
	for _, name := range []string{"data", "epochs", "seed", "workers", "close-mosaic"} {
		if f.isSet(name) {
			return f.usageError(stderr, "-%s applies to the whole run: drop -step and -train", name)
		}
	}
	settings := settingsOf(precisions[:2], checkpointSegments) // fp32 and AMP
	detail, err := train(detailSetting)
	if err == nil {
		detail, err = conf(detail)
	}
	if err != nil {
		return f.usageError(stderr, "%v", err)
	}
	for i := range settings {
		settings[i], _ = train(settings[i]) // fails only as it did for detail
		settings[i], _ = conf(settings[i])
	}
	rep := &report{Model: m.Name, Path: path, model: m, Family: m.Family, Default: isDefault,
		Settings: settings, DetailSetting: detail, Devices: devices}
	if err := rep.simulate(m, *img, *batches, *batch, stderr, *verbose); err != nil {
		return fail(stderr, err)
	}
	if err := writeSVG(*svg, rep.plot()); err != nil {
		return fail(stderr, err)
	}
	switch {
	case *asJSON:
		err = writeJSON(stdout, rep.json())
	case *asCSV:
		err = rep.writeCSV(stdout)
	default:
		err = rep.print(stdout)
	}
	return exit(stderr, err)
}

// writeCSV writes the report as one table: a row for each setting and
// batch size, with the setting's largest batch on each card.
func (rep *report) writeCSV(w io.Writer) error {
	js := rep.json()
	header := []string{"setting"}
	for _, d := range js.Devices {
		header = append(header, "max_batch."+d.Name)
	}
	rt := reflect.TypeOf(resultJSON{})
	columns(rt, "", func(name string, _ []int) { header = append(header, name) })
	cw := csv.NewWriter(w)
	cw.Write(header)
	for _, s := range js.Settings {
		for _, r := range s.Results {
			rec := []string{s.Name}
			for _, n := range s.MaxBatch {
				rec = append(rec, strconv.FormatInt(n, 10))
			}
			v := reflect.ValueOf(r)
			columns(rt, "", func(_ string, path []int) { rec = append(rec, cell(v, path)) })
			cw.Write(rec)
		}
	}
	cw.Flush()
	return cw.Error()
}

type report struct {
	Model, Path string
	model       *onnxmem.Model // the model loaded from Path
	Family      string         // the model's family, which names the training script's default
	Default     bool           // Path is the default model
	Settings    []setting
	Devices     []onnxmem.Device
	// Results[s][b] is setting s at the b-th batch size; MaxBatch[s][c] the
	// largest batch of setting s that fits Devices[c] (Device.Fits).
	Results  [][]*onnxmem.Result
	MaxBatch [][]int64
	// DetailSetting is the setting explained: AMP without checkpointing,
	// train_dual.py's default, as a model or training step like the other
	// settings. Detail is its result at the batch size explained.
	DetailSetting setting
	Detail        *onnxmem.Result
}

// scriptDefault returns, after prefix, the note that AMP is train_dual.py's
// default for a model of family, which only a YOLOv9 model has: "" for a
// model of another family, whose training script onnxmem does not know.
func scriptDefault(family, prefix string) string {
	if family != "yolov9" {
		return ""
	}
	return prefix + "train_dual.py's default"
}

// segmentsNote says, for a family whose training script cannot checkpoint
// its model as simulated, what it takes: YOLOv9's layers take lists of
// earlier outputs, which checkpoint_sequential cannot pass.
func segmentsNote(family string) string {
	if family != "yolov9" {
		return ""
	}
	return "train_dual.py checkpoints nothing itself, and checkpoint_sequential(model.model, K) fails on YOLOv9\n(Concat and CBFuse take lists): docs/checkpointing.md gives the patch to models/yolo.py that runs these segments"
}

// simulate fills the report's results: the peaks, then the largest batches,
// then the detail, each batch of work spread over the CPUs.
func (rep *report) simulate(m *onnxmem.Model, img imageSize, batches []int64, batch int64, stderr io.Writer, verbose bool) error {
	ns, nb, nc := len(rep.Settings), len(batches), len(rep.Devices)
	step := steps(stderr, verbose, "report", ns*(nb+nc))
	rep.Results = make([][]*onnxmem.Result, ns)
	rep.MaxBatch = make([][]int64, ns)
	for i := range rep.Settings {
		rep.Results[i] = make([]*onnxmem.Result, nb)
		rep.MaxBatch[i] = make([]int64, nc)
	}
	err := parallel(ns*nb, func(i int) error {
		s, b := rep.Settings[i/nb], batches[i%nb]
		r, err := m.Simulate(s.scenario(b, img))
		rep.Results[i/nb][i%nb] = r
		step(fmt.Sprintf("%s at batch %d", s, b))
		return err
	})
	if err != nil {
		return err
	}
	err = parallel(ns*nc, func(i int) error {
		s, d := rep.Settings[i/nc], rep.Devices[i%nc]
		sc := s.scenario(1, img)
		sc.Device = d.Name
		n, _, err := m.MaxBatch(sc, searchLimit(rep.Results[i/nc], d))
		rep.MaxBatch[i/nc][i%nc] = n
		step(fmt.Sprintf("%s on %s", s, d.Name))
		return err
	})
	if err != nil {
		return err
	}
	for i, s := range rep.Settings {
		for j, b := range batches {
			if s.equal(rep.DetailSetting) && b == batch {
				rep.Detail = rep.Results[i][j]
			}
		}
	}
	if rep.Detail == nil {
		rep.Detail, err = m.Simulate(rep.DetailSetting.scenario(batch, img))
	}
	return err
}

// searchLimit is the limit of the search for the largest batch that fits
// the device: maxBatchLimit, or less when a batch size already simulated
// cannot fit (the bytes it requests at its peak exceed the usable memory,
// so no layout of the allocator holds them). The memory grows with the
// batch size, so the answer is the one a search up to maxBatchLimit finds,
// in fewer simulations.
//
// A result cuts the search only when it is the step MaxBatch simulates on
// the device: that one runs with the device's cuBLAS workspace. Model
// steps keep no cuBLAS workspace resident, so theirs changes nothing; a
// train or eval step cuts only when it was simulated with the device's:
// on a device of the same workspace, or on none where the device's is the
// engine's default.
func searchLimit(rs []*onnxmem.Result, d onnxmem.Device) int64 {
	limit := int64(maxBatchLimit)
	for _, r := range rs {
		sc := r.Scenario
		ws := int64(sim.DefaultCuBLASWorkspace)
		if on, err := onnxmem.ParseDevice(sc.Device); err == nil && sc.Device != "" {
			ws = on.CuBLASWorkspace
		}
		if sc.Step != onnxmem.ModelStep && ws != d.CuBLASWorkspace {
			continue
		}
		if r.PeakRequested > d.Usable() {
			limit = min(limit, sc.Batch-1)
		}
	}
	return limit
}

func (rep *report) print(w io.Writer) error {
	d := rep.Detail
	fmt.Fprintf(w, "model  %s (%s)\n", rep.Model, source(rep.Path, rep.model))
	if rep.Default {
		fmt.Fprintln(w, "       the default model; pass MODEL.onnx or a built-in name for another")
	}
	if rep.DetailSetting.Train {
		fmt.Fprintf(w, "step   %s; %s\n", rep.DetailSetting.step(rep.Family), inputOf(d.Scenario))
	} else {
		fmt.Fprintf(w, "step   model step: forward, loss sum(o.sum()), backward; %s\n", inputOf(d.Scenario))
	}
	fmt.Fprintf(w, "       fp32: float32 throughout; amp: torch.autocast float16%s;\n"+
		"       kN: checkpoint_sequential with N segments (the first N-1 are checkpointed)\n\n", scriptDefault(rep.Family, ", "))

	fmt.Fprintln(w, "peak GiB:")
	tw := newTable(w)
	fmt.Fprint(tw, "batch")
	for _, s := range rep.Settings {
		fmt.Fprintf(tw, "\t%s", s)
	}
	fmt.Fprint(tw, "\t\n")
	for j := range rep.Results[0] {
		fmt.Fprintf(tw, "%d", rep.Results[0][j].Scenario.Batch)
		for i := range rep.Settings {
			fmt.Fprintf(tw, "\t%s", gib(rep.Results[i][j].Peak))
		}
		fmt.Fprint(tw, "\t\n")
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nlargest batch that fits:")
	tw = newTable(w)
	fmt.Fprint(tw, "card\tusable GiB")
	for _, s := range rep.Settings {
		fmt.Fprintf(tw, "\t%s", s)
	}
	fmt.Fprint(tw, "\t\n")
	for c, d := range rep.Devices {
		fmt.Fprintf(tw, "%s\t%s", d.Name, gib(d.Usable()))
		for i := range rep.Settings {
			fmt.Fprintf(tw, "\t%s", batchLimit(rep.MaxBatch[i][c]))
		}
		fmt.Fprint(tw, "\t\n")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "fits: the step runs to its end with the caching allocator limited to the card's\n"+
		"usable memory, as PyTorch runs it (it releases its cache and retries before it\n"+
		"runs out of memory), batch sizes up to %d. Usable is the total less the CUDA\n"+
		"context, %s: see onnxmem devices.\n", maxBatchLimit, contextNote(rep.Devices))
	var other []string
	for _, d := range rep.Devices {
		if !d.Exact() {
			other = append(other, d.Name)
		}
	}
	if len(other) > 0 {
		fmt.Fprintf(w, "band: %s take the H200's cuDNN workspaces here; maxbatch -device gives each one's band\n", strings.Join(other, ", "))
	}
	fmt.Fprintln(w)

	detail := rep.DetailSetting.String()
	if note := scriptDefault(rep.Family, ""); note != "" {
		detail += " (" + note + ")"
	}
	fmt.Fprintf(w, "where the peak is at batch %d, %s:\n", d.Scenario.Batch, detail)
	return printPeak(w, d, "after the step")
}

// palette colors a plot's settings, in the order of the report's columns.
var palette = []string{"#1f5fbf", "#6b9be0", "#a9c4ee", "#d2691e", "#e8a25c", "#f2cf9e"}

// plot is the peak against the batch size, on a log-2 axis: a line for
// each setting (fp32 and AMP, each with 0, 2 and 4 segments) and the
// usable memory of each card, dashed.
func (rep *report) plot() *plot {
	p := &plot{Title: rep.Model + ": peak of the " + strings.SplitN(rep.DetailSetting.step(rep.Family), " (", 2)[0] + " against the batch size",
		XLabel: "batch size (log 2)", YLabel: "peak allocated (GiB)", LogX: true}
	var xmin, xmax float64
	for i, st := range rep.Settings {
		s := series{Name: st.String(), Color: palette[i%len(palette)], Dots: true}
		for _, r := range rep.Results[i] {
			s.X, s.Y = append(s.X, float64(r.Scenario.Batch)), append(s.Y, gibf(r.Peak))
		}
		if len(s.X) > 0 {
			xmin, xmax = s.X[0], s.X[len(s.X)-1]
		}
		p.Series = append(p.Series, s)
	}
	if xmax <= xmin {
		xmax = 2 * xmin
	}
	p.XMin, p.XMax = xmin, xmax
	for i, d := range rep.Devices {
		p.Series = append(p.Series, series{Name: fmt.Sprintf("%s usable (%s GiB)", d.Name, gib(d.Usable())),
			Color: []string{"#c00", "#808", "#080"}[i%3], Dash: true,
			X: []float64{xmin, xmax}, Y: []float64{gibf(d.Usable()), gibf(d.Usable())}})
	}
	return p
}

// printPeak writes where a step's peak falls, its largest tensors alive
// then and the totals by kind; after says when GPU_mem is read.
func printPeak(w io.Writer, d *onnxmem.Result, after string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  phase\t%s (event %d of %d)\n", orDash(d.PeakPhase), d.PeakEvent, d.Events)
	fmt.Fprintf(tw, "  node\t%s\n", orDash(d.PeakNode))
	fmt.Fprintf(tw, "  layer\t%s\n", layer(d.PeakLayer))
	fmt.Fprintf(tw, "  peak\t%s GiB allocated, %s requested, %s reserved\n", gib(d.Peak), gib(d.PeakRequested), gib(d.PeakReserved))
	fmt.Fprintf(tw, "  GPU_mem\t%s, memory_reserved()/1e9 %s, as the training loop prints it\n", d.GPUMem(), after)
	if err := tw.Flush(); err != nil {
		return err
	}

	live := 0
	for _, k := range d.PeakByKind {
		live += k.Count
	}
	shown := d.AtPeak[:min(len(d.AtPeak), tensorsShown)]
	fmt.Fprintf(w, "\nlargest tensors alive at the peak (%d of %d):\n", len(shown), live)
	tw = newTable(w)
	fmt.Fprint(tw, "GiB\tkind\t  name\n")
	for _, t := range shown {
		fmt.Fprintf(tw, "%s\t%s\t  %s\n", gib(t.Bytes), t.Kind, t.Name)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprint(w, "\nalive at the peak, by kind:\n")
	tw = newTable(w)
	fmt.Fprint(tw, "GiB\tbuffers\t  kind\n")
	var total int64
	for _, k := range d.PeakByKind {
		fmt.Fprintf(tw, "%s\t%d\t  %s\n", gib(k.Bytes), k.Count, k.Kind)
		total += k.Bytes
	}
	if slack := d.Peak - total; slack != 0 {
		fmt.Fprintf(tw, "%s\t\t  allocator slack: blocks larger than their rounded requests\n", gib(slack))
	}
	fmt.Fprintf(tw, "%s\t%d\t  total: the peak allocated\n", gib(d.Peak), live)
	if err := tw.Flush(); err != nil {
		return err
	}
	// What another card may change: cuDNN picks its engines, and so its
	// workspaces, by GPU; cuBLAS sizes its workspace by compute capability.
	// The tensors are the same on any card for this PyTorch.
	var ws int64
	for _, k := range d.PeakByKind {
		if k.Kind == "workspaces" {
			ws += k.Bytes
		}
	}
	_, err := fmt.Fprintf(w, "on any card with this PyTorch the same but for the workspaces (%s GiB here), which cuDNN and cuBLAS size by card\n", gib(ws))
	return err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// contextNote says what CUDA context the devices assume.
func contextNote(ds []onnxmem.Device) string {
	for _, d := range ds[1:] {
		if d.Context != ds[0].Context {
			return "an assumption that differs by card"
		}
	}
	return fmt.Sprintf("assumed to be %d MiB", ds[0].Context>>20)
}

// batchLimit formats a largest batch: "1024+" when the search stopped at its
// limit.
func batchLimit(n int64) string {
	if n >= maxBatchLimit {
		return strconv.FormatInt(n, 10) + "+"
	}
	return strconv.FormatInt(n, 10)
}

type reportJSON struct {
	Model string `json:"model"`
	Path  string `json:"path"`
	// Builtin says that path names a built-in model rather than a file.
	Builtin bool `json:"builtin"`
	// Devices are the cards of the max_batch lists, sizes in bytes;
	// MaxBatchLimit the largest batch size the search considers.
	Devices       []deviceJSON  `json:"devices"`
	MaxBatchLimit int64         `json:"max_batch_limit"`
	Settings      []settingJSON `json:"settings"`
	// Detail is AMP without checkpointing at the batch size explained.
	Detail resultJSON `json:"detail"`
}

// settingJSON is one column of the report's tables.
type settingJSON struct {
	Name     string       `json:"name"`
	AMP      bool         `json:"amp"`
	Segments int          `json:"segments"`
	Results  []resultJSON `json:"results"`
	// MaxBatch is the largest batch that fits each device (its peak reserved
	// within the device's usable memory).
	MaxBatch []int64 `json:"max_batch"`
}

func (rep *report) json() reportJSON {
	js := reportJSON{Model: rep.Model, Path: rep.Path, Builtin: builtin(rep.Path), MaxBatchLimit: maxBatchLimit,
		Detail: newResultJSON(rep.Detail, true)}
	for _, d := range rep.Devices {
		dj := newDeviceJSON(d)
		dj.Sources = ""
		js.Devices = append(js.Devices, dj)
	}
	for i, s := range rep.Settings {
		js.Settings = append(js.Settings, settingJSON{Name: s.String(), AMP: s.AMP, Segments: s.Segments,
			Results: newResultsJSON(rep.Results[i]), MaxBatch: rep.MaxBatch[i]})
	}
	return js
}
