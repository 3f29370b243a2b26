package sim

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
)

// TestGroundTruthHistory replays the ground truth's model steps as it
// measured them, one after another in one process per model, in file order
// (Process), and wants their reserved peaks closer than each scenario
// predicted alone, within the bounds below. Its harnesses differ in where
// they empty the cache: the YOLOv9 steps (calibration.jsonl) empty it before
// the warm-up and again before the measured step (EmptyCacheStep), the
// torchvision steps only before the warm-up (EmptyCacheWarmUp). Both were
// found by replaying every combination: each other one leaves the median
// error above 0.1%.
func TestGroundTruthHistory(t *testing.T) {
	for _, c := range []struct {
		file                string
		mode                EmptyCache
		maxMedian, maxWorst float64 // percent, in order
		minExact            int     // scenarios within 0.01%, in order
	}{
		{"groundtruth/calibration.jsonl", EmptyCacheStep, 0.05, 3.5, 38},
		{"groundtruth/torchvision.jsonl", EmptyCacheWarmUp, 0.05, 7.2, 28},
	} {
		f, err := os.Open(onnxbuild.Shared(t, c.file))
		if err != nil {
			t.Fatal(err)
		}
		type line struct {
			Cfg, Model, Kind string
			Batch, Img       int64
			AMP              bool
			Segments         int
			Measured         struct {
				PeakReserved int64 `json:"peak_reserved"`
			}
		}
		var lines []line
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			if l.Kind == "model_step" {
				lines = append(lines, l)
			}
		}
		f.Close()
		var alone, inOrder []float64
		exact := 0
		var table strings.Builder
		fmt.Fprintf(&table, "%-18s %4s %2s %5s  %12s %9s %7s %9s %7s\n", "cfg", "prec", "k", "batch", "reserved MiB", "alone", "error", "in order", "error")
		var (
			m  *Model
			pr *Process
		)
		for i, l := range lines {
			if i == 0 || l.Model != lines[i-1].Model {
				if m, err = Load(filepath.Join(onnxbuild.SharedDir, l.Model)); err != nil {
					t.Fatal(err)
				}
				pr = m.NewProcess()
			}
			s := Options{Batch: l.Batch, Height: l.Img, Width: l.Img, AMP: l.AMP, Segments: l.Segments, EmptyCache: c.mode}
			got, r := inOrderAndAlone(t, pr, m, s)
			me := l.Measured.PeakReserved
			pct := func(x int64) float64 { return 100 * float64(x-me) / float64(me) }
			alone, inOrder = append(alone, absf(pct(r.PeakReserved))), append(inOrder, absf(pct(got.PeakReserved)))
			if got.PeakReserved == me {
				exact++
			}
			prec := map[bool]string{false: "fp32", true: "amp"}[l.AMP]
			fmt.Fprintf(&table, "%-18s %4s %2d %5d  %12.0f %9.0f %+6.2f%% %9.0f %+6.2f%%\n", l.Cfg, prec, l.Segments, l.Batch,
				float64(me)/(1<<20), float64(r.PeakReserved)/(1<<20), pct(r.PeakReserved), float64(got.PeakReserved)/(1<<20), pct(got.PeakReserved))
		}
		ma, mo, wo := median(alone), median(inOrder), slices.Max(inOrder)
		t.Logf("%s, %d model steps: reserved peak median error %.2f%% alone, %.2f%% in order (worst %.2f%%, %d to the byte)\n%s", c.file, len(lines), ma, mo, wo, exact, table.String())
		if mo >= ma || mo > c.maxMedian || wo > c.maxWorst || exact < c.minExact {
			t.Errorf("%s replayed in order: median error %.2f%% (alone %.2f%%), worst %.2f%%, %d to the byte: want the median below alone's and %.2f%%, the worst below %.1f%%, at least %d to the byte",
				c.file, mo, ma, wo, exact, c.maxMedian, c.maxWorst, c.minExact)
		}
	}
}

// inOrderAndAlone simulates s as the next scenario of pr, a process of m,
// and alone.
func inOrderAndAlone(t *testing.T, pr *Process, m *Model, s Options) (inOrder, alone *Result) {
	t.Helper()
	inOrder, err := pr.Simulate(s)
	if err != nil {
		t.Fatal(err)
	}
	if alone, err = m.Simulate(s); err != nil {
		t.Fatal(err)
	}
	return inOrder, alone
}

// median returns the median of x (the upper one of an even count).
func median(x []float64) float64 {
	y := slices.Clone(x)
	slices.Sort(y)
	return y[len(y)/2]
}

