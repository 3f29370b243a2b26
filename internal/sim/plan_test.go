package sim_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestMakePlan checks the planner on the built-in models under limits
// between the no-checkpoint peak and the most frugal plan's: the plan fits
// when simulated again, its ranges are disjoint and in order, and it never
// recomputes more than the best checkpoint_sequential K that fits; a limit
// below every plan's peak is an ErrNoPlan that says the lowest peak.
func TestMakePlan(t *testing.T) {
	for _, tc := range []struct {
		model string
		sc    sim.Options
	}{
		{"yolov9-t", sim.Options{Batch: 8, Height: 320, Width: 320}},
		{"yolov9-s", sim.Options{Batch: 8, Height: 320, Width: 320, AMP: true, Train: true, Boxes: 8, EMA: true}},
		{"gelan-c", sim.Options{Batch: 4, Height: 320, Width: 320, AMP: true}},
	} {
		m, err := sim.Builtin(tc.model)
		if err != nil {
			t.Fatal(err)
		}
		full, err := m.Simulate(tc.sc)
		if err != nil {
			t.Fatal(err)
		}
		frugal := tc.sc
		frugal.Checkpoint = sim.EachLayer(m.Layers())
		low, err := m.Simulate(frugal)
		if err != nil {
			t.Fatal(err)
		}
		for _, frac := range []float64{0.5, 0.7, 0.9} {
			capacity := low.PeakReserved + int64(frac*float64(full.PeakReserved-low.PeakReserved))
			p, err := m.MakePlan(tc.sc, capacity)
			if err != nil {
				t.Fatalf("%s under %d: %v", tc.model, capacity, err)
			}
			sc := tc.sc
			sc.Checkpoint = p.Ranges
			if _, ok, err := m.Fit(sc, capacity); err != nil || !ok || !p.Fits {
				t.Errorf("%s under %d: the plan %v does not fit (%v)", tc.model, capacity, p.Ranges, err)
			}
			for i, r := range p.Ranges {
				if r.From >= r.To || (i > 0 && r.From < p.Ranges[i-1].To) {
					t.Errorf("%s: ranges %v are not disjoint and in order", tc.model, p.Ranges)
				}
			}
			c, err := m.Cost(sc)
			if err != nil || c.Recompute != p.RecomputeFLOPs {
				t.Errorf("%s: the plan says %d recomputed FLOPs, Cost %d (%v)", tc.model, p.RecomputeFLOPs, c.Recompute, err)
			}
			for k := 2; k <= m.Layers(); k++ {
				s := tc.sc
				s.Segments = k
				if _, ok, _ := m.Fit(s, capacity); !ok {
					continue
				}
				kc, err := m.Cost(s)
				if err != nil {
					t.Fatal(err)
				}
				if p.RecomputeFLOPs > kc.Recompute {
					t.Errorf("%s under %d: the plan recomputes %d FLOPs, checkpoint_sequential %d fits with %d", tc.model, capacity, p.RecomputeFLOPs, k, kc.Recompute)
				}
			}
		}
		_, err = m.MakePlan(tc.sc, low.Peak/2)
		var np *sim.ErrNoPlan
		if !errors.As(err, &np) || np.Lowest > low.Peak || np.Lowest <= low.Peak/2 {
			t.Errorf("%s under half the most frugal peak: %v, want an ErrNoPlan with the lowest peak", tc.model, err)
		}
	}
}

// TestPlanMeasured simulates the plans that onnxmem plan made and
// calibration/plan_measure.py measured on the H200 (yolov9-s at batch 8
// under AMP for a 2 GiB limit, yolov9-c at batch 16 under AMP for 8 GiB,
// yolov9-s at batch 32 in float32 for 12 GiB; model steps, each in a fresh
// process): the allocated and reserved peaks must agree within 0.1%.
func TestPlanMeasured(t *testing.T) {
	b, err := measured.Read("plan_measure.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Plans []struct {
			Cfg        string   `json:"cfg"`
			Batch      int64    `json:"batch"`
			Img        int64    `json:"img"`
			AMP        bool     `json:"amp"`
			Checkpoint [][2]int `json:"checkpoint"`
			Result     struct {
				Peak         int64 `json:"peak"`
				PeakReserved int64 `json:"peak_reserved"`
				AfterFwd     int64 `json:"after_fwd"`
			} `json:"result"`
		} `json:"plans"`
	}
	if err := json.Unmarshal(b, &f); err != nil || len(f.Plans) == 0 {
		t.Fatalf("plan_measure.json: %v (%d plans)", err, len(f.Plans))
	}
	for _, p := range f.Plans {
		m, err := sim.Builtin(p.Cfg)
		if err != nil {
			t.Fatal(err)
		}
		sc := sim.Options{Batch: p.Batch, Height: p.Img, Width: p.Img, AMP: p.AMP, EmptyCache: ownHarness}
		for _, r := range p.Checkpoint {
			sc.Checkpoint = append(sc.Checkpoint, sim.Range{From: r[0], To: r[1] + 1})
		}
		r, err := m.Simulate(sc)
		if err != nil {
			t.Fatal(err)
		}
		rel := func(got, want int64) float64 { return 100 * float64(got-want) / float64(want) }
		t.Logf("%s b%d amp %v plan %v: peak %+.4f%%, reserved %+.4f%%, after fwd %+.4f%%", p.Cfg, p.Batch, p.AMP, p.Checkpoint,
			rel(r.Peak, p.Result.Peak), rel(r.PeakReserved, p.Result.PeakReserved), rel(r.AfterForward, p.Result.AfterFwd))
		if e := rel(r.Peak, p.Result.Peak); e > 0.1 || e < -0.1 {
			t.Errorf("%s: peak %d, measured %d", p.Cfg, r.Peak, p.Result.Peak)
		}
		if e := rel(r.PeakReserved, p.Result.PeakReserved); e > 0.1 || e < -0.1 {
			t.Errorf("%s: reserved peak %d, measured %d", p.Cfg, r.PeakReserved, p.Result.PeakReserved)
		}
	}
}
