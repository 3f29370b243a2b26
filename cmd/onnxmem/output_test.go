package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/onnxmem"
)

// TestDiff checks onnxmem diff on snapshots that timeline -snapshot wrote:
// the same step agrees event for event, another one parts at its first
// event, and a file that is not a snapshot is an error.
func TestDiff(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "s.pickle")
	if code, _, stderr := runCmd(t, "", "timeline", "-step", "model", "-batch", "2", "-img", "320", "-snapshot", snap, "yolov9-t"); code != 0 {
		t.Fatalf("timeline -snapshot: %d %s", code, stderr)
	}
	code, stdout, stderr := runCmd(t, "", "diff", "-batch", "2", "-img", "320", snap, "yolov9-t")
	if code != 0 || !strings.Contains(stdout, "the two traces agree event for event") || !strings.Contains(stdout, "(+0.00%)") {
		t.Errorf("the same step: %d %q %q", code, stdout, stderr)
	}
	code, stdout, _ = runCmd(t, "", "diff", "-batch", "2", "-img", "320", "-amp", snap, "yolov9-t")
	if code != 0 || !strings.Contains(stdout, "they first part at event 0") {
		t.Errorf("another step: %d %q", code, stdout)
	}
	bad := filepath.Join(dir, "bad.pickle")
	os.WriteFile(bad, []byte("not a pickle"), 0o644)
	if code, _, stderr := runCmd(t, "", "diff", bad, "yolov9-t"); code != 1 || !strings.Contains(stderr, "onnxmem: snapshot") {
		t.Errorf("a bad file: %d %q", code, stderr)
	}
}