// absf returns |x|.
func absf(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestHarnessSweep replays calibration/harness_sweep.py's measurements:
// yolov9-t, -m, -e and gelan-c, which the ground truth lacks, each swept in
// one process by the ground truth's harness (fp32 then AMP, segments 0, 2
// and 4, batch 1 up). In order (Process), the requested peak is the
// measured one within 1 KiB (yolov9-e with two segments missed one
// [B, 256, 40, 40] tensor until the recomputation's early stop kept the
// values that nodes after it read alive to the stop), the allocated peak
// within 0.6%, and the reserved peak
// within a median of 0.06%, 54 of 144 to the byte, the worst 8.1%
// (yolov9-e under AMP with four segments at batch 1: the requests are the
// measured ones, where their blocks part is not found yet); each scenario
// alone, 46 to the byte and the worst 14.9%.
func TestHarnessSweep(t *testing.T) {
	f, err := os.Open(measured.Path("harness_sweep.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var inOrder, alone, peaks []float64
	exact, exactAlone := 0, 0
	var (
		m   *Model
		pr  *Process
		cfg string
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l struct {
			Cfg        string
			Batch, Img int64
			AMP        bool
			Segments   int
			Measured   struct {
				OOM          bool
				Peak         int64
				PeakReq      int64 `json:"peak_req"`
				PeakReserved int64 `json:"peak_reserved"`
			}
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Measured.OOM {
			continue
		}
		if l.Cfg != cfg {
			if m, err = Builtin(l.Cfg); err != nil {
				t.Fatal(err)
			}
			pr, cfg = m.NewProcess(), l.Cfg
		}
		s := Options{Batch: l.Batch, Height: l.Img, Width: l.Img, AMP: l.AMP, Segments: l.Segments}
		got, r := inOrderAndAlone(t, pr, m, s)
		me := l.Measured
		what := fmt.Sprintf("%s amp %v segments %d batch %d", l.Cfg, l.AMP, l.Segments, l.Batch)
		if d := got.PeakRequested - me.PeakReq; d < -1024 || d > 1024 {
			t.Errorf("%s: requested peak %d, measured %d", what, got.PeakRequested, me.PeakReq)
		}
		pct := func(x, y int64) float64 { return absf(100 * float64(x-y) / float64(y)) }
		peaks = append(peaks, pct(got.Peak, me.Peak))
		inOrder, alone = append(inOrder, pct(got.PeakReserved, me.PeakReserved)), append(alone, pct(r.PeakReserved, me.PeakReserved))
		if got.PeakReserved == me.PeakReserved {
			exact++
		}
		if r.PeakReserved == me.PeakReserved {
			exactAlone++
		}
	}
	t.Logf("%d steps: allocated peak worst %.2f%%; reserved peak in order median %.2f%%, worst %.2f%%, %d to the byte; alone %.2f%%, %.2f%%, %d",
		len(peaks), slices.Max(peaks), median(inOrder), slices.Max(inOrder), exact, median(alone), slices.Max(alone), exactAlone)
	if len(peaks) != 144 || slices.Max(peaks) > 0.65 || median(inOrder) > 0.1 || slices.Max(inOrder) > 10 || exact < 50 || exact <= exactAlone {
		t.Errorf("want 144 steps, the allocated peak within 0.65%%, the reserved peak in order within a median of 0.1%% and a worst of 10%%, at least 50 to the byte and more than alone")
	}
}

// TestHarnessSweepRepeat replays the two processes that
// calibration/va_sweep.py recorded by harness_sweep.py's protocol, each in
// order (Process): yolov9-t at batch 1 to 16 and gelan-c at batch 1 to 8,
// fp32 then AMP, segments 0, 2 and 4. They repeat scenarios of
// harness_sweep.jsonl after another history (that sweep went to batch 64
// and 32), which makes the measured reserved peaks of the same scenario
// differ by up to 2.8% (yolov9-t) and 6.9% (gelan-c fp32, 2 segments,
// batch 1): the floor that any prediction of a scenario's reserved peak
// meets without its process's history. In order, the prediction is the
// measured peak to the byte in 27 of yolov9-t's 30 (the worst 0.71%), and
// in 8 of gelan-c's 24, to a median of 0.27% and a worst of 5.0%.
func TestHarnessSweepRepeat(t *testing.T) {
	for _, c := range []struct {
		cfg      string
		exact    int
		maxWorst float64
	}{{"yolov9-t", 27, 1}, {"gelan-c", 8, 5.5}} {
		f, err := os.Open(measured.Path("va_sweep_") + c.cfg + ".json.gz")
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Scenarios []struct {
				Cfg      string
				Batch    int64
				AMP      bool
				Segments int
				Measured struct {
					OOM          bool
					PeakReserved int64 `json:"peak_reserved"`
				}
			}
		}
		err = json.NewDecoder(zr).Decode(&rec)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		m, err := Builtin(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		pr := m.NewProcess()
		var errs []float64
		exact := 0
		for _, s := range rec.Scenarios {
			if s.Measured.OOM {
				continue
			}
			r, err := pr.Simulate(Options{Batch: s.Batch, Height: 640, Width: 640, AMP: s.AMP, Segments: s.Segments})
			if err != nil {
				t.Fatal(err)
			}
			if r.PeakReserved == s.Measured.PeakReserved {
				exact++
			}
			errs = append(errs, absf(100*float64(r.PeakReserved-s.Measured.PeakReserved)/float64(s.Measured.PeakReserved)))
		}
		t.Logf("%s: %d steps, reserved peak in order %d to the byte, median %.2f%%, worst %.2f%%", c.cfg, len(errs), exact, median(errs), slices.Max(errs))
		if exact < c.exact || slices.Max(errs) > c.maxWorst {
			t.Errorf("%s: want at least %d to the byte and all within %.1f%%", c.cfg, c.exact, c.maxWorst)
		}
	}
}
