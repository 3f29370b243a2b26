package sim_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/sim"
)

// measuredRun is one whole run that calibration/train_run.py measured.
type measuredRun struct {
	Cfg       string                       `json:"cfg"`
	Batch     int64                        `json:"batch"`
	Img       int64                        `json:"img"`
	AMP       bool                         `json:"amp"`
	Optimizer string                       `json:"optimizer"`
	EMA       bool                         `json:"ema"`
	Trainer   string                       `json:"trainer"`
	GPUs      int64                        `json:"gpus"`
	Rank      int64                        `json:"rank"`
	SyncBN    bool                         `json:"sync_bn"`
	Events    []map[string]json.RawMessage `json:"events"`
	Measured  struct {
		Peak           int64   `json:"peak"`
		PeakReserved   int64   `json:"peak_reserved"`
		ReservedAfter  []int64 `json:"reserved_after"`
		AllocatedAfter []int64 `json:"allocated_after"`
		EventPeak      []int64 `json:"event_peak"`
		// Stepped says, for each train event, whether the optimizer
		// stepped: under AMP GradScaler skips the first iterations' steps.
		Stepped []*bool `json:"optimizer_stepped"`
		// A run of calibration/train_max_batch.py ran under
		// set_per_process_memory_fraction(Fraction) of TotalMemory; OOM,
		// when it ran out of memory, names the event.
		Fraction    float64 `json:"fraction"`
		TotalMemory int64   `json:"total_memory"`
		OOM         *struct {
			Event int `json:"event"`
		} `json:"oom"`
	} `json:"measured"`
}

