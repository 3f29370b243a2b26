package main

import (
	"fmt"
	"io"
	"sync/atomic"
	"text/tabwriter"

	"github.com/onnxmem/onnxmem/onnxmem"
)

func cmdSweep(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("sweep",
		"onnxmem sweep [-img N] [-batches LIST] [-step run|train|eval|model] [-data FILE.yaml] [-amp|-half] [-segments K] [-eval [-eval-float]] [-train [-boxes N] [-optimizer NAME] [-ema=false] [-warm-steps N]] [-alloc-conf OPTS] [-json|-csv] [-svg FILE] [-v] MODEL.onnx",
		"By default, for a YOLOv9 model, the step is train_dual.py's at its run's densest\niteration (AMP, SGD, EMA; the box counts of the iteration whose densest image\ncarries the most boxes, on -data's dataset or the built-in COCO-like one);\n-step model, train or eval names another.\nSweep predicts the step (fp32 unless -amp or -half, checkpointed with\n-segments) at each batch size and prints a table of peaks (GiB), or JSON\n(bytes) with -json; -svg also writes a plot of the peak against the batch size.",
		"onnxmem sweep -batches 1,8,32 -svg peak.svg yolov9-s")
	img, batches, set, eval := f.imgFlag(), f.batchesFlag(), f.stepFlags(), f.evalFlags()
	step, data := f.runStepFlags()
	asJSON, svg, verbose := f.jsonFlag(), f.svgFlag("the plot of peak against batch size"), f.verboseFlag()
	asCSV := f.csvFlag()
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
	var rs []*onnxmem.Result
	if st.Run == nil {
		rs, err = m.Sweep(st.scenario(0, *img), *batches, progress(stderr, *verbose, "sweep", *batches))
	} else { // each batch its own densest iteration
		rs = make([]*onnxmem.Result, len(*batches))
		done := progress(stderr, *verbose, "sweep", *batches)
		var n atomic.Int64
		err = parallel(len(*batches), func(i int) error {
			var err error
			rs[i], err = m.Simulate(st.scenario((*batches)[i], *img))
			if done != nil {
				done(int(n.Add(1)), len(*batches))
			}
			return err
		})
		if err == nil {
			err = st.Run.Err()
		}
	}
	if err != nil {
		return fail(stderr, err)
	}
	if err := writeSVG(*svg, sweepPlot(m, rs)); err != nil {
		return fail(stderr, err)
	}
	switch {
	case *asCSV:
		err = writeCSV(stdout, newResultsJSON(rs))
	case *asJSON:
		err = writeJSON(stdout, sweepJSON{Model: m.Name, Results: newResultsJSON(rs)})
	default:
		if err = printSweep(stdout, m, rs); err == nil {
			st.printNote(stdout)
		}
	}
	return exit(stderr, err)
}

type sweepJSON struct {
	Model   string       `json:"model"`
	Results []resultJSON `json:"results"`
}

// stepTitle names the simulated step, above tables and plots.
func stepTitle(m *onnxmem.Model, sc onnxmem.Scenario) string {
	st := settingOf(sc)
	t := fmt.Sprintf("%s: %s %s, %s", m.Name, st, st.step(m.Family), inputOf(sc))
	if sc.AllocConf != "" {
		t += "; allocator " + sc.AllocConf
	}
	return t
}

// newTable returns a tabwriter that right-aligns cells; a line's last cell,
// not followed by a tab, flows left-aligned after the columns.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
}

func printSweep(w io.Writer, m *onnxmem.Model, rs []*onnxmem.Result) error {
	if len(rs) > 0 {
		fmt.Fprintln(w, stepTitle(m, rs[0].Scenario))
	}
	tw := newTable(w)
	fmt.Fprint(tw, "batch\tpeak GiB\tpeak req GiB\treserved GiB\tafter fwd GiB\tafter bwd GiB\tphase\tlayer\t  peak node\n")
	for _, r := range rs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t  %s\n", r.Scenario.Batch,
			gib(r.Peak), gib(r.PeakRequested), gib(r.PeakReserved), gib(r.AfterForward), gib(r.AfterBackward),
			orDash(r.PeakPhase), layer(r.PeakLayer), orDash(r.PeakNode))
	}
	return tw.Flush()
}

// sweepPlot is the peak against the batch size.
func sweepPlot(m *onnxmem.Model, rs []*onnxmem.Result) *plot {
	s := series{Name: "peak allocated", Color: "#1f5fbf", Dots: true}
	title := m.Name + ": peak against batch size"
	for _, r := range rs {
		s.X = append(s.X, float64(r.Scenario.Batch))
		s.Y = append(s.Y, gibf(r.Peak))
	}
	if len(rs) > 0 {
		title = stepTitle(m, rs[0].Scenario) + ": peak against batch size"
	}
	xmax := 1.0 // the x axis starts at 0
	for _, x := range s.X {
		xmax = max(xmax, x)
	}
	return &plot{
		Title:  title,
		XLabel: "batch size", YLabel: "peak allocated (GiB)",
		Series: []series{s}, XMin: 0, XMax: xmax * 1.03, // room for the last dot
	}
}
