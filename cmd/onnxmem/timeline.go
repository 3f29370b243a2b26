package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/onnxmem/onnxmem/onnxmem"
)

func cmdTimeline(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("timeline",
		"onnxmem timeline [-batch N] [-img N] [-step run|train|eval|model] [-data FILE.yaml] [-amp|-half] [-segments K] [-eval [-eval-float]] [-train [-boxes N] [-optimizer NAME] [-ema=false] [-warm-steps N]] [-alloc-conf OPTS] [-json|-csv] [-svg FILE] [-snapshot FILE.pickle] MODEL.onnx",
		"By default, for a YOLOv9 model, the step is train_dual.py's at its run's densest\niteration (AMP, SGD, EMA; the box counts of the iteration whose densest image\ncarries the most boxes, on -data's dataset or the built-in COCO-like one);\n-step model, train or eval names another.\nTimeline replays the measured step (fp32 unless -amp or -half,\ncheckpointed with -segments) and summarizes memory over it:\nbefore the step (m0), after the forward, the peak and where it falls, after the\nbackward. -svg plots allocated and reserved memory against the event index with\nthe phases shaded and the peak marked; -json writes the summary and every sample;\n-csv writes the samples, one row an event;\n-snapshot writes the step as torch.cuda.memory._dump_snapshot() does, for PyTorch's\nmemory_viz (python -m torch.cuda._memory_viz trace_plot FILE.pickle -o out.html).",
		"onnxmem timeline -batch 16 -svg step.svg yolov9-s")
	batch := f.positive("batch", 8, "batch `size`")
	img, set, eval := f.imgFlag(), f.stepFlags(), f.evalFlags()
	step, data := f.runStepFlags()
	asJSON, asCSV, svg := f.jsonFlag(), f.csvFlag(), f.svgFlag("the plot of memory over the step")
	snapshot := f.String("snapshot", "", "write the step's allocator history as a PyTorch memory snapshot to `FILE.pickle`")
	f.familyFlag()
	m, code, ok := f.parseAndLoad(args, stdout, stderr)
	if !ok {
		return code
	}
	st, err := set()
	if err == nil {
		st, err = eval(st)
	}
	if err == nil {
		st, m, err = f.runDefault(m, st, *step, *data)
	}
	if err != nil {
		return f.usageError(stderr, "%v", err)
	}
	sc := st.scenario(*batch, *img)
	r, samples, err := m.Timeline(sc)
	if err == nil && st.Run != nil {
		err = st.Run.Err()
	}
	if err != nil {
		return fail(stderr, err)
	}
	if *snapshot != "" {
		if err := writeSnapshot(*snapshot, m, sc); err != nil {
			return fail(stderr, err)
		}
		fmt.Fprintf(stderr, "onnxmem: %s holds every allocation of the step at its requested size, as PyTorch's trace records it:\n"+
			"its top, with what was allocated before, is the requested peak, %s GiB; max_memory_allocated, %s GiB, adds the\n"+
			"allocator's rounding and the blocks it left unsplit\n", *snapshot, gib(r.PeakRequested), gib(r.Peak))
	}
	spans := phaseSpans(samples)
	if err := writeSVG(*svg, timelinePlot(m, r, samples, spans)); err != nil {
		return fail(stderr, err)
	}
	if *asJSON || *asCSV {
		js := timelineJSON{Model: m.Name, Result: newResultJSON(r, true), Phases: spans,
			Samples: make([]sampleJSON, len(samples))}
		for i, s := range samples {
			js.Samples[i] = sampleJSON(s)
		}
		if *asCSV {
			err = writeCSV(stdout, js.Samples)
		} else {
			err = writeJSON(stdout, js)
		}
	} else {
		if err = printTimeline(stdout, m, r, spans); err == nil {
			st.printNote(stdout)
		}
	}
	return exit(stderr, err)
}

// span is a run of events of one phase: events Start to End-1.
type span struct {
	Phase string `json:"phase"`
	Start int    `json:"start"`
	End   int    `json:"end"`
}