// TestGolden checks the text and JSON outputs for yolov9-s against
// testdata. They change whenever the analysis does: check the diff, then run
// go test ./cmd/onnxmem -update.
func TestGolden(t *testing.T) {
	m := smallModel(t)
	for _, tc := range []struct {
		file string
		args []string
	}{
		{"sweep-s.txt", []string{"sweep", "-step", "model", "-batches", "1,8", m}},
		{"sweep-s.json", []string{"sweep", "-step", "model", "-batches", "1,8", "-json", m}},
		{"report-s.txt", []string{"report", "-step", "model", "-batches", "1,8", "-batch", "8", m}},
		{"report-train-s.txt", []string{"report", "-train", "-optimizer", "adamw", "-batches", "1,8", "-batch", "8", m}},
		{"timeline-s.txt", []string{"timeline", "-step", "model", "-batch", "8", m}},
		{"maxbatch-s.txt", []string{"maxbatch", "-step", "model", "-budget", "24", m}},
		{"maxbatch-eval-t4-s.txt", []string{"maxbatch", "-eval", "-device", "t4", "-img", "384x640", m}},
		{"explain-eval-s.txt", []string{"explain", "-eval", "-eval-float", "-batch", "16", m}},
		{"maxbatch-rtx4090-amp-s.txt", []string{"maxbatch", "-step", "model", "-device", "rtx4090", "-amp", m}},
		{"maxbatch-rtx4090-amp-for64-s.txt", []string{"maxbatch", "-device", "rtx4090", "-amp", "-for-batch", "64", m}},
		{"maxbatch-budget-for100-s.txt", []string{"maxbatch", "-budget", "24", "-for-batch", "100", m}},
		{"maxbatch-rtx4090-for128-s.txt", []string{"maxbatch", "-device", "rtx4090", "-for-batch", "128", m}},
		{"knobs-s.txt", []string{"knobs", "-step", "model", "-batch", "8", "-budget", "2.5", m}},
		{"knobs-train-s.txt", []string{"knobs", "-train", "-boxes", "64", "-batch", "8", "-budget", "4", m}},
		{"claims.txt", []string{"claims", "-batch", "16", "-img", "320", "-boxes", "8"}},
		{"claims.json", []string{"claims", "-batch", "16", "-img", "320", "-boxes", "8", "-json"}},
		{"devices.csv", []string{"devices", "-csv"}},
		{"sweep-s.csv", []string{"sweep", "-step", "model", "-batches", "1,8", "-csv", m}},
		{"knobs-s.csv", []string{"knobs", "-step", "model", "-batch", "8", "-budget", "2.5", "-csv", m}},
		{"explain-s.csv", []string{"explain", "-step", "model", "-batch", "8", "-csv", m}},
		{"run-s.csv", []string{"run", "-batch", "4", "-epochs", "1", "-iters", "2", "-val-images", "8", "-csv", m}},
		{"maxbatch-rtx4090-amp-s.csv", []string{"maxbatch", "-step", "model", "-device", "rtx4090", "-amp", "-csv", m}},
		{"maxbatch-rtx4090-for128-s.csv", []string{"maxbatch", "-device", "rtx4090", "-for-batch", "128", "-csv", m}},
		{"plan-s.csv", []string{"plan", "-step", "model", "-batch", "8", "-amp", "-budget", "2", "-csv", m}},
		{"report-s.csv", []string{"report", "-step", "model", "-batches", "1,8", "-batch", "8", "-csv", m}},
		{"plan-s.txt", []string{"plan", "-step", "model", "-batch", "8", "-amp", "-budget", "2", m}},
		{"plan-s.json", []string{"plan", "-step", "model", "-batch", "8", "-amp", "-budget", "2", "-json", m}},
		{"sweep-ckpt-s.txt", []string{"sweep", "-step", "model", "-batches", "1,8", "-checkpoint", "0-3,5-9", m}},
		{"sweep-rect-s.txt", []string{"sweep", "-step", "model", "-batches", "1,8", "-img", "384x640", "-amp", m}},
		{"explain-train-s.txt", []string{"explain", "-train", "-amp", "-batch", "8", m}},
		{"explain-s.json", []string{"explain", "-step", "model", "-batch", "8", "-json", m}},
		{"run-s.txt", []string{"run", "-batch", "8", "-amp", "-epochs", "1", "-iters", "3", "-val-images", "20", "-device", "rtx4090", m}},
		{"run-ddp.txt", []string{"run", "-gpus", "2", "-batch", "16", "-epochs", "1", "-iters", "3", "-val-images", "20", "-device", "h100-80", m}},
		{"run-ddp.json", []string{"run", "-gpus", "2", "-batch", "16", "-epochs", "1", "-iters", "2", "-val-images", "8", "-device", "h100-80", "-json", m}},
		{"explain-run-s.txt", []string{"explain", "-batch", "8", m}},
		{"knobs-run-s.txt", []string{"knobs", "-batch", "8", "-budget", "4", m}},
		{"maxbatch-run-rtx4090-s.txt", []string{"maxbatch", "-device", "rtx4090", m}},
		{"maxbatch-run-rtx4090-s.json", []string{"maxbatch", "-device", "rtx4090", "-json", m}},
		{"run-s.json", []string{"run", "-batch", "4", "-epochs", "1", "-iters", "2", "-val-images", "8", "-json", m}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			code, stdout, stderr := runCmd(t, "", tc.args...)
			if code != 0 || stderr != "" {
				t.Fatalf("exit code %d, stderr %q; want 0 and none", code, stderr)
			}
			golden(t, tc.file, stdout)
		})
	}
}

