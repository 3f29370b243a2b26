package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/onnxmem/onnxmem/onnxmem"
)

func cmdKnobs(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("knobs",
		"onnxmem knobs [-batch N] [-img N] [-budget GiB | -device NAME] [-step run|train|model] [-data FILE.yaml] [-train [-boxes N] [-optimizer NAME] [-ema=false] [-warm-steps N]] [-alloc-conf OPTS] [-json|-csv] MODEL.onnx",
		"By default, for a YOLOv9 model, the step is train_dual.py's at its run's densest\niteration (AMP, SGD, EMA; the box counts of the iteration whose densest image\ncarries the most boxes, on -data's dataset or the built-in COCO-like one);\n-step model, train or eval names another.\nKnobs shows what each memory knob buys at one batch size: the step in fp32, AMP and half precision (not\nfor -train), each without checkpointing and with 2 and 4\ncheckpoint segments. For each it gives the peak, the saving against fp32\nwithout checkpointing, whether the step fits -budget GiB or the card of -device (it runs to its\nend under that limit of the caching allocator), the extra FLOPs of\nrecomputing the checkpointed layers, and where the peak falls. FLOPs are\ncounted from the graph: a multiply-add is 2, the backward twice the forward.",
		"onnxmem knobs -batch 32 -budget 40 yolov9-c")
	batch := f.positive("batch", 64, "batch `size`")
	img := f.imgFlag()
	limits, conf := f.limitFlags(), f.allocConfFlag()
	train := f.trainFlags()
	step, data := f.runStepFlags()
	asJSON, asCSV := f.jsonFlag(), f.csvFlag()
	f.familyFlag()
	m, code, ok := f.parseAndLoad(args, stdout, stderr)
	if !ok {
		return code
	}
	if *step == "eval" {
		return f.usageError(stderr, "knobs compares training steps: -step eval does not apply (maxbatch -step eval, explain -eval)")
	}
	base, err := train(setting{})
	if err == nil {
		base, m, err = f.runDefault(m, base, *step, *data)
	}
	if err != nil {
		return f.usageError(stderr, "%v", err)
	}
	var settings []setting
	for _, st := range settingsOf(precisions, checkpointSegments) {
		t, err := train(setting{AMP: st.AMP, Segments: st.Segments})
		if err == nil && base.Train && !t.Train { // -step train or the run's densest iteration
			t.Train, t.Boxes, t.Optimizer, t.EMA, t.Run = true, base.Boxes, base.Optimizer, base.EMA, base.Run
		}
		if err == nil {
			t, err = conf(t)
		}
		if err != nil {
			return f.usageError(stderr, "%v", err)
		} else if !st.Half || !t.Train {
			t.Half = st.Half
			settings = append(settings, t)
		}
	}
	c, err := limits()
	if err != nil {
		return f.usageError(stderr, "%v", err)
	}
	ks, err := knobs(m, settings, *batch, *img, c)
	if err != nil {
		return fail(stderr, err)
	}
	t := knobTable{Model: m.Name, Family: m.Family, Batch: *batch, Img: *img, Limit: c, Knobs: ks}
	switch {
	case *asCSV:
		err = writeCSV(stdout, t.json().Rows)
	case *asJSON:
		err = writeJSON(stdout, t.json())
	default:
		if err = t.print(stdout); err == nil {
			base.printNote(stdout)
		}
	}
	return exit(stderr, err)
}

// knob is one setting's prediction and arithmetic.
type knob struct {
	Setting setting
	Result  *onnxmem.Result
	// Fits says whether the step runs to its end under the limit; Verdict
	// is "yes", "no" or, on a card whose cuDNN workspaces were not
	// measured, "maybe" (fitCriterion.verdict).
	Fits    bool
	Verdict string
	Cost    onnxmem.Cost
}

// knobs simulates and counts each setting at a batch size, in the order
// given, and says whether each fits under the limit.
func knobs(m *onnxmem.Model, settings []setting, batch int64, img imageSize, lim fitCriterion) ([]knob, error) {
	out := make([]knob, len(settings))
	err := parallel(len(settings), func(i int) error {
		sc := settings[i].scenario(batch, img)
		r, fits, verdict, err := lim.verdict(m, sc)
		if err != nil {
			return err
		}
		c, err := m.Cost(sc)
		out[i] = knob{Setting: settings[i], Result: r, Fits: fits, Verdict: verdict, Cost: c}
		return err
	})
	return out, err
}

// knobTable is the knobs command's output. The first knob is the reference
// that savings are measured against.
type knobTable struct {
	Model  string
	Family string // the model's family, which names the training script's default
	Batch  int64
	Img    imageSize
	Limit  fitCriterion
	Knobs  []knob
}

// saving is the bytes knob k saves against the reference, and the fraction
// of the reference's peak they are.
func (t *knobTable) saving(k knob) (int64, float64) {
	base := t.Knobs[0].Result.Peak
	d := base - k.Result.Peak
	return d, float64(d) / float64(base)
}

