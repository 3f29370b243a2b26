package sim_test

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestTimmModelSteps simulates the model steps of 24 timm networks outside
// torchvision's list, measured on an H100 with timm's own modules
// (calibration/timm_models.py, calibration §24: batch 1, 8 and 32, or 2, 8
// and 32 for the three whose train-mode batch norm needs two images, fp32
// and AMP), the baseline of issue 38. All 24 are simulated; the allocated
// peaks' median error is within 0.5%. Darknet's and CSPNet's in-place
// LeakyReLU (timm's ConvNormAct) put theirs within 1%, and so do XCiT's
// and EdgeNeXt's, whose Fourier position encodings (Tile, CumSum, Sin, Cos
// of constants, no tensor data of the batch) needed only shape rules, and
// PoolFormer's, whose GroupNorm torch.onnx exports as Reshape,
// InstanceNormalization, Reshape, Mul, Add (schedule.Flow's groupNorms);
// NFNet's standardised weights, a new tensor every step that each conv
// saves, put nf_resnet50 within 1.6% (it read 8% low without them), and
// its blocks' act1, an nn.ReLU() out of place on the block's argument
// (which the caller keeps), within 1.5% (-1.5% to -0.4% at batch 32), and
// the backward of its standardised weights (each conv's gradient of the
// weight it standardised, float32 under autocast, alive while batch_norm's
// backward makes the parameter's .grad; calibration §33) within 0.5%, and
// the flash kernel's output laid out (B, L, H, D) for a q sliced from a
// packed projection put deit_tiny's within 0.1% (4.2% high before);
// TinyViT's attention with its bias, which transformers-style exports add
// to the scores before the softmax, fused back into one kernel, put
// tiny_vit's within 2.7% (17% high before), and its and LeViT's
// attention_bias_idxs, int64 tables the exporter writes as Constant nodes,
// resident as model buffers (calibration §30), within 1.9% and 1.5% (2.7%
// and 2.0% before), and the padded copy of its bias that memory-efficient
// attention saves (calibration §31), tiny_vit's within 0.3%; the cuDNN
// workspaces of the 24
// networks' own convolutions, measured (calibration §26), put RepVGG's,
// HRNet's, DLA's, FastViT's, CS3Darknet's, ResNeSt's and EfficientFormer's
// within 1% (up to 4.4% off before, the workspaces of shapes the table
// lacked estimated); ConvMixer's residual sum, out of place as timm's
// Residual writes it, put convmixer_768_32's AMP step at batch 1 from
// -3.8% to +0.1% (calibration §31); CoaT's forward_features, which keeps
// each serial stage's output and its NCHW copy (a .contiguous() that the
// export drops) in Python locals until it returns, simulated so
// (generic's coatLocals), put coat_lite_tiny's within 0.2% (-4.3% under
// AMP at batch 32 before); flash attention's padded head dims (calibration
// §34) put mobilevit_s's within 0.1% (-1.04% before). Each network's
// steps are simulated in one process in the order they ran (timmPeaks):
// simulated each alone, levit_128s's AMP step at batch 2 read -1.45%,
// its requested peak equal to the one a fresh process measured
// (timm_fresh_amp1.jsonl) and its allocated peak 1.6 MB higher, the
// blocks the float32 steps before it left in the cache; in order, -0.78%.
// resnest26d's AMP step at batch 2 reads -1.27% in order (-0.80% alone):
// which of two free blocks of a size a request takes depends on where
// the driver put their segments (calibration §11), bounded where it
// stands today.
func TestTimmModelSteps(t *testing.T) {
	// bound is each network's largest |peak error| allowed: 1% where
	// onnxmem's rules hold, today's error rounded up elsewhere.
	bound := map[string]float64{"resnest26d": 0.013}
	timmPeaks(t, "timm_models.jsonl", 24, bound, 0.002)
}