// TestJSON checks that each -json output is one JSON value consistent with
// itself.
func TestJSON(t *testing.T) {
	m := smallModel(t)
	decode := func(args []string, v any) {
		t.Helper()
		code, stdout, stderr := runCmd(t, "", args...)
		if code != 0 || stderr != "" {
			t.Fatalf("%q: exit code %d, stderr %q", args, code, stderr)
		}
		dec := json.NewDecoder(strings.NewReader(stdout))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
	}

	var rep reportJSON
	decode([]string{"report", "-step", "model", "-json", "-batches", "1,2", "-batch", "4", m}, &rep)
	var names []string
	for _, st := range rep.Settings {
		names = append(names, st.Name)
		if len(st.Results) != 2 || len(st.MaxBatch) != len(rep.Devices) {
			t.Errorf("report -json: %s: %d results, %d max batches", st.Name, len(st.Results), len(st.MaxBatch))
			continue
		}
		for _, r := range st.Results {
			if r.AMP != st.AMP || r.Segments != st.Segments || r.Half {
				t.Errorf("report -json: %s has a result of amp %v, segments %d, half %v", st.Name, r.AMP, r.Segments, r.Half)
			}
		}
		for c := 1; c < len(st.MaxBatch); c++ {
			if st.MaxBatch[c] < st.MaxBatch[c-1] {
				t.Errorf("report -json: %s: max batches %v shrink on larger cards", st.Name, st.MaxBatch)
			}
		}
	}
	if want := []string{"fp32", "fp32 k2", "fp32 k4", "amp", "amp k2", "amp k4"}; !slices.Equal(names, want) {
		t.Errorf("report -json: settings %q, want %q", names, want)
	}
	if d := rep.Detail; d.Batch != 4 || !d.AMP || d.Segments != 0 || len(d.AtPeak) == 0 || len(d.PeakByKind) == 0 {
		t.Errorf("report -json: detail at batch %d, amp %v, segments %d, with %d tensors and %d kinds; want batch 4, amp, no segments",
			d.Batch, d.AMP, d.Segments, len(d.AtPeak), len(d.PeakByKind))
	}

	var kn knobsJSON
	decode([]string{"knobs", "-step", "model", "-json", "-batch", "4", "-budget", "1.5", m}, &kn)
	var rows []string
	for _, r := range kn.Rows {
		rows = append(rows, fmt.Sprintf("%s %d", r.Precision, r.Segments))
		base := kn.Rows[0].Peak
		// A step whose reserved memory stays within the limit runs the
		// same under it; one that would reserve more may fit after the
		// allocator releases its cache, but not with a peak allocated
		// beyond the limit's double.
		if r.Saving != base-r.Peak || r.SavingFraction != float64(base-r.Peak)/float64(base) ||
			(r.PeakReserved <= kn.Budget && !r.Fits) || (r.Peak > 2*kn.Budget && r.Fits) {
			t.Errorf("knobs -json: %s %d: inconsistent saving or fits: %+v", r.Precision, r.Segments, r)
		}
		if (r.RecomputeFLOPs > 0) != (r.Segments > 1) || r.ForwardFLOPs != kn.Rows[0].ForwardFLOPs ||
			r.RecomputeOverhead != float64(r.RecomputeFLOPs)/float64(r.ForwardFLOPs+r.BackwardFLOPs) {
			t.Errorf("knobs -json: %s %d: inconsistent FLOPs: %+v", r.Precision, r.Segments, r)
		}
	}
	if want := []string{"fp32 0", "fp32 2", "fp32 4", "amp 0", "amp 2", "amp 4", "half 0", "half 2", "half 4"}; !slices.Equal(rows, want) {
		t.Errorf("knobs -json: rows %q, want %q", rows, want)
	}
	if kn.Batch != 4 || kn.Height != 640 || kn.Budget != 3<<29 {
		t.Errorf("knobs -json: batch %d, height %d, budget %d", kn.Batch, kn.Height, kn.Budget)
	}

	var tl timelineJSON
	decode([]string{"timeline", "-step", "model", "-json", "-batch", "2", m}, &tl)
	if len(tl.Samples) != tl.Result.Events || tl.Result.Events == 0 {
		t.Fatalf("timeline -json: %d samples for %d events", len(tl.Samples), tl.Result.Events)
	}
	var peak int64
	for i, s := range tl.Samples {
		if s.Event != i {
			t.Fatalf("sample %d has event %d", i, s.Event)
		}
		peak = max(peak, s.Allocated)
	}
	if peak != tl.Result.Peak || tl.Samples[tl.Result.PeakEvent].Allocated != peak {
		t.Errorf("timeline -json: samples peak at %d, result says %d at event %d", peak, tl.Result.Peak, tl.Result.PeakEvent)
	}
	if n := len(tl.Phases); n == 0 || tl.Phases[0].Start != 0 || tl.Phases[n-1].End != len(tl.Samples) {
		t.Errorf("timeline -json: phases %+v do not cover %d samples", tl.Phases, len(tl.Samples))
	}

	var mb maxBatchJSON
	decode([]string{"maxbatch", "-step", "model", "-json", "-budget", "4", m}, &mb)
	if mb.MaxBatch < 1 || mb.Result == nil || mb.Result.Peak > mb.Budget || mb.Budget != 4<<30 {
		t.Errorf("maxbatch -json: %+v", mb)
	}
	var big sweepJSON
	decode([]string{"sweep", "-step", "model", "-json", "-batches", strconv.FormatInt(mb.MaxBatch, 10) + "," + strconv.FormatInt(mb.MaxBatch+1, 10), m}, &big)
	if big.Results[0].Peak > mb.Budget || big.Results[1].Peak <= mb.Budget {
		t.Errorf("maxbatch %d in %d bytes, but the sweep gives peaks %d and %d", mb.MaxBatch, mb.Budget, big.Results[0].Peak, big.Results[1].Peak)
	}
	var none maxBatchJSON
	decode([]string{"maxbatch", "-step", "model", "-json", "-budget", "0.001", m}, &none)
	if none.MaxBatch != 0 || none.Result != nil {
		t.Errorf("maxbatch -json in 1 MiB: %+v, want batch 0", none)
	}

	// On a device the peak reserved must be within the usable memory.
	var on maxBatchJSON
	decode([]string{"maxbatch", "-step", "model", "-json", "-device", "t4", "-amp", m}, &on)
	t4, err := onnxmem.ParseDevice("t4")
	if err != nil {
		t.Fatal(err)
	}
	if on.Device == nil || on.Device.Name != "t4" || on.Device.Usable != t4.Usable() || on.Budget != 0 ||
		on.MaxBatch < 1 || on.Result == nil || on.Result.PeakReserved > on.Device.Usable || !on.Result.AMP {
		t.Errorf("maxbatch -json -device t4: %+v", on)
	}
	decode([]string{"sweep", "-step", "model", "-json", "-amp", "-batches", strconv.FormatInt(on.MaxBatch+1, 10), m}, &big)
	if big.Results[0].PeakReserved <= on.Device.Usable {
		t.Errorf("maxbatch -device t4: max batch %d, but batch %d reserves %d of %d usable", on.MaxBatch, on.MaxBatch+1, big.Results[0].PeakReserved, on.Device.Usable)
	}

	// -for-batch lists the segments tried up to the first that fits: under
	// the limit, where the allocator may release its cache and retry, so
	// the answer's uncapped reserved peak may exceed the usable memory; its
	// allocated peak may not.
	var fb forBatchJSON
	decode([]string{"maxbatch", "-json", "-device", "t4", "-amp", "-for-batch", strconv.FormatInt(2*on.MaxBatch, 10), m}, &fb)
	if fb.Segments == nil || fb.Result == nil || len(fb.Tried) < 2 || fb.Tried[0].Segments != 0 || fb.Tried[0].Fits {
		t.Fatalf("maxbatch -for-batch %d -device t4: %+v", 2*on.MaxBatch, fb)
	}
	last := fb.Tried[len(fb.Tried)-1]
	if last.Segments != *fb.Segments || !last.Fits || fb.Result.Segments != last.Segments ||
		fb.Result.PeakReserved != last.PeakReserved || last.Peak > t4.Usable() || fb.Result.Batch != 2*on.MaxBatch {
		t.Errorf("maxbatch -for-batch: the last tried %+v is not the answer %d, %+v", last, *fb.Segments, fb.Result)
	}
	for _, tr := range fb.Tried[:len(fb.Tried)-1] {
		if tr.Fits || tr.PeakReserved <= t4.Usable() {
			t.Errorf("maxbatch -for-batch: %+v tried before the answer fits", tr)
		}
	}
	var nofit forBatchJSON
	decode([]string{"maxbatch", "-json", "-device", "t4", "-for-batch", "1000", m}, &nofit)
	if nofit.Segments != nil || nofit.Result != nil || len(nofit.Tried) != len(segmentCandidates(mustLoad(t, m).Layers())) {
		t.Errorf("maxbatch -for-batch 1000 -device t4: %+v, want no answer and every count tried", nofit)
	}
}

