package sim_test

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
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
	WarmSteps        int `json:"warm_steps"` // a train step's iterations before the measured one
	Measured         struct {
		M0, Peak     int64
		PeakReserved int64 `json:"peak_reserved"`
		Skipped      bool
	}
}

// TestHFModelSteps simulates the steps of Hugging Face transformers' text
// models, measured on an H200 and an H100 with transformers 5.17's own
// modules (calibration/hf_models.py, calibration §25): GPT-2 with SDPA and
// with eager attention, BERT (masked LM) and a 6-layer Llama with
// grouped-query attention, each at batch 1, 4 and 8 and sequence 128 and
// 512, fp32 and AMP, in fresh processes; and AdamW train steps. Every step
// is simulated. The allocated peaks are within 1% (median under 0.1%):
// token ids, embeddings and their dense gradients, the tied head's
// gradient summed out of place in float32, transformers' SDPA with its
// mask folded into the fused kernel, grouped-query attention on the math
// kernel in float32, GPT-2's tanh GELU with pow in autocast's fp32 list,
// the token lookup that GPT2Model keeps in a local to its end
// (embeddingLocals: GPT-2's float32 reserved peaks were 7 to 10% high
// without it), GPT2Block's locals (gpt2Locals: ln_1's and ln_2's float32
// outputs held until their residual adds, the attention's output until
// the block returns; GPT-2's AMP reserved peaks at batch 8 and 512 tokens
// were 7.2% high with SDPA and 4.9% with eager attention without them),
// the cuBLASLt workspace of a linear on a contiguous 3-d input, and a train
// step's cuBLAS workspace made by its first forward. Reserved peaks are
// within 2.5%.
func TestHFModelSteps(t *testing.T) {
	hfSteps(t, "hf_models.jsonl", 4, 60, nil, nil)
}

// TestHFMoreModels checks the engine on a second sample, measured the same
// way after the first was fitted: Qwen2 (biased q, k and v projections,
// grouped-query attention, a tied head), DistilBERT and OPT (learned
// positions, ReLU), at two sizes in fp32 and AMP, with AdamW train steps.
// The 21 steps are within 0.6%, their reserved peaks within 2.5%
// (DistilBERT's AMP train step at batch 4 and 512 tokens read 5.5% high
// before its train step made cuBLAS's workspace in its first forward, as
// hf_distilbert_warm_traces.jsonl.gz shows, and ran as many iterations
// before the measured one as the harness did). OPT's reserved peak
// at batch 8 and 512 tokens in float32 read 24% high while its ReLU ran in
// place (torchvision's convention after a linear): transformers' nn.ReLU()
// runs out of place (hf_opt_warm_traces.jsonl.gz), and InPlace now leaves
// a transformers model's ops as they are.
func TestHFMoreModels(t *testing.T) {
	hfSteps(t, "hf_more.jsonl", 3, 21, nil, nil)
}

// TestHFThirdSample checks the engine on a third sample, measured after
// the first two were fitted and simulated blind first (calibration §37, an
// H100, each step in a fresh process): Mistral (a sliding window of 256),
// Phi (partial rotary, gelu_new, attention and MLP side by side), Gemma
// (GeGLU with the tanh GELU, head dim 256), RoBERTa (RoBERTa's 514
// positions refused 512 tokens on the device: its 128-token steps only),
// ALBERT (one layer's weights shared by six, a factorised embedding) and
// GPT-Neo (eager attention masked by torch.where, local layers). Blind,
// Gemma read 2.4 to 12.8% high (the exporter's tanh GELU run as its nine
// ops; now fused back into one gelu) and GPT-Neo was refused (Where on
// activations; now a row). What stays off: Mistral beyond its window (the
// export, traced at 128 tokens, has no window to show: at 512 the model
// masks it and repeats k and v for memory-efficient attention, where the
// graph says causal grouped-query attention), and GPT-Neo's AMP steps, up
// to 1.7% high (its float32 ones within 0.2% once its six layers' 4 MiB
// causal-mask buffers, which the exporter inlined as two shared constants,
// were counted: Flow.maskBuffer; its m0 read 19 MB low before); the
// reserved peaks of ALBERT's and Gemma's AMP steps within 4.7%.
func TestHFThirdSample(t *testing.T) {
	hfSteps(t, "hf_third.jsonl", 6, 32,
		map[string]float64{"mistral": 0.15, "gemma": 0.05, "albert": 0.05},
		map[string]float64{"mistral": 0.18, "gpt_neo amp": 0.018})
}

