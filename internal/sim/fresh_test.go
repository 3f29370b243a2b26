package sim_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// ownRun is one model step measured by calibration/yolov9_segments.py.
type ownRun struct {
	Cfg      string           `json:"cfg"`
	Batch    int64            `json:"batch"`
	Img      int64            `json:"img"`
	AMP      bool             `json:"amp"`
	Segments int              `json:"segments"`
	Result   map[string]int64 `json:"result"`
	// AllocConf is the PYTORCH_CUDA_ALLOC_CONF it ran under
	// (calibration/alloc_conf_steps.py), empty for the default.
	AllocConf string `json:"alloc_conf"`
	// Half says it ran in pure half precision (model.half()).
	Half bool `json:"half"`
}

// builtins keeps the built-in models a test has built, by cfg and classes.
type builtins map[string]*sim.Model

// get returns the built-in model of cfg, built on its first use.
func (b builtins) get(t *testing.T, cfg string) *sim.Model {
	t.Helper()
	return b.classes(t, cfg, 0)
}

// classes returns the built-in model of cfg with nc classes (0: its
// default), built on its first use.
func (b builtins) classes(t *testing.T, cfg string, nc int) *sim.Model {
	t.Helper()
	key := fmt.Sprintf("%s nc %d", cfg, nc)
	if m := b[key]; m != nil {
		return m
	}
	m, err := sim.BuiltinClasses(cfg, int64(nc))
	if err != nil {
		t.Fatal(err)
	}
	b[key] = m
	return m
}

// simulate predicts a measured step on the built-in model of its cfg, kept
// in models across calls.
func (s ownRun) simulate(t *testing.T, models builtins) *sim.Result {
	t.Helper()
	r, err := models.get(t, s.Cfg).Simulate(sim.Options{Batch: s.Batch, Height: s.Img, Width: s.Img, AMP: s.AMP, Half: s.Half,
		Segments: s.Segments, AllocConf: s.AllocConf, EmptyCache: ownHarness})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ownHarness is where the calibration scripts empty the cache: before each
// scenario's warm-up step, and not again before its measured step.
const ownHarness = sim.EmptyCacheWarmUp

// ownRuns reads the model steps of a calibration/yolov9_segments.py output.
func ownRuns(t *testing.T, name string) []ownRun {
	t.Helper()
	_, runs := scenarioFile[ownRun](t, name)
	return runs
}

// scenarioFile reads a calibration script's JSON output in results/: the
// card it ran on and its scenarios, of which it must hold one at least.
func scenarioFile[T any](t *testing.T, name string) (gpu string, scenarios []T) {
	t.Helper()
	b, err := measured.Read(name)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		GPU       string `json:"gpu"`
		Scenarios []T    `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(f.Scenarios) == 0 {
		t.Fatalf("%s: no scenarios", name)
	}
	return f.GPU, f.Scenarios
}

// jsonArrays reads calibration scripts' JSON outputs in results/ that hold
// one array of records each, and returns the records of all in order.
func jsonArrays[T any](t *testing.T, names ...string) []T {
	t.Helper()
	var out []T
	for _, name := range names {
		b, err := measured.Read(name)
		if err != nil {
			t.Fatal(err)
		}
		var more []T
		if err := json.Unmarshal(b, &more); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, more...)
	}
	return out
}

// TestOwnMeasurements compares the built-in models with the model steps that
// calibration/yolov9_segments.py measured on the H200 (the ground truth's
// harness rewritten from its README), which need no ../shared.
//
// The bytes the step requests depend on the program alone, and must match to
// the byte. The allocated bytes also depend on where the caching allocator
// puts each tensor, so on everything the process allocated before: the
// ground truth ran a model's scenarios one after another in one process, and
// the gradients left from one scenario shape the free blocks of the next.
// Simulate runs a scenario as the first of its process (parameters,
// empty_cache, a warm-up step, the measured step: ownHarness, as the script
// runs it). Against steps run each in a process of its own
// (yolov9_segments_fresh.json; yolov9_other_fresh.json: gelan-c, yolov9-t,
// -m and -e and images of 384 to 512, which the ground truth here does not
// have) the bytes after the forward are within 0.5%, the product's target,
// and are there within 0.17%; against steps
// run one after another (yolov9_segments.json), as the ground truth's were,
// they are within 1%: at batch 1 the history moves them by up to 0.6%.
//
// The bytes reserved at the peak (the caching allocator's segments) depend on
// the history even more: against the ground truth's model steps, each
// simulated alone, they are off by up to 33% (replayed in its order, 3.4%:
// TestGroundTruthHistory), against fresh processes by at most 4.6% (median 0; 6.3% before segments
// were placed top down, as cudaMalloc places them), held here to 10%.
func TestOwnMeasurements(t *testing.T) {
	const mib = 1 << 20
	var table strings.Builder
	fmt.Fprintf(&table, "%-14s %-9s %4s %2s %5s  %10s %7s  %10s %7s  %9s  %8s\n", "run", "cfg", "prec", "k", "batch",
		"peak MiB", "error", "after_fwd", "error", "req error", "reserved")
	models := builtins{}
	for _, f := range []struct {
		file, run string
		afterFwd  float64
		reserved  float64 // 0: not checked
	}{
		{"yolov9_segments_fresh.json", "fresh process", 0.005, 0.10},
		{"yolov9_other_fresh.json", "other, fresh", 0.005, 0.10},
		{"yolov9_segments.json", "in sequence", 0.01, 0},
	} {
		for _, s := range ownRuns(t, f.file) {
			r := s.simulate(t, models)
			me := s.Result
			pct := func(got, want int64) float64 { return 100 * float64(got-want) / float64(want) }
			prec := map[bool]string{false: "fp32", true: "amp"}[s.AMP]
			fmt.Fprintf(&table, "%-14s %-9s %4s %2d %5d  %10.1f %+6.2f%%  %10.1f %+6.2f%%  %+8d B  %+7.1f%%\n",
				f.run, s.Cfg, prec, s.Segments, s.Batch,
				float64(me["peak"])/mib, pct(r.Peak, me["peak"]), float64(me["after_fwd"])/mib, pct(r.AfterForward, me["after_fwd"]),
				r.PeakRequested-me["peak_req"], pct(r.PeakReserved, me["peak_reserved"]))
			what := fmt.Sprintf("%s: %s %s segments %d batch %d", f.file, s.Cfg, prec, s.Segments, s.Batch)
			if d := r.PeakRequested - me["peak_req"]; d < -512 || d > 512 {
				t.Errorf("%s: requested peak %d, measured %d", what, r.PeakRequested, me["peak_req"])
			}
			if e := pct(r.Peak, me["peak"]); e > 1 || e < -1 {
				t.Errorf("%s: peak %+.2f%%, beyond 1%%", what, e)
			}
			if e := pct(r.AfterForward, me["after_fwd"]); e > 100*f.afterFwd || e < -100*f.afterFwd {
				t.Errorf("%s: after the forward %+.2f%%, beyond %.1f%%", what, e, 100*f.afterFwd)
			}
			if e := pct(r.PeakReserved, me["peak_reserved"]); f.reserved > 0 && (e > 100*f.reserved || e < -100*f.reserved) {
				t.Errorf("%s: reserved at the peak %+.2f%%, beyond %.0f%%", what, e, 100*f.reserved)
			}
		}
	}
	t.Log("\n" + table.String())
}