// TestSVG checks that the plots are well-formed XML with an svg root and
// polylines, titled with the step they show; report's has its batches on a
// log-2 axis (ticks 1, 2, 4, 8) and a dashed line for each card's limit.
func TestSVG(t *testing.T) {
	m := smallModel(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		args  []string
		title string
	}{
		{"sweep", []string{"sweep", "-step", "model", "-batches", "1,2,4"}, "fp32 model step (forward, loss, backward), image 640x640: peak against batch size"},
		{"sweep1", []string{"sweep", "-step", "model", "-batches", "3", "-amp", "-segments", "2", "-img", "384x640"}, "amp k2 model step (forward, loss, backward), image 384x640: peak"},
		{"timeline", []string{"timeline", "-batch", "1", "-half", "-img", "320"}, "half model step (forward, loss, backward), image 320x320, batch 1: memory over the step"},
		{"run", []string{"run", "-batch", "2", "-img", "320", "-epochs", "2", "-iters", "3", "-device", "24G"}, "memory over the training run, batch 2"},
		{"report", []string{"report", "-step", "model", "-batches", "1,2,4,8", "-batch", "2", "-img", "320"}, "peak of the model step against the batch size"},
		{"report-run", []string{"report", "-batches", "1,2,4,8", "-batch", "4", "-img", "320", "-device", "rtx4090"}, "peak of the step of the training run&#39;s densest iteration against the batch size"},
	} {
		path := filepath.Join(dir, tc.name+".svg")
		code, _, stderr := runCmd(t, "", append(tc.args, "-svg", path, m)...)
		if code != 0 || stderr != "" {
			t.Fatalf("%s: exit code %d, stderr %q", tc.name, code, stderr)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), tc.title) {
			t.Errorf("%s: the plot's title does not say %q", tc.name, tc.title)
		}
		if strings.HasPrefix(tc.name, "report") {
			for _, want := range []string{">1</text>", ">2</text>", ">4</text>", ">8</text>", "batch size (log 2)", "rtx4090 usable", `stroke-dasharray="6 4"`} {
				if !strings.Contains(string(data), want) {
					t.Errorf("report: the plot lacks %q", want)
				}
			}
		}
		dec := xml.NewDecoder(bytes.NewReader(data))
		var elems []string
		for {
			tok, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: not well-formed XML: %v", tc.name, err)
			}
			if se, ok := tok.(xml.StartElement); ok {
				elems = append(elems, se.Name.Local)
			}
		}
		if len(elems) == 0 || elems[0] != "svg" || !strings.Contains(strings.Join(elems, " "), "polyline") {
			t.Errorf("%s: elements %v: want an svg root with polylines", tc.name, elems[:min(len(elems), 10)])
		}
	}
	code, _, stderr := runCmd(t, "", "sweep", "-step", "model", "-batches", "1", "-svg", filepath.Join(dir, "no", "such", "dir.svg"), m)
	if code != 1 || !strings.HasPrefix(stderr, "onnxmem: open ") {
		t.Errorf("unwritable -svg: exit code %d, stderr %q; want 1 and the error", code, stderr)
	}
}

