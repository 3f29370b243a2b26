package sim_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestBF16Measured predicts the model steps that calibration/bf16.py ran
// under autocast to bfloat16 and to float16 on the H200 (each in a fresh
// process). bfloat16 makes float16's tensors, so the requested peak must
// match to the byte for both types as for float16 alone; the cuDNN
// workspaces differ between the two types, and onnxmem takes bfloat16's
// from their own table, so the peak must be within 0.1% and the reserved
// peak within 1%.
func TestBF16Measured(t *testing.T) {
	b, err := measured.Read("bf16.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Scenarios []struct {
			Cfg      string           `json:"cfg"`
			Batch    int64            `json:"batch"`
			Img      int64            `json:"img"`
			AMPDType string           `json:"amp_dtype"`
			Segments int              `json:"segments"`
			Result   map[string]int64 `json:"result"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("bf16.json: %v", err)
	}
	if len(f.Scenarios) == 0 {
		t.Fatal("bf16.json: no scenarios")
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-9s %-8s %2s %5s  %10s %7s  %9s  %12s %7s\n", "cfg", "autocast", "k", "batch", "peak MiB", "error", "req error", "reserved MiB", "error")
	models := builtins{}
	for _, s := range f.Scenarios {
		m := models.get(t, s.Cfg)
		r, err := m.Simulate(sim.Options{Batch: s.Batch, Height: s.Img, Width: s.Img, AMP: true, AMPDType: s.AMPDType, Segments: s.Segments, EmptyCache: ownHarness})
		if err != nil {
			t.Fatal(err)
		}
		me := s.Result
		e := 100 * float64(r.Peak-me["peak"]) / float64(me["peak"])
		dreq := r.PeakRequested - me["peak_req"]
		er := 100 * float64(r.PeakReserved-me["peak_reserved"]) / float64(me["peak_reserved"])
		fmt.Fprintf(&table, "%-9s %-8s %2d %5d  %10.1f %+6.2f%%  %+8d B  %12.1f %+6.2f%%\n", s.Cfg, s.AMPDType, s.Segments, s.Batch, float64(me["peak"])/(1<<20), e, dreq,
			float64(me["peak_reserved"])/(1<<20), er)
		what := fmt.Sprintf("%s %s segments %d batch %d", s.Cfg, s.AMPDType, s.Segments, s.Batch)
		if dreq < -512 || dreq > 512 {
			t.Errorf("%s: requested peak %d, measured %d", what, r.PeakRequested, me["peak_req"])
		}
		if e > 0.1 || e < -0.1 {
			t.Errorf("%s: peak %+.2f%%, beyond 0.1%%", what, e)
		}
		if er > 1 || er < -1 {
			t.Errorf("%s: reserved peak %+.2f%%, beyond 1%%", what, er)
		}
	}
	t.Log("\n" + table.String())
}