// TestTimmHeldOut simulates the model steps of fourteen timm networks
// measured only after onnxmem's rules were set on the first 24
// (calibration/timm_models.py --no-export, calibration §31, an H100: batch
// 1, 8 and 32, fp32 and AMP, each network in its own process; fifteen were
// chosen, mobilenetv4_conv_small's train-mode batch norm refuses one image).
// Predicted before any was looked at, with the workspaces of their
// convolutions from cudnn.Rule, 67 of the 84 allocated peaks were within
// 1% (median 0.15%) and the worst 4.5% off: the Rule's workspaces
// (visformer_tiny +4.5%, hgnetv2_b0 +4.2%, dpn68 -3.1%) and EfficientViT's
// linear attention, which timm computes in float32 inside an
// autocast-disabled region (-3.6% under AMP). With their convolutions' workspaces measured
// (conv_sweep.py, 3,206 calls) and the region found from the graph
// (schedule's float32Region), 81 within 1% (median 0.04%), the worst
// convnextv2_atto's float32 step at batch 8, +2.8%, whose float32
// channels-last 1×1 convolutions no table held; with them measured
// (calibration §34), +0.5%, and the worst convnextv2_atto's AMP step at
// batch 8, -1.02%.
func TestTimmHeldOut(t *testing.T) {
	timmPeaks(t, "timm_heldout.jsonl", 14, map[string]float64{"convnextv2_atto": 0.011, "hgnetv2_b0": 0.011}, 0.002)
}

// TestTimmHeldOut2 simulates the model steps of a second held-out sample,
// ten timm networks measured after every rule above was set
// (calibration/timm_models.py, calibration §33, an H100: batch 1, 8 and 32,
// fp32 and AMP, each network in its own process): ViT, Swin, RegNetY,
// MobileNetV3, BiT's ResNetV2 (weight-standardised convs, group norm),
// EfficientFormerV2, DaViT, Twins-SVT, SE-ResNeXt and PiT. Predicted
// before any was looked at, EfficientFormerV2 was refused (its bilinear
// Resize had no rule) and Twins' AMP steps read up to 9.6% low: its
// windows' attention on 5-d q, k and v, which no fused kernel takes, runs
// the math kernel, in float32 under autocast too (schedule's mathKernel).
// With both simulated, 56 of the 60 within 1%. BiT's ResNetV2 read low at
// small batches (-10.6% under AMP at batch 1, -3.2% in float32) because
// every conv of it has a standardised weight and none a parameter: no op
// was marked as needing a gradient, and the backward stopped at the head
// (a value computed from parameters alone now marks its reader as a
// parameter does); with the standardised weights' backward
// (calibration §33's trace), all six within 0.6%: 59 of the 60 within
// 1%, off vit_small's float32 step at batch 1 (-1.7%, the requested peak
// exact: the allocator's blocks).
func TestTimmHeldOut2(t *testing.T) {
	timmPeaks(t, "timm_heldout2.jsonl", 10, map[string]float64{"vit_small_patch16_224": 0.017}, 0.002)
}

// TestTimmHeldOut2b simulates the four networks of the second held-out
// sample measured last (calibration/timm_models.py, calibration §33, an
// H200: densenet121, res2net50_26w_4s, ghostnetv2_100, starnet_s1; convit_tiny
// exported but its timm module failed on the device), compared only after
// every rule of this file was set: 22 of the 24 peaks within 1%, off
// res2net50_26w_4s's AMP step at batch 1 (-2.6%) and starnet_s1's at 32
// (-1.3%), both at convolutions no table held: Res2Net's 3×3 convs over
// 104 channels take a 9 MB float16 workspace in their backward (the
// fresh trace of calibration §34). With the four networks' convolutions
// measured (conv_sweep.py, results/conv_sweep_heldout3.json), all 24
// within 1%.
func TestTimmHeldOut2b(t *testing.T) {
	timmPeaks(t, "timm_heldout2b.jsonl", 4, nil, 0.002)
}

// TestTimmFreshReserved simulates AMP model steps at batch 1 (2 for the
// networks whose train-mode batch norm needs two images) of all 39 timm
// networks, each measured in a fresh process of its own
// (calibration/timm_models.py --fresh --precisions amp --batches 1,
// calibration §31, an H100), as a user's single run is: the reserved peak
// carries no segment of an earlier scenario. Run in sequence after float32
// steps, the same steps' reserved peaks read up to 13.7% off
// (TestTimmReservedInOrder); fresh, 33 of the 39 are exact to the byte
// (29 before TinyViT's attention bias, NFNet's act1 and ConvMixer's
// residual sum were simulated as timm runs them) and all within one
// segment: mixer_b16_224 +3.1% (a 20 MiB segment), the rest within 1.3%.
func TestTimmFreshReserved(t *testing.T) {
	timmFresh(t, "timm_fresh_amp1.jsonl", 39, 33, nil, 0.01, map[string]float64{"mixer_b16_224": 0.032}, 0.013)
}