// replay returns the built-in model of a measured run, its scenario and its
// events, each train event skipped where GradScaler skipped the measured
// one's optimizer step.
func (run *measuredRun) replay(t *testing.T) (*sim.Model, sim.Options, []sim.RunEvent) {
	t.Helper()
	m, err := sim.Builtin(run.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	trainer := run.Trainer
	if trainer == "train_dual" {
		trainer = ""
	}
	s := sim.Options{Batch: run.Batch, Height: run.Img, Width: run.Img, AMP: run.AMP, Train: true,
		Optimizer: sim.Optimizer(run.Optimizer), EMA: run.EMA, Trainer: trainer, GPUs: run.GPUs, Rank: run.Rank, SyncBN: run.SyncBN}
	if run.GPUs > 1 {
		s.Batch /= run.GPUs // the record's batch is the total, train_dual.py's --batch
	}
	events := runEvents(t, run.Events)
	for i, st := range run.Measured.Stepped {
		if st != nil && !*st {
			events[i].Skipped = true
		}
	}
	return m, s, events
}

// runEvents turns a measured run's events into RunEvents.
func runEvents(t *testing.T, raw []map[string]json.RawMessage) []sim.RunEvent {
	var out []sim.RunEvent
	for _, ev := range raw {
		for kind, body := range ev { // one key
			var f struct {
				Boxes []int64 `json:"boxes_per_img"`
				Batch int64   `json:"batch"`
				H     int64   `json:"img_h"`
				W     int64   `json:"img_w"`
			}
			if err := json.Unmarshal(body, &f); err != nil {
				t.Fatal(err)
			}
			out = append(out, sim.RunEvent{Kind: kind, BoxCounts: f.Boxes, Batch: f.Batch, Height: f.H, Width: f.W})
		}
	}
	return out
}

// TestRunMeasured predicts the whole runs of calibration/train_run.py:
// setup, 20 iterations with each image's box counts, 4 validation batches,
// a checkpoint save and 5 more iterations, and compares the run's peaks and
// the memory after each event with the measured ones: five runs on the H200
// (train_run.jsonl) and four on an H100 80GB HBM3 with the same torch and
// cuDNN (train_run_h100.jsonl: yolov9-m, -e, gelan-t under AMP and yolov9-c
// in float32, models the H200's runs lack). The events say which
// iterations' optimizer steps GradScaler skipped, as the measurement
// recorded them: under AMP the first 3 to 9 (and a few later ones), which
// delays the optimizer's state.
func TestRunMeasured(t *testing.T) {
	var table strings.Builder
	fmt.Fprintf(&table, "%-5s %-9s %3s %4s  %9s %9s %6s  %9s %9s %6s  %-22s %s\n", "card", "cfg", "B", "prec", "peak MiB", "measured", "err",
		"reserved", "measured", "err", "worst reserved_after", "unmarked: peak_reserved, worst after")
	n := 0
	for _, file := range []struct{ name, card string }{{"train_run.jsonl", "H200"}, {"train_run_h100.jsonl", "H100"}, {"train_run_h100_more.jsonl", "H100"}} {
		runs := jsonLines[measuredRun](t, file.name)
		n += len(runs)
		for _, run := range runs {
			m, s, events := run.replay(t)
			r, err := m.Run(s, events)
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("%s: %s batch %d", file.name, run.Cfg, run.Batch)
			rel := func(got, want int64) float64 { return 100 * float64(got-want) / float64(want) }
			worst, at := 0.0, 0
			for i, st := range r.Steps {
				if e := rel(st.Reserved, run.Measured.ReservedAfter[i]); e*e > worst*worst {
					worst, at = e, i
				}
				// Each iteration's own peak: the step with its box counts and
				// the previous pred alive.
				if e := rel(st.Peak, run.Measured.EventPeak[i]); st.Kind == sim.RunEventTrain && (e > 0.5 || e < -0.5) {
					t.Errorf("%s: iteration %d peaks at %d, measured %d (%+.2f%%)", what, i, st.Peak, run.Measured.EventPeak[i], e)
				}
				if e := rel(st.Allocated, run.Measured.AllocatedAfter[i]); e > 1 || e < -1 {
					t.Errorf("%s: allocated after event %d (%s) %d, measured %d (%+.2f%%)", what, i, st.Kind, st.Allocated, run.Measured.AllocatedAfter[i], e)
				}
				if e := rel(st.Reserved, run.Measured.ReservedAfter[i]); e > 0.6 || e < -0.6 {
					t.Errorf("%s: reserved after event %d (%s) %d, measured %d (%+.2f%%)", what, i, st.Kind, st.Reserved, run.Measured.ReservedAfter[i], e)
				}
			}
			prec := map[bool]string{false: "fp32", true: "amp"}[run.AMP]
			// Allocated peaks are within 0.1%, reserved peaks within 0.4% (with
			// train.py's validation loss: without it gelan-c's read -4.35%).
			if e := rel(r.Peak, run.Measured.Peak); e > 0.5 || e < -0.5 {
				t.Errorf("%s %s: peak %d, measured %d (%+.2f%%)", what, prec, r.Peak, run.Measured.Peak, e)
			}
			if e := rel(r.PeakReserved, run.Measured.PeakReserved); e > 1 || e < -1 {
				t.Errorf("%s %s: reserved peak %d, measured %d (%+.2f%%)", what, prec, r.PeakReserved, run.Measured.PeakReserved, e)
			}
			// Without the marks, as a run's events come from a user, the
			// first DefaultAMPWarmSteps-1 iterations are taken as skipped:
			// the reserved peak stays within 0.1% (0.4% in float32, whose
			// runs skip nothing). Between the default's first optimizer
			// step and two iterations after the measured one the two runs
			// differ by the optimizer's state and the cache it reshapes
			// (yolov9-e on the H100 skipped 9: up to +10.6% there); after
			// that the memory reserved after every event is within 0.6%.
			unmarked := slices.Clone(events)
			for i := range unmarked {
				unmarked[i].Skipped = false
			}
			ru, err := m.Run(s, unmarked)
			if err != nil {
				t.Fatal(err)
			}
			eu := rel(ru.PeakReserved, run.Measured.PeakReserved)
			if eu > 0.1 || eu < -0.1 {
				if !(eu > -0.4 && !run.AMP) {
					t.Errorf("%s %s, no skipped marks: reserved peak %+.2f%%", what, prec, eu)
				}
			}
			settled := 0
			for i, st := range run.Measured.Stepped {
				if st != nil && *st {
					settled = i + 2
					break
				}
			}
			worstU, atU := 0.0, 0
			for i, st := range ru.Steps {
				e := rel(st.Reserved, run.Measured.ReservedAfter[i])
				if e*e > worstU*worstU {
					worstU, atU = e, i
				}
				if i >= settled && (e > 0.6 || e < -0.6) {
					t.Errorf("%s %s, no skipped marks: reserved after event %d %+.2f%%", what, prec, i, e)
				}
			}
			fmt.Fprintf(&table, "%-5s %-9s %3d %4s  %9.0f %9.0f %+5.2f%%  %9.0f %9.0f %+5.2f%%  %+6.2f%% (event %2d)     %+5.2f%%, %+6.2f%% (event %d)\n", file.card, run.Cfg, run.Batch, prec,
				float64(r.Peak)/(1<<20), float64(run.Measured.Peak)/(1<<20), rel(r.Peak, run.Measured.Peak),
				float64(r.PeakReserved)/(1<<20), float64(run.Measured.PeakReserved)/(1<<20), rel(r.PeakReserved, run.Measured.PeakReserved), worst, at, eu, worstU, atU)
		}
	}
	if n != 11 {
		t.Fatalf("%d measured runs, want 11", n)
	}
	t.Log("\n" + table.String())
}