// phaseSpans cuts the samples into runs of one phase, in order.
func phaseSpans(samples []onnxmem.Sample) []span {
	var out []span
	for _, s := range samples {
		if n := len(out); n > 0 && out[n-1].Phase == s.Phase {
			out[n-1].End = s.Event + 1
			continue
		}
		out = append(out, span{Phase: s.Phase, Start: s.Event, End: s.Event + 1})
	}
	return out
}

type timelineJSON struct {
	Model  string     `json:"model"`
	Result resultJSON `json:"result"`
	Phases []span     `json:"phases"`
	// Samples are the allocator's counters after each event.
	Samples []sampleJSON `json:"samples"`
}

// sampleJSON is onnxmem.Sample with JSON names.
type sampleJSON struct {
	Event     int    `json:"event"`
	Phase     string `json:"phase"`
	Allocated int64  `json:"allocated"`
	Requested int64  `json:"requested"`
	Reserved  int64  `json:"reserved"`
	Live      int64  `json:"live"`
}

func printTimeline(w io.Writer, m *onnxmem.Model, r *onnxmem.Result, spans []span) error {
	fmt.Fprintf(w, "%s, batch %d\n", stepTitle(m, r.Scenario), r.Scenario.Batch)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(label string, b int64, note string) {
		fmt.Fprintf(tw, "%s\t%8s GiB", label, gib(b))
		if note != "" {
			fmt.Fprint(tw, "\t", note)
		}
		fmt.Fprintln(tw)
	}
	row("m0", r.M0, "allocated before the step: parameters, buffers and the input")
	row("after forward", r.AfterForward, "")
	row("forward peak", r.ForwardPeak, "")
	row("peak", r.Peak, fmt.Sprintf("at event %d of %d: %s, node %s", r.PeakEvent, r.Events, where(r), orDash(r.PeakNode)))
	row("peak requested", r.PeakRequested, "before the allocator's rounding")
	row("peak reserved", r.PeakReserved, "segments the allocator holds")
	row("after backward", r.AfterBackward, "the outputs and the loss released")
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprint(w, "phases:")
	for i, s := range spans {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(w, "%s %s %d-%d", sep, s.Phase, s.Start, s.End-1)
	}
	_, err := fmt.Fprintln(w)
	return err
}

// phaseFill is the shade of each phase in the timeline plot.
var phaseFill = map[string]string{
	"forward": "#e3eefb", "loss": "#fbe9c8", "backward": "#e2f3e0", "cleanup": "#eeeeee",
}

// timelinePlot is allocated and reserved memory against the event index.
func timelinePlot(m *onnxmem.Model, r *onnxmem.Result, samples []onnxmem.Sample, spans []span) *plot {
	alloc := series{Name: "allocated", Color: "#1f5fbf"}
	res := series{Name: "reserved", Color: "#e08a00"}
	for _, s := range samples {
		x := float64(s.Event)
		alloc.X, alloc.Y = append(alloc.X, x), append(alloc.Y, gibf(s.Allocated))
		res.X, res.Y = append(res.X, x), append(res.Y, gibf(s.Reserved))
	}
	p := &plot{
		Title:  fmt.Sprintf("%s, batch %d: memory over the step", stepTitle(m, r.Scenario), r.Scenario.Batch),
		XLabel: "event index", YLabel: "GiB",
		Series: []series{res, alloc}, XMin: 0, XMax: float64(max(len(samples), 1)),
	}
	for _, s := range spans {
		fill, ok := phaseFill[s.Phase]
		if !ok {
			fill = "#f4f4f4"
		}
		p.Bands = append(p.Bands, band{X0: float64(s.Start), X1: float64(s.End), Label: s.Phase, Fill: fill})
	}
	if r.PeakEvent >= 0 {
		p.Marks = append(p.Marks, mark{X: float64(r.PeakEvent), Y: gibf(r.Peak),
			Label: fmt.Sprintf("peak %s GiB (%s)", gib(r.Peak), where(r))})
	}
	return p
}