func TestThinKeepsExtremes(t *testing.T) {
	var xs, ys []float64
	for i := range 100000 {
		xs = append(xs, float64(i))
		ys = append(ys, float64(i%977))
	}
	ys[54321] = 5000
	tx, ty := thin(xs, ys, func(x float64) int { return int(x / 100) })
	if len(tx) > 4000 || len(tx) != len(ty) {
		t.Fatalf("thinned to %d points", len(tx))
	}
	top := 0.0
	for i := range tx {
		if i > 0 && tx[i] <= tx[i-1] {
			t.Fatalf("x not increasing at %d", i)
		}
		top = max(top, ty[i])
	}
	if top != 5000 || tx[0] != 0 || tx[len(tx)-1] != 99999 {
		t.Errorf("thin lost the peak or the ends: top %v, x from %v to %v", top, tx[0], tx[len(tx)-1])
	}
}

func TestTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi, step float64
		labels       string
	}{
		{0, 42.2, 5, "0 5 10 15 20 25 30 35 40 45"},
		{0, 0.73, 0.1, "0.0 0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8"},
		{0, 7370, 1000, "0 1000 2000 3000 4000 5000 6000 7000 8000"},
		{0, 0, 0.1, "0.0"},
	} {
		ts, step := ticks(tc.lo, tc.hi)
		var labels []string
		for _, v := range ts {
			labels = append(labels, tickLabel(v, step))
		}
		if got := strings.Join(labels, " "); step != tc.step || got != tc.labels {
			t.Errorf("ticks(%v, %v) = %q step %v; want %q step %v", tc.lo, tc.hi, got, step, tc.labels, tc.step)
		}
	}
}