// hfSteps simulates every step of a file of hf_models.py's lines and
// checks the allocated peaks within 1% (median within 0.1%) and the
// reserved peaks within 2.5%, or the network's bound where it is off
// today (peak and reserved, by network; a peak bound also by network and
// precision, "gpt_neo amp").
func hfSteps(t *testing.T, file string, wantModels, wantSteps int, reserved, peak map[string]float64) {
	f, err := os.Open(measured.Path(file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	models := map[string]*sim.Model{}
	var peaks []float64
	var out strings.Builder
	n := 0
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
			if m, err = sim.Load(measured.Path(l.Model)); err != nil {
				t.Fatal(err)
			}
			models[l.Cfg] = m
		}
		o := sim.Options{Batch: l.Batch, Seq: l.Seq, AMP: l.AMP}
		if l.Kind == "train_step" {
			// As many iterations before the measured one as the harness ran
			// (it stops once the optimizer has state: GradScaler skipped
			// none of these).
			o.Train, o.Optimizer, o.WarmSteps = true, sim.AdamW, l.WarmSteps
		}
		r, err := m.Simulate(o)
		if err != nil {
			t.Errorf("%s %s batch %d seq %d: %v", l.Cfg, l.Kind, l.Batch, l.Seq, err)
			continue
		}
		n++
		e := float64(r.Peak-l.Measured.Peak) / float64(l.Measured.Peak)
		er := float64(r.PeakReserved-l.Measured.PeakReserved) / float64(l.Measured.PeakReserved)
		fmt.Fprintf(&out, "%-10s %-10s %d×%-4d amp %-5v peak %+6.2f%% reserved %+6.2f%%\n", l.Cfg, l.Kind, l.Batch, l.Seq, l.AMP, 100*e, 100*er)
		if l.Measured.Skipped {
			// GradScaler skipped the measured step's optimizer step:
			// onnxmem's train step takes one.
			continue
		}
		key := l.Cfg + " fp32"
		if l.AMP {
			key = l.Cfg + " amp"
		}
		pb := cmp.Or(peak[key], peak[l.Cfg], 0.01)
		_, off := peak[l.Cfg]
		if _, offPrec := peak[key]; !off && !offPrec {
			peaks = append(peaks, math.Abs(e)) // the median is of the networks held to 1%
		}
		if math.Abs(e) > pb {
			t.Errorf("%s %s batch %d seq %d amp %v: peak %d, measured %d (%+.2f%%), beyond %.1f%%", l.Cfg, l.Kind, l.Batch, l.Seq, l.AMP, r.Peak, l.Measured.Peak, 100*e, 100*pb)
		}
		if b := cmp.Or(reserved[l.Cfg], 0.025); math.Abs(er) > b {
			t.Errorf("%s %s batch %d seq %d amp %v: reserved peak %d, measured %d (%+.2f%%), beyond %.1f%%", l.Cfg, l.Kind, l.Batch, l.Seq, l.AMP, r.PeakReserved, l.Measured.PeakReserved, 100*er, 100*b)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(models) != wantModels || n != wantSteps {
		t.Errorf("%s: %d networks, %d steps simulated; want %d and %d", file, len(models), n, wantModels, wantSteps)
	}
	slices.Sort(peaks)
	if med := peaks[len(peaks)/2]; med > 0.001 {
		t.Errorf("%s: median |peak error| %.2f%%, want within 0.1%%", file, 100*med)
	}
	t.Log("\n" + out.String())
}

// TestHFFootprint holds what each transformers model holds once loaded
// (param_bytes, buffer_bytes and memory_allocated() after model.to('cuda'),
// calibration/results/hf_models_meta.jsonl) to the footprint onnxmem reads
// from its export: the parameters to the byte, tied heads counted once;
// GPT-Neo's six 4 MiB causal-mask buffers, which the exporter inlined as
// two shared constants, to the byte (Flow.maskBuffer, calibration §37);
// the small buffers that the exports fold into shape arithmetic (position
// ids, a rotary embedding's inv_freq: 128 bytes to 8 KiB) are not counted,
// and what the load allocated is within 0.5%.
func TestHFFootprint(t *testing.T) {
	footprints(t, "hf_models_meta.jsonl", 13, func(f *sim.Footprint, l footprintLine) bool {
		if l.Cfg == "gpt_neo" && f.BufferBytes != l.BufferBytes {
			return false
		}
		return f.ParamBytes == l.ParamBytes && f.BufferBytes <= l.BufferBytes && l.BufferBytes-f.BufferBytes <= 8192 &&
			math.Abs(float64(f.Allocated-l.Allocated)) <= 0.005*float64(l.Allocated)
	})
}

// TestHFCheckpointedMath checks the math kernel's grouped-query backward,
// which drops its saved tensors as its inner nodes return, inside
// checkpointed segments, where they are the recomputation's: Llama's
// float32 steps (grouped-query attention on the math kernel) with the
// layers checkpointed in 2 and 3 segments simulate, and each keeps less
// at its peak than the step without checkpointing.
func TestHFCheckpointedMath(t *testing.T) {
	m, err := sim.Load(measured.Path("hf/llama-train.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := m.Simulate(sim.Options{Batch: 4, Seq: 512})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{2, 3} {
		r, err := m.Simulate(sim.Options{Batch: 4, Seq: 512, Segments: k})
		if err != nil {
			t.Fatalf("%d segments: %v", k, err)
		}
		if r.Peak >= plain.Peak {
			t.Errorf("%d segments: peak %d, not below the plain step's %d", k, r.Peak, plain.Peak)
		}
	}
}
