package main

import (
	"fmt"
	"io"

	"github.com/onnxmem/onnxmem/onnxmem"
)

func cmdExplain(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("explain",
		"onnxmem explain [-batch N] [-img N] [-step run|train|eval|model] [-data FILE.yaml] [-amp|-half] [-segments K] [-eval [-eval-float]] [-train [-boxes N] [-optimizer NAME] [-ema=false] [-warm-steps N]]\n"+
			"                [-alloc-conf OPTS] [-json|-csv] MODEL.onnx",
		"By default, for a YOLOv9 model, the step is train_dual.py's at its run's densest\niteration (AMP, SGD, EMA; the box counts of the iteration whose densest image\ncarries the most boxes, on -data's dataset or the built-in COCO-like one);\n-step model, train or eval names another.\nExplain says what makes a step's peak: the bytes alive at the peak by kind\n"+
			"(parameters, the EMA or half copy, optimizer state, gradients, activations,\n"+
			"activation gradients, autocast copies, kernel copies, loss tensors, workspaces,\n"+
			"the input, the loop's tensors and the allocator's slack: what unsplit blocks hold\n"+
			"beyond their requests), which sum to the peak; the same by the top-level layer\n"+
			"that made them (-1: none); and the largest tensors with the op that made each.\n"+
			"-csv writes the by-layer table.",
		"onnxmem explain -batch 16 -amp -train yolov9-c")
	batch := f.positive("batch", 16, "batch `size`")
	img, set, eval := f.imgFlag(), f.stepFlags(), f.evalFlags()
	step, data := f.runStepFlags()
	asJSON, asCSV := f.jsonFlag(), f.csvFlag()
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
	ex, err := m.Explain(st.scenario(*batch, *img))
	if err == nil && st.Run != nil {
		err = st.Run.Err()
	}
	if err != nil {
		return fail(stderr, err)
	}
	if *asCSV {
		return exit(stderr, writeCSV(stdout, newExplainJSON(m.Name, ex).ByLayer))
	}
	if *asJSON {
		return exit(stderr, writeJSON(stdout, newExplainJSON(m.Name, ex)))
	}
	err = printExplain(stdout, m, ex)
	if err == nil {
		st.printNote(stdout)
	}
	return exit(stderr, err)
}

// explainJSON is explain -json's output: by_kind maps each kind to its
// bytes (they sum to peak), by_layer lists the layers in order.
type explainJSON struct {
	Model   string           `json:"model"`
	Result  resultJSON       `json:"result"`
	Peak    int64            `json:"peak"`
	ByKind  map[string]int64 `json:"by_kind"`
	ByLayer []layerJSON      `json:"by_layer"`
	Largest []tensorJSON     `json:"largest"`
}

type layerJSON struct {
	Layer int    `json:"layer"`
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
	Count int    `json:"count"`
}

func newExplainJSON(model string, ex *onnxmem.Explanation) explainJSON {
	js := explainJSON{Model: model, Result: newResultJSON(ex.Result, false), Peak: ex.Result.Peak, ByKind: map[string]int64{}}
	for _, k := range ex.ByKind {
		js.ByKind[k.Kind] = k.Bytes
	}
	for _, l := range ex.ByLayer {
		js.ByLayer = append(js.ByLayer, layerJSON(l))
	}
	for _, t := range ex.Result.AtPeak {
		js.Largest = append(js.Largest, tensorJSON(t))
	}
	return js
}

func printExplain(w io.Writer, m *onnxmem.Model, ex *onnxmem.Explanation) error {
	r := ex.Result
	fmt.Fprintf(w, "%s, batch %d\npeak %s GiB allocated (%s GiB reserved), %s\n\n",
		stepTitle(m, r.Scenario), r.Scenario.Batch, gib(ex.Result.Peak), gib(r.PeakReserved), where(r))
	tw := newTable(w)
	fmt.Fprintln(tw, "GiB\tshare\ttensors\t  alive at the peak")
	for _, k := range ex.ByKind {
		fmt.Fprintf(tw, "%s\t%.1f%%\t%d\t  %s\n", gib(k.Bytes), 100*float64(k.Bytes)/float64(ex.Result.Peak), k.Count, k.Kind)
	}
	fmt.Fprintln(tw, "\t\t\t")
	fmt.Fprintln(tw, "GiB\tshare\ttensors\t  by top-level layer")
	for _, l := range ex.ByLayer {
		name := fmt.Sprintf("%d %s", l.Layer, l.Name)
		if l.Layer < 0 {
			name = "none: the input, the loop's tensors, the slack"
		}
		fmt.Fprintf(tw, "%s\t%.1f%%\t%d\t  %s\n", gib(l.Bytes), 100*float64(l.Bytes)/float64(ex.Result.Peak), l.Count, name)
	}
	fmt.Fprintln(tw, "\t\t\t")
	fmt.Fprintln(tw, "GiB\tkind\t  largest tensors, and the op that made each")
	for _, t := range ex.Result.AtPeak {
		fmt.Fprintf(tw, "%s\t%s\t  %s (%s)\n", gib(t.Bytes), t.Kind, t.Name, cmpOr(t.Node, "resident"))
	}
	return tw.Flush()
}