func (t *knobTable) print(w io.Writer) error {
	base := t.Knobs[0]
	step := "model step (forward, loss, backward)"
	switch st := base.Setting; {
	case st.Run != nil:
		step = fmt.Sprintf("train_dual.py's step of its run's densest iteration (its densest image %d boxes, %s, EMA %v)", base.Result.Scenario.Boxes, st.Optimizer, st.EMA)
	case st.Train && t.Family != "yolov9":
		step = fmt.Sprintf("train step (cross-entropy on its logits, %s, EMA %v)", st.Optimizer, st.EMA)
	case st.Train:
		step = fmt.Sprintf("train_dual.py step (%d boxes an image, %s, EMA %v)", st.Boxes, st.Optimizer, st.EMA)
	}
	fmt.Fprintf(w, "%s: %s at batch %d, %s\n", t.Model, step, t.Batch, inputOf(scenario(t.Batch, t.Img)))
	fmt.Fprintf(w, "arithmetic: %s forward and %s backward a step, in every precision\n\n",
		flops(base.Cost.Forward), flops(base.Cost.Backward))
	tw := newTable(w)
	fmt.Fprintf(tw, "precision\tsegments\tpeak GiB\treserved GiB\tsaving\tsaving GiB\tfits\trecompute\t  peak at\n")
	for i, k := range t.Knobs {
		save, saveGiB, recompute := "-", "-", "-"
		if i > 0 {
			d, frac := t.saving(k)
			save, saveGiB = percent(frac), gib(d)
		}
		if k.Cost.Recompute > 0 {
			recompute = "+" + percent(k.Cost.Overhead())
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t  %s\n", k.Setting.precision(), k.Setting.Segments,
			gib(k.Result.Peak), gib(k.Result.PeakReserved), save, saveGiB, k.Verdict, recompute, where(k.Result))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, `
saving     against fp32 without checkpointing (the first row)
reserved   the caching allocator's segments at the peak, without a limit
fits       the step runs to its end under %s, the caching allocator's limit,
           without running out of memory (the allocator releases its cache
           and retries before it gives up)
recompute  the FLOPs of the checkpointed layers' forward, which the backward
           runs again, against the step's forward and backward; an upper bound:
           PyTorch stops the rerun after the last op that saves a tensor
amp        torch.autocast float16%s; half: model.half()
segments   N: the layers cut into N segments as checkpoint_sequential cuts them, the first N-1 checkpointed
`, t.Limit.limitText(), scriptDefault(t.Family, ", "))
	if note := segmentsNote(t.Family); err == nil && note != "" {
		_, err = fmt.Fprintf(w, "           (%s)\n", strings.ReplaceAll(note, "\n", "\n            "))
	}
	if err == nil && t.Limit.banded() {
		_, err = fmt.Fprintf(w, "band       %s's cuDNN workspaces were not measured: yes and no hold with any from none to the\n"+
			"           H200's, maybe with one of the two only; the figures are with the H200's\n", t.Limit.device.Name)
	}
	return err
}

// flops formats a FLOP count as TFLOP or GFLOP.
func flops(n int64) string {
	if n >= 1e12 {
		return strconv.FormatFloat(float64(n)/1e12, 'f', 2, 64) + " TFLOP"
	}
	return strconv.FormatFloat(float64(n)/1e9, 'f', 2, 64) + " GFLOP"
}

// percent formats a fraction as a percentage with one decimal.
func percent(f float64) string {
	return strconv.FormatFloat(100*f, 'f', 1, 64) + "%"
}

type knobsJSON struct {
	Model  string `json:"model"`
	Batch  int64  `json:"batch"`
	Height int64  `json:"height"`
	Width  int64  `json:"width"`
	// Budget is the allocator's limit, without a device; with one,
	// Device's usable memory is.
	Budget int64       `json:"budget,omitempty"`
	Device *deviceJSON `json:"device,omitempty"`
	// Rows are in the table's order; the first is the reference.
	Rows []knobJSON `json:"rows"`
}

// knobJSON is one row of the table, in bytes and FLOPs.
type knobJSON struct {
	Precision string `json:"precision"`
	Segments  int    `json:"segments"`
	Peak      int64  `json:"peak"`
	// PeakReserved is the reserved peak without a limit.
	PeakReserved int64 `json:"peak_reserved"`
	// Saving is the bytes less than the reference's peak (negative when
	// more), SavingFraction the same as a fraction of that peak.
	Saving         int64   `json:"saving"`
	SavingFraction float64 `json:"saving_fraction"`
	Fits           bool    `json:"fits"`
	// Band, on a card whose cuDNN workspaces were not measured, is "yes",
	// "no" or "maybe" (fits with one of the H200's workspaces and none);
	// Fits is then the answer with the H200's.
	Band           string `json:"band,omitempty"`
	ForwardFLOPs   int64  `json:"forward_flops"`
	BackwardFLOPs  int64  `json:"backward_flops"`
	RecomputeFLOPs int64  `json:"recompute_flops"`
	// RecomputeOverhead is RecomputeFLOPs / (ForwardFLOPs + BackwardFLOPs).
	RecomputeOverhead float64 `json:"recompute_overhead"`
	PeakPhase         string  `json:"peak_phase"`
	PeakLayer         int     `json:"peak_layer"`
	PeakNode          string  `json:"peak_node"`
}

func (t *knobTable) json() knobsJSON {
	js := knobsJSON{Model: t.Model, Batch: t.Batch, Height: t.Img.H, Width: t.Img.W}
	t.Limit.setJSON(&js.Budget, &js.Device)
	for _, k := range t.Knobs {
		d, frac := t.saving(k)
		r, c := k.Result, k.Cost
		js.Rows = append(js.Rows, knobJSON{
			Precision: k.Setting.precision(), Segments: k.Setting.Segments, Peak: r.Peak,
			PeakReserved: r.PeakReserved, Saving: d, SavingFraction: frac, Fits: k.Fits, Band: bandVerdictOf(t.Limit, k.Verdict),
			ForwardFLOPs: c.Forward, BackwardFLOPs: c.Backward, RecomputeFLOPs: c.Recompute,
			RecomputeOverhead: c.Overhead(),
			PeakPhase:         r.PeakPhase, PeakLayer: r.PeakLayer, PeakNode: r.PeakNode,
		})
	}
	return js
}