// TestReportMaxBatch checks the report's largest batches, whose searches
// start from the peaks already simulated, against Model.MaxBatch up to 1024.
func TestReportMaxBatch(t *testing.T) {
	path := smallModel(t)
	code, stdout, stderr := runCmd(t, "", "report", "-step", "model", "-json", "-batches", "1,8,64", path)
	if code != 0 || stderr != "" {
		t.Fatalf("exit code %d, stderr %q", code, stderr)
	}
	var rep reportJSON
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	m, err := onnxmem.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range rep.Devices {
		names = append(names, d.Name)
	}
	if !slices.Equal(names, reportDevices) {
		t.Errorf("devices %q, want %q", names, reportDevices)
	}
	for _, st := range rep.Settings {
		for c, dj := range rep.Devices {
			want, _, err := m.MaxBatch(onnxmem.Scenario{AMP: st.AMP, Segments: st.Segments, Device: dj.Name}, maxBatchLimit)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.MaxBatch[c]; got != want {
				t.Errorf("%s on %s: max batch %d, Model.MaxBatch says %d", st.Name, dj.Name, got, want)
			}
		}
	}
}

// mustLoad loads a model file.
func mustLoad(t *testing.T, path string) *onnxmem.Model {
	t.Helper()
	m, err := onnxmem.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSearchLimit(t *testing.T) {
	// The cut follows the peak requested, which no layout under the limit
	// can hold, not the reserved one, which releasing the cache may bring
	// under it.
	model := onnxmem.Scenario{Step: onnxmem.ModelStep}
	at := func(sc onnxmem.Scenario, b int64) onnxmem.Scenario { sc.Batch = b; return sc }
	rs := []*onnxmem.Result{
		{Scenario: at(model, 1), PeakRequested: 10, Peak: 11, PeakReserved: 20},
		{Scenario: at(model, 8), PeakRequested: 80, Peak: 88, PeakReserved: 160},
		{Scenario: at(model, 64), PeakRequested: 640, Peak: 704, PeakReserved: 1280},
	}
	const context = 100
	for _, tc := range []struct{ usable, want int64 }{{5, 0}, {10, 7}, {79, 7}, {80, 63}, {640, maxBatchLimit}} {
		d := onnxmem.Device{Total: tc.usable + context, Context: context, CuBLASWorkspace: 8 << 20}
		if got := searchLimit(rs, d); got != tc.want {
			t.Errorf("usable %d: limit %d, want %d", tc.usable, got, tc.want)
		}
	}
	// A train or eval step simulated with another cuBLAS workspace than the
	// device's does not cut the search; one with the device's does.
	t4, err := onnxmem.ParseDevice("t4")
	if err != nil {
		t.Fatal(err)
	}
	train := []*onnxmem.Result{{Scenario: onnxmem.Scenario{Batch: 8, Step: onnxmem.TrainStep}, PeakRequested: 80}}
	eval := []*onnxmem.Result{{Scenario: onnxmem.Scenario{Batch: 8, Step: onnxmem.EvalStep, Device: "t4"}, PeakRequested: 80}}
	small := onnxmem.Device{Total: 50 + context, Context: context, CuBLASWorkspace: t4.CuBLASWorkspace}
	if got := searchLimit(train, small); got != maxBatchLimit {
		t.Errorf("train step with the default workspace: limit %d, want %d", got, maxBatchLimit)
	}
	if got := searchLimit(eval, small); got != 7 {
		t.Errorf("eval step with the device's workspace: limit %d, want 7", got)
	}
	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "0"}, {1023, "1023"}, {1024, "1024+"}} {
		if got := batchLimit(tc.n); got != tc.want {
			t.Errorf("batchLimit(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// TestTimelineCSV checks that timeline -csv writes the samples of -json,
// one row an event, under a header.
func TestTimelineCSV(t *testing.T) {
	m := smallModel(t)
	code, out, stderr := runCmd(t, "", "timeline", "-step", "model", "-batch", "2", "-csv", m)
	if code != 0 || stderr != "" {
		t.Fatalf("timeline -csv: exit code %d, stderr %q", code, stderr)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	code, js, stderr := runCmd(t, "", "timeline", "-step", "model", "-batch", "2", "-json", m)
	if code != 0 || stderr != "" {
		t.Fatalf("timeline -json: exit code %d, stderr %q", code, stderr)
	}
	var tl timelineJSON
	if err := json.Unmarshal([]byte(js), &tl); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"event", "phase", "allocated", "requested", "reserved", "live"}}
	for _, s := range tl.Samples {
		want = append(want, []string{strconv.Itoa(s.Event), s.Phase, strconv.FormatInt(s.Allocated, 10),
			strconv.FormatInt(s.Requested, 10), strconv.FormatInt(s.Reserved, 10), strconv.FormatInt(s.Live, 10)})
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("timeline -csv differs from -json's samples (-json +csv):\n%s", diff)
	}
}
