package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/onnxmem/onnxmem/onnxmem"
)

// nominalGiB are the nominal memory sizes of common cards, in GiB, for the
// report's "fits" columns. They are the capacity on the box, not what a
// process can use: the CUDA context and the allocator's fragmentation take
// some of it. Usable memory per card comes in a later change.
var nominalGiB = []int64{24, 40, 80}

// tensorsShown is how many of the largest tensors alive at the peak the
// report lists.
const tensorsShown = 10

func cmdReport(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("report",
		"onnxmem report [-img N] [-batches LIST] [-batch N] [-json] [-v] [MODEL.onnx]",
		"Report predicts the peak of the fp32 model step at common batch sizes, says\nwhether it fits cards of 24, 40 and 80 GiB, and explains the peak at one batch\nsize: where it falls, the largest tensors alive then and the totals by kind.\nWithout MODEL.onnx it reads "+defaultGraph+" (relative to the\ncurrent directory), or else the first *-train.onnx in that folder.",
		"onnxmem report -img 512 ../shared/yolov9/yolov9-s-train.onnx")
	img, batches := f.imgFlag(), f.batchesFlag()
	batch := f.positive("batch", 16, "batch `size` whose peak is explained in detail")
	asJSON, verbose := f.jsonFlag(), f.verboseFlag()
	path, code, ok := f.parseModel(args, true, stdout, stderr)
	if !ok {
		return code
	}
	isDefault := path == ""
	if isDefault {
		var err error
		if path, err = defaultModel(); err != nil {
			return fail(stderr, err)
		}
	}
	m, err := load(path)
	if err != nil {
		return fail(stderr, err)
	}
	rs, err := m.Sweep(scenario(0, *img), *batches, progress(stderr, *verbose, "report", *batches))
	if err != nil {
		return fail(stderr, err)
	}
	var detail *onnxmem.Result
	for _, r := range rs {
		if r.Scenario.Batch == *batch {
			detail = r
		}
	}
	if detail == nil {
		if detail, err = m.Simulate(scenario(*batch, *img)); err != nil {
			return fail(stderr, err)
		}
	}
	rep := &report{Model: m.Name, Path: path, Default: isDefault, Results: rs, Detail: detail, NotSimulated: notSimulated(detail.Scenario)}
	if *asJSON {
		err = writeJSON(stdout, rep.json())
	} else {
		err = rep.print(stdout)
	}
	return exit(stderr, err)
}

type report struct {
	Model, Path  string
	Default      bool // Path is the default model
	Results      []*onnxmem.Result
	Detail       *onnxmem.Result
	NotSimulated []string
}

// notSimulated lists, from Scenario.Supported, why the AMP and checkpointed
// variants of a scenario have no prediction yet.
func notSimulated(sc onnxmem.Scenario) []string {
	amp, seg := sc, sc
	amp.AMP, seg.Segments = true, 2
	var out []string
	for _, v := range []onnxmem.Scenario{amp, seg} {
		if err := v.Supported(); err != nil {
			out = append(out, strings.TrimPrefix(err.Error(), "onnxmem: "))
		}
	}
	return out
}

func (rep *report) print(w io.Writer) error {
	d := rep.Detail
	fmt.Fprintf(w, "model  %s (%s)\n", rep.Model, rep.Path)
	if rep.Default {
		fmt.Fprintln(w, "       the default model; pass MODEL.onnx for another")
	}
	fmt.Fprintf(w, "step   fp32 model step: forward, loss sum(o.sum()), backward; image %dx%d\n", d.Scenario.Height, d.Scenario.Width)
	if len(rep.NotSimulated) > 0 {
		fmt.Fprintf(w, "note   no figures for AMP or checkpointing: %s\n", strings.Join(rep.NotSimulated, "; "))
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprint(tw, "batch\tpeak GiB\tafter fwd GiB\tpeak at")
	for _, c := range nominalGiB {
		fmt.Fprintf(tw, "\tfits %d GiB", c)
	}
	fmt.Fprint(tw, "\t\n")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s", r.Scenario.Batch, gib(r.Peak), gib(r.AfterForward), where(r))
		for _, c := range nominalGiB {
			fmt.Fprintf(tw, "\t%s", yesNo(r.Peak <= c<<30))
		}
		fmt.Fprint(tw, "\t\n")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprint(w, "fits: the peak allocated against the card's nominal memory; the CUDA context and\nthe allocator's fragmentation are not subtracted yet, so a yes near the limit may\nstill run out of memory.\n\n")

	fmt.Fprintf(w, "where the peak is at batch %d:\n", d.Scenario.Batch)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  phase\t%s (event %d of %d)\n", orDash(d.PeakPhase), d.PeakEvent, d.Events)
	fmt.Fprintf(tw, "  node\t%s\n", orDash(d.PeakNode))
	fmt.Fprintf(tw, "  layer\t%s\n", layer(d.PeakLayer))
	fmt.Fprintf(tw, "  peak\t%s GiB allocated, %s requested, %s reserved\n", gib(d.Peak), gib(d.PeakRequested), gib(d.PeakReserved))
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
	return tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

type reportJSON struct {
	Model string `json:"model"`
	Path  string `json:"path"`
	// NominalCapacity are the card sizes of the table's fits columns, bytes.
	NominalCapacity []int64      `json:"nominal_capacity"`
	Results         []resultJSON `json:"results"`
	Detail          resultJSON   `json:"detail"`
	NotSimulated    []string     `json:"not_simulated"`
}

func (rep *report) json() reportJSON {
	caps := make([]int64, len(nominalGiB))
	for i, c := range nominalGiB {
		caps[i] = c << 30
	}
	ns := rep.NotSimulated
	if ns == nil {
		ns = []string{}
	}
	return reportJSON{Model: rep.Model, Path: rep.Path, NominalCapacity: caps,
		Results: newResultsJSON(rep.Results), Detail: newResultJSON(rep.Detail, true), NotSimulated: ns}
}