// TestTimmFresh32 simulates the batch-32 model steps, fp32 and AMP, of
// the 39 timm networks of TestTimmFreshReserved, each measured in a fresh
// process of its own (calibration/timm_models.py --fresh --precisions
// amp,fp32 --batches 32, calibration §33 and §34, an H100; the first call
// ran out of time after eleven networks, the second measured the rest):
// every allocated peak within 1% (mobilevit_s's AMP step read -1.03%
// until flash attention's padded head dims were simulated, calibration
// §34: +0.07%);
// 39 of the 77 reserved peaks to the byte and 75 within 2.1%, off by
// segments whose placement differs: nf_resnet50 under AMP (+5.1%) and
// levit_128s's AMP step (-3.6%). resmlp_12_224's AMP step read -3.1%
// until torch.addcmul was one op (generic's fuse, calibration §34: -1.6%;
// its float32 step -1.0%, as without the rule); dla34's
// float32 step read 4.1% low until the locals of its trees were held
// (generic's argumentLocals, calibration §34), nf_resnet50's +9.3% (AMP)
// and +2.9% (float32) until NormFreeBlock's were (nfBlockLocals: float32
// now -1.1%).
func TestTimmFresh32(t *testing.T) {
	timmFresh(t, "timm_fresh32.jsonl", 77, 39, nil, 0.01,
		map[string]float64{"nf_resnet50": 0.052, "levit_128s": 0.036}, 0.021)
}

// TestTimmFreshHeldOut2 simulates the fourteen networks of the second
// held-out sample, each step in a fresh process of its own
// (calibration/timm_models.py --fresh, calibration §34, an H100): batch 32
// in float32 and under AMP, and AMP at batch 1. The 28 steps at batch 32:
// every allocated peak within 0.3%, reserved within 1% (12 to the byte).
// At batch 1, every peak within 0.7% but vit_small_patch16_224's (-1.2%:
// the blocks the allocator leaves unsplit, as in float32, TestTimmHeldOut2)
// and every reserved peak within 1.3% but davit_tiny's (-5.2%: one 20 MiB
// segment, where the requested peak is within 0.02%).
func TestTimmFreshHeldOut2(t *testing.T) {
	timmFresh(t, "timm_fresh32h2.jsonl", 28, 12, nil, 0.003, nil, 0.01)
	timmFresh(t, "timm_fresh1h2.jsonl", 14, 9, map[string]float64{"vit_small_patch16_224": 0.012}, 0.007,
		map[string]float64{"davit_tiny": 0.053}, 0.013)
}

// TestTimmFresh8 simulates the batch-8 model steps, float32 and AMP, of
// the first 39 timm networks, each in a fresh process of its own
// (calibration/timm_models.py --fresh --batches 8, calibration §34, an
// H100; 51 of the 78 steps measured before the call's budget): every
// allocated peak within 1.02% (convnextv2_atto's AMP step), 40 reserved
// peaks to the byte and all within 2.6% (darknet53's AMP step +2.5%).
func TestTimmFresh8(t *testing.T) {
	timmFresh(t, "timm_fresh8.jsonl", 51, 40, map[string]float64{"convnextv2_atto": 0.011}, 0.01, nil, 0.026)
}

// TestTimmFresh8b simulates the batch-8 steps, float32 and AMP, that
// TestTimmFresh8's call left unmeasured (the last fourteen of the first 39
// networks, mobilenetv4_conv_small's float32 step again) and six networks
// of the second held-out sample, each in a fresh process of its own
// (calibration/timm_models.py --fresh --batches 8, calibration §35, an
// H100), compared after every rule was set: every allocated peak within
// 0.5%, 29 of the 40 reserved peaks to the byte and all within 1.8% but
// nf_resnet50's float32 step (-4.1%) and mobilenetv3_large_100's AMP step
// (+4.7%). The second held-out sample's other seven networks, measured in a
// last call (timm_fresh8c.jsonl, 14 steps): every peak within 0.6%, 11
// reserved peaks to the byte and all within 1.3%.
func TestTimmFresh8b(t *testing.T) {
	timmFresh(t, "timm_fresh8b.jsonl", 40, 29, nil, 0.005,
		map[string]float64{"nf_resnet50": 0.042, "mobilenetv3_large_100": 0.048}, 0.018)
	timmFresh(t, "timm_fresh8c.jsonl", 14, 11, nil, 0.006, nil, 0.013)
}

