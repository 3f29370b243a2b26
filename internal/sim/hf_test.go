package sim_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// hfLine is one line of calibration/results/hf_models.jsonl.
type hfLine struct {
	Kind, Cfg, Model string
	Batch, Seq       int64
	AMP              bool
	Optimizer        string
	WarmSteps        int `json:"warm_steps"`
	Measured         struct {
		M0, Peak     int64
		PeakReserved int64 `json:"peak_reserved"`
		AfterFwd     int64 `json:"after_fwd"`
	}
}

// TestHFModelSteps simulates the steps of Hugging Face transformers' text
// models measured on an H200 with transformers' own modules
// (calibration/hf_models.py, calibration §25).
func TestHFModelSteps(t *testing.T) {
	f, err := os.Open(measured.Path("hf_models.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	models := map[string]*sim.Model{}
	var out strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l hfLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Kind != "model_step" && l.Kind != "train_step" {
			continue
		}
		m, ok := models[l.Cfg]
		if !ok {
			if _, err := os.Stat(measured.Path(l.Model)); err != nil {
				continue
			}
			if m, err = sim.Load(measured.Path(l.Model)); err != nil {
				t.Fatal(err)
			}
			models[l.Cfg] = m
		}
		o := sim.Options{Batch: l.Batch, Seq: l.Seq, AMP: l.AMP}
		if l.Kind == "train_step" {
			o.Train, o.Optimizer = true, sim.AdamW
		}
		r, err := m.Simulate(o)
		if err != nil {
			t.Errorf("%s %s batch %d seq %d: %v", l.Cfg, l.Kind, l.Batch, l.Seq, err)
			continue
		}
		e := float64(r.Peak-l.Measured.Peak) / float64(l.Measured.Peak)
		er := float64(r.PeakReserved-l.Measured.PeakReserved) / float64(l.Measured.PeakReserved)
		fmt.Fprintf(&out, "%-10s %-10s %2d %4d amp %-5v peak %+6.2f%% reserved %+6.2f%% m0 %d/%d\n", l.Cfg, l.Kind, l.Batch, l.Seq, l.AMP, 100*e, 100*er, r.M0, l.Measured.M0)
		_ = math.Abs
	}
	t.Log("\n" + out.String())
}
