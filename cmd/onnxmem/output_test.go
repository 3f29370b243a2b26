package main

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestGolden checks the text and JSON outputs for yolov9-s against
// testdata. They change whenever the analysis does: check the diff, then run
// go test ./cmd/onnxmem -update.
func TestGolden(t *testing.T) {
	m := smallModel(t)
	for _, tc := range []struct {
		file string
		args []string
	}{
		{"sweep-s.txt", []string{"sweep", "-batches", "1,8", m}},
		{"sweep-s.json", []string{"sweep", "-batches", "1,8", "-json", m}},
		{"report-s.txt", []string{"report", "-batches", "1,8", "-batch", "8", m}},
		{"timeline-s.txt", []string{"timeline", "-batch", "8", m}},
		{"maxbatch-s.txt", []string{"maxbatch", "-budget", "24", m}},
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
	decode([]string{"report", "-json", "-batches", "1,2", "-batch", "4", m}, &rep)
	if len(rep.Results) != 2 || rep.Detail.Batch != 4 || len(rep.Detail.AtPeak) == 0 || len(rep.Detail.PeakByKind) == 0 {
		t.Errorf("report -json: %d results, detail at batch %d with %d tensors and %d kinds",
			len(rep.Results), rep.Detail.Batch, len(rep.Detail.AtPeak), len(rep.Detail.PeakByKind))
	}
	if d := cmp.Diff(notSimulated(scenario(4, 640)), rep.NotSimulated, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("report -json: not_simulated differs from Scenario.Supported (-want +got):\n%s", d)
	}

	var tl timelineJSON
	decode([]string{"timeline", "-json", "-batch", "2", m}, &tl)
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
	decode([]string{"maxbatch", "-json", "-budget", "4", m}, &mb)
	if mb.MaxBatch < 1 || mb.Result == nil || mb.Result.Peak > mb.Budget || mb.Budget != 4<<30 {
		t.Errorf("maxbatch -json: %+v", mb)
	}
	var big sweepJSON
	decode([]string{"sweep", "-json", "-batches", strconv.FormatInt(mb.MaxBatch, 10) + "," + strconv.FormatInt(mb.MaxBatch+1, 10), m}, &big)
	if big.Results[0].Peak > mb.Budget || big.Results[1].Peak <= mb.Budget {
		t.Errorf("maxbatch %d in %d bytes, but the sweep gives peaks %d and %d", mb.MaxBatch, mb.Budget, big.Results[0].Peak, big.Results[1].Peak)
	}
	var none maxBatchJSON
	decode([]string{"maxbatch", "-json", "-budget", "0.001", m}, &none)
	if none.MaxBatch != 0 || none.Result != nil {
		t.Errorf("maxbatch -json in 1 MiB: %+v, want batch 0", none)
	}
}

// TestSVG checks that the plots are well-formed XML with an svg root and
// polylines.
func TestSVG(t *testing.T) {
	m := smallModel(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"sweep", []string{"sweep", "-batches", "1,2,4"}},
		{"sweep1", []string{"sweep", "-batches", "3"}},
		{"timeline", []string{"timeline", "-batch", "1"}},
	} {
		path := filepath.Join(dir, tc.name+".svg")
		code, _, stderr := runCmd(t, "", append(tc.args, "-svg", path, m)...)
		if code != 0 || stderr != "" {
			t.Fatalf("%s: exit code %d, stderr %q", tc.name, code, stderr)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		dec := xml.NewDecoder(f)
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
	code, _, stderr := runCmd(t, "", "sweep", "-batches", "1", "-svg", filepath.Join(dir, "no", "such", "dir.svg"), m)
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