// TestTimmFreshFP32B1 simulates the float32 model steps at batch 1 (2
// where a train-mode batch norm over 1×1 maps needs two images) of the 53
// timm networks, each in a fresh process of its own
// (calibration/timm_models.py --fresh --precisions fp32 --batches 1,
// calibration §37, an H100), the one precision and batch no fresh process
// had measured, compared blind: every allocated peak within 0.8% but
// vit_small_patch16_224's (-1.67%, as in its in-process file, where the
// replay with its blocks placed bottom up is exact), 50 of the 53
// reserved peaks to the byte, all within 0.9% but twins_svt_small's
// (+7.3%: one segment more, an open residual of Twins' math-kernel
// attention, whose AMP steps read high in its in-process file too).
func TestTimmFreshFP32B1(t *testing.T) {
	timmFresh(t, "timm_fresh_fp32_1.jsonl", 53, 50, map[string]float64{"vit_small_patch16_224": 0.017}, 0.008,
		map[string]float64{"twins_svt_small": 0.073}, 0.0091)
}

// timmFresh simulates every model step of a file of steps measured each
// in a fresh process and checks the allocated peaks within peak[cfg] (or
// peakAll) and the reserved ones within reserved[cfg] (or reservedAll),
// the file's steps numbering want, at least exact reserved peaks to the
// byte.
func timmFresh(t *testing.T, file string, want, exact int, peak map[string]float64, peakAll float64, reserved map[string]float64, reservedAll float64) {
	t.Helper()
	steps := timmSteps(t, file)
	n := 0
	for _, l := range steps {
		m, err := sim.Load(measured.Path(l.Model))
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.Simulate(sim.Options{Batch: l.Batch, Height: l.height(), Width: l.width(), AMP: l.AMP})
		if err != nil {
			t.Fatalf("%s batch %d: %v", l.Cfg, l.Batch, err)
		}
		e := float64(r.Peak-l.Measured.Peak) / float64(l.Measured.Peak)
		er := float64(r.PeakReserved-l.Measured.PeakReserved) / float64(l.Measured.PeakReserved)
		if er == 0 {
			n++
		}
		if b := cmp.Or(peak[l.Cfg], peakAll); math.Abs(e) > b {
			t.Errorf("%s batch %d amp %v: peak %d, measured %d (%+.2f%%), beyond %.1f%%", l.Cfg, l.Batch, l.AMP, r.Peak, l.Measured.Peak, 100*e, 100*b)
		}
		if b := cmp.Or(reserved[l.Cfg], reservedAll); math.Abs(er) > b {
			t.Errorf("%s batch %d amp %v: reserved %d, measured %d (%+.2f%%), beyond %.1f%%", l.Cfg, l.Batch, l.AMP, r.PeakReserved, l.Measured.PeakReserved, 100*er, 100*b)
		}
	}
	t.Logf("%s: %d steps, %d reserved peaks to the byte", file, len(steps), n)
	if len(steps) != want || n < exact {
		t.Errorf("%s: %d steps, %d reserved peaks to the byte; want %d and at least %d", file, len(steps), n, want, exact)
	}
}

// timmPeaks simulates every model step of a timm_models.py file, each
// network's steps in one simulated process in the file's order, as the
// script ran them (the cache emptied before each warm-up), and checks
// each allocated peak against the measured one: within bound[cfg]
// (1% where a network has none), the median error within median, and the
// file's networks numbering want, each with its six steps.
func timmPeaks(t *testing.T, file string, want int, bound map[string]float64, median float64) {
	t.Helper()
	var (
		errs []float64
		out  strings.Builder
	)
	processes := map[string]*sim.Process{} // by network: its steps ran in one process, in the file's order
	steps := map[string]int{}
	var order []string // the networks, first seen first
	for _, l := range timmSteps(t, file) {
		steps[l.Cfg]++
		process, ok := processes[l.Cfg]
		if !ok {
			order = append(order, l.Cfg)
			m, err := sim.Load(measured.Path(l.Model))
			if err != nil {
				t.Fatal(err)
			}
			process = m.NewProcess()
			processes[l.Cfg] = process
		}
		r, err := process.Simulate(sim.Options{Batch: l.Batch, Height: l.height(), Width: l.width(), AMP: l.AMP, EmptyCache: sim.EmptyCacheWarmUp})
		if err != nil {
			t.Fatalf("%s batch %d: %v", l.Cfg, l.Batch, err)
		}
		e := float64(r.Peak-l.Measured.Peak) / float64(l.Measured.Peak)
		errs = append(errs, math.Abs(e))
		fmt.Fprintf(&out, "%-22s %3d amp %-5v peak %+6.2f%%\n", l.Cfg, l.Batch, l.AMP, 100*e)
		if b := cmp.Or(bound[l.Cfg], 0.01); math.Abs(e) > b {
			t.Errorf("%s batch %d amp %v: peak %d, measured %d (%+.2f%%), beyond %.1f%%", l.Cfg, l.Batch, l.AMP, r.Peak, l.Measured.Peak, 100*e, 100*b)
		}
	}
	if len(order) != want {
		t.Errorf("%d networks simulated; want %d", len(order), want)
	}
	for _, cfg := range order {
		if steps[cfg] != 6 {
			t.Errorf("%s: %d steps; want 6", cfg, steps[cfg])
		}
	}
	slices.Sort(errs)
	if med := errs[len(errs)/2]; med > median {
		t.Errorf("median |peak error| %.2f%%, want within %.2f%%", 100*med, 100*median)
	}
	t.Log("\n" + out.String())
}

// TestAttentionNoFlashMeasured checks the attention that cards below sm
// 8.0 run under AMP (Options.NoFlash: PyTorch's memory-efficient kernel,
// flash needing sm 8.0) against deit_tiny_patch16_224's model steps
// measured on an H100 with the kernel forced (calibration/timm_models.py
// with TIMM_SDPA=efficient, calibration §28: batch 8, 32 and 128, fp32 and
// AMP, timm's own modules): every NoFlash peak within 4 KiB of the
// measured one, where the flash kernel's prediction of the AMP steps
// misses by 18 KB to 485 KB (its buffers are the efficient kernel's
// others), so the measurement ran the kernel it names.
func TestAttentionNoFlashMeasured(t *testing.T) {
	m, err := sim.Load(measured.Path("timm/deit_tiny_patch16_224-train.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	steps := timmSteps(t, "timm_efficient.jsonl")
	for _, l := range steps {
		var miss [2]int64 // flash, no flash
		for i, noFlash := range []bool{false, true} {
			r, err := m.Simulate(sim.Options{Batch: l.Batch, Height: l.height(), Width: l.width(), AMP: l.AMP, NoFlash: noFlash})
			if err != nil {
				t.Fatal(err)
			}
			miss[i] = r.Peak - l.Measured.Peak
		}
		t.Logf("batch %3d amp %-5v: peak off by %d B with the efficient kernel, %d B with flash", l.Batch, l.AMP, miss[1], miss[0])
		if miss[1] < -4096 || miss[1] > 4096 {
			t.Errorf("batch %d amp %v: the efficient kernel's peak off by %d B: want within 4 KiB", l.Batch, l.AMP, miss[1])
		}
		if l.AMP && miss[0] > -4096 && miss[0] < 4096 {
			t.Errorf("batch %d amp: flash's peak is within 4 KiB too (%d B): the measurement does not tell the kernels apart", l.Batch, miss[0])
		}
	}
	if len(steps) != 6 {
		t.Errorf("%d steps measured, want 6", len(steps))
	}
}

// TestTimmReservedInOrder replays calibration/timm_models.py's model steps
// as its processes ran them: each network's six steps in one process
// (float32 at batch 1, 8 and 32, then AMP), the cache emptied before each
// warm-up, so that a step's reserved peak carries the segments that the
// steps before pinned (cuBLAS's workspaces among their blocks). Simulated
// each as a fresh process instead, AMP at batch 1 reads up to 68% low
// (its measured process had run float32 at 32 first). In order, 62 of the
// 144 are exact to the byte (64 before a view of a gradient was kept from
// in-place sums, calibration §35; 63 before a linear's input gradient on
// 3-d rows was one too, which put xcit_tiny's float32 step at batch 8
// 0.66% low), the median 0.15%, 131 within 3%; the worst
// are nf_resnet50's AMP step at batch 1 (-18.1%: it carries what the
// float32 step at 32 pinned, whose segments read 5% off fresh too),
// ghostnet_100 (AMP at batch 1, +13.7%), resnest26d (AMP at batch 2,
// +12.5%), levit_128s, dla34 and repvgg_a2 (4 to 10%): an open residual of
// issue 38. (Before NormFreeBlock's locals were simulated, nf_resnet50's
// worst was +11.5% and 128 were within 3%.)
func TestTimmReservedInOrder(t *testing.T) {
	var (
		process *sim.Process
		model   string
		errs    []float64
		exact   int
	)
	for _, l := range timmSteps(t, "timm_models.jsonl") {
		if l.Model != model {
			m, err := sim.Load(measured.Path(l.Model))
			if err != nil {
				t.Fatal(err)
			}
			model, process = l.Model, m.NewProcess()
		}
		r, err := process.Simulate(sim.Options{Batch: l.Batch, Height: l.height(), Width: l.width(), AMP: l.AMP, EmptyCache: sim.EmptyCacheWarmUp})
		if err != nil {
			t.Fatal(err)
		}
		e := math.Abs(float64(r.PeakReserved-l.Measured.PeakReserved)) / float64(l.Measured.PeakReserved)
		if e == 0 {
			exact++
		}
		errs = append(errs, e)
	}
	slices.Sort(errs)
	within := 0
	for _, e := range errs {
		if e <= 0.03 {
			within++
		}
	}
	median, worst := errs[len(errs)/2], errs[len(errs)-1]
	t.Logf("%d steps in their processes' order: %d to the byte, %d within 3%%, median %.2f%%, worst %.2f%%", len(errs), exact, within, 100*median, 100*worst)
	if len(errs) != 144 || exact < 62 || within < 131 || median > 0.0025 || worst > 0.19 {
		t.Errorf("%d steps: %d to the byte (want at least 62), %d within 3%% (want 131), median %.2f%% (want at most 0.25%%), worst %.2f%% (want at most 19%%)", len(errs), exact, within, 100*median, 100*worst)
	}
}

// timmStep is one model step of a calibration/timm_models.py file.
type timmStep struct {
	Kind, Cfg, Model string
	Batch, Img       int64
	H                int64 `json:"img_h"`
	W                int64 `json:"img_w"`
	AMP              bool
	Measured         struct {
		Peak         int64
		PeakReserved int64 `json:"peak_reserved"`
	}
}

// height is the step's image height.
func (l timmStep) height() int64 { return cmp.Or(l.H, l.Img) }

// width is the step's image width.
func (l timmStep) width() int64 { return cmp.Or(l.W, l.Img) }

// timmSteps reads the model steps of a timm_models.py file of
// calibration/results, in their order.
func timmSteps(t *testing.T, file string) []timmStep {
	t.Helper()
	var out []timmStep
	for _, l := range jsonLines[timmStep](t, file) {
		if l.Kind == "model_step" {
			out = append(out, l)
		}
	}
	return out
}

// TestTimmFootprint holds what each timm network holds once loaded to what
// calibration/timm_models.py measured (param_bytes, buffer_bytes and
// memory_allocated() after model.to('cuda')): to the byte for all 24,
// TinyViT's and LeViT's attention_bias_idxs included, which the exporter
// writes as Constant nodes (calibration §30).
func TestTimmFootprint(t *testing.T) {
	footprints(t, "timm_models.jsonl", 24, func(f *sim.Footprint, l footprintLine) bool {
		return f.ParamBytes == l.ParamBytes && f.BufferBytes == l.BufferBytes && f.Allocated == l.Allocated
	})
}

// footprintLine is a model line of a calibration script: what the model
// held once loaded.
type footprintLine struct {
	Kind, Cfg, Model string
	ParamBytes       int64 `json:"param_bytes"`
	BufferBytes      int64 `json:"buffer_bytes"`
	Allocated        int64 `json:"alloc_after_load"`
}

// footprints checks the Footprint of each model line of a file with ok,
// and that the file has want of them.
func footprints(t *testing.T, file string, want int, ok func(*sim.Footprint, footprintLine) bool) {
	t.Helper()
	n := 0
	for _, l := range jsonLines[footprintLine](t, file) {
		if l.Kind != "model" {
			continue
		}
		n++
		m, err := sim.Load(measured.Path(l.Model))
		if err != nil {
			t.Fatal(err)
		}
		f, err := m.Footprint(sim.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !ok(f, l) {
			t.Errorf("%s: parameters %d B, buffers %d B, allocated %d B; measured %d, %d, %d", l.Cfg,
				f.ParamBytes, f.BufferBytes, f.Allocated, l.ParamBytes, l.BufferBytes, l.Allocated)
		}
	}
	if n != want {
		t.Errorf("%s: %d models, want %d", file, n, want)
	}
}
