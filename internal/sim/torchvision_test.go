package sim_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// torchvisionLine is one line of shared/groundtruth/torchvision.jsonl: a
// model's sizes, or a model step of resnet18 or mobilenet_v3_large at
// 224×224 measured on an H200 (that folder's README.md says how).
type torchvisionLine struct {
	Kind     string `json:"kind"`
	Cfg      string `json:"cfg"`
	Model    string `json:"model"`
	Batch    int64  `json:"batch"`
	Img      int64  `json:"img"`
	AMP      bool   `json:"amp"`
	Segments int    `json:"segments"`
	Measured struct {
		M0           int64 `json:"m0"`
		AfterFwd     int64 `json:"after_fwd"`
		Peak         int64 `json:"peak"`
		PeakReq      int64 `json:"peak_req"`
		PeakReserved int64 `json:"peak_reserved"`
	} `json:"measured"`
}

// TestTorchvisionModelSteps simulates every model step of torchvision.jsonl
// with the generic family (in-place activations and adds, the classifier's
// Gemm with its cuBLAS workspaces) and prints measured against predicted.
// The peak must come within 3%, the bound; the other figures are
// printed.
func TestTorchvisionModelSteps(t *testing.T) {
	n := checkTorchvisionSteps(t, onnxbuild.Shared(t, "groundtruth/torchvision.jsonl"), func(model string) string { return onnxbuild.Shared(t, model) })
	if n != 32 {
		t.Errorf("%d model steps, want 32", n)
	}
}

// TestTorchvisionMoreModelSteps does the same for the networks that
// calibration/torchvision_more.py exported and measured the same way
// (resnet50, efficientnet_b0 with its stochastic depth, regnet_y_400mf,
// convnext_tiny with its layer norms, linears, GELUs and layer scales,
// vit_b_16 with its fused attention, class token and position embedding),
// each in a process of its own, fp32 batches 1 to 128 and then AMP's: the
// requested peak must match the measured one within 0.1% and the allocated
// within 3%.
func TestTorchvisionMoreModelSteps(t *testing.T) {
	file := measured.Path("torchvision_more.jsonl")
	n := checkTorchvisionSteps(t, file, func(model string) string { return measured.Path(model) })
	if n != 50 {
		t.Errorf("%d model steps simulated, want 50", n)
	}
}

// TestTorchvisionWideModelSteps does the same for the fifteen networks of
// calibration/torchvision_wide.jsonl (squeezenet1_1, mobilenet_v2,
// shufflenet_v2_x1_0, mnasnet1_0, resnet34, regnet_x_400mf,
// mobilenet_v3_small, densenet121, alexnet, vgg11_bn, resnext50_32x4d,
// wide_resnet50_2, efficientnet_v2_s, vit_b_32, convnext_small, maxvit_t,
// swin_t), measured the same way but with the cache emptied before each
// scenario. Their convolutions but mobilenet_v2's, maxvit_t's and swin_t's
// are in the cuDNN table; those come from cuDNNWorkspaceRule alone, the
// case of a network nobody measured. maxvit_t's attention is two Einsums
// a layer, swin_t's two MatMuls, each the one bmm torch runs
// (schedule/einsum.go); their relative position indices are int64
// buffers; swin_t pads its windows (F.pad, by nothing at 224: a clone)
// and rolls them (two slices and a concat).
func TestTorchvisionWideModelSteps(t *testing.T) {
	file := measured.Path("torchvision_wide.jsonl")
	n := checkTorchvisionSteps(t, file, func(model string) string { return measured.Path(model) })
	if n != 170 {
		t.Errorf("%d model steps simulated, want 170", n)
	}
}

// TestTorchvisionNewModelSteps does the same for the twelve networks of
// calibration/torchvision_new.jsonl, measured on an H100 80GB HBM3 (same
// torch and cuDNN) the same way, the cache emptied before each scenario:
// swin_v2_t (cosine attention: F.normalize as a norm, its clamp, an
// expanded view and a division that saves its operands, not its result;
// logit_scale.exp() and the relative position bias MLP computed from
// parameters alone, which promote the float16 scores to float32 under
// autocast and need gradients; the qkv bias a clone of a parameter, still
// one linear), efficientnet_b3, regnet_y_1_6gf, squeezenet1_0, mnasnet0_5,
// shufflenet_v2_x0_5, densenet169, resnet101, swin_s, convnext_base,
// vgg16_bn and vit_l_32: networks none of whose measurements shaped
// onnxmem's rules before they were predicted (their convolutions were
// measured, calibration §19).
func TestTorchvisionNewModelSteps(t *testing.T) {
	file := measured.Path("torchvision_new.jsonl")
	n := checkTorchvisionSteps(t, file, func(model string) string { return measured.Path(model) })
	if n != 120 {
		t.Errorf("%d model steps simulated, want 120", n)
	}
}

// reqTolerance is how close the requested peak must be: exact but for
// ConvNeXt, whose float32 layer norms under autocast and channels-last
// strides are modelled more coarsely (within 0.6% today), the ViTs
// (within 0.9%), Swin V2 (within 1.5%), MobileNetV2, whose convolutions
// the cuDNN table does not hold (the rule's workspaces: within 0.6%).
func reqTolerance(cfg string) float64 {
	switch {
	case cfg == "mobilenet_v2":
		return 0.008
	case strings.HasPrefix(cfg, "convnext"):
		return 0.006
	case strings.HasPrefix(cfg, "vit"):
		return 0.009
	case strings.HasPrefix(cfg, "swin_v2"):
		// Its cosine attention from torch's source and derivatives.yaml
		// alone, no trace yet: within 1.5% (low at batch 1 and 2, high
		// at 128 in float32).
		return 0.015
	}
	return 0.001
}

// checkTorchvisionSteps simulates the model steps of a torchvision.jsonl
// file, checks and prints them, and returns how many it simulated.
func checkTorchvisionSteps(t *testing.T, file string, path func(model string) string) int {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	models := map[string]*sim.Model{}
	var out strings.Builder
	fmt.Fprintf(&out, "%-18s %5s %4s | %8s %8s %6s | %8s %8s %6s | %8s %8s %6s | %7s %7s\n", "model", "batch", "prec",
		"peak", "pred", "err", "fwd", "pred", "err", "req", "pred", "err", "m0", "pred")
	var errs []float64
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	rel := func(got, want int64) float64 { return float64(got-want) / float64(want) }
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		var l torchvisionLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Kind != "model_step" || l.Measured.Peak == 0 {
			continue
		}
		step := sim.Options{Batch: l.Batch, Height: l.Img, Width: l.Img, AMP: l.AMP, Segments: l.Segments}
		m := models[l.Model]
		if m == nil {
			if m, err = sim.Load(path(l.Model)); err != nil {
				t.Fatal(err)
			}
			if m.Family != "generic" {
				t.Fatalf("%s: family %s, want generic", l.Model, m.Family)
			}
			models[l.Model] = m
		}
		r, err := m.Simulate(step)
		if err != nil {
			t.Fatal(err)
		}
		n++
		prec := "fp32"
		if l.AMP {
			prec = "amp"
		}
		e := rel(r.Peak, l.Measured.Peak)
		errs = append(errs, math.Abs(e))
		fmt.Fprintf(&out, "%-18s %5d %4s | %8.1f %8.1f %+5.2f%% | %8.1f %8.1f %+5.2f%% | %8.1f %8.1f %+5.2f%% | %7.1f %7.1f\n",
			l.Cfg, l.Batch, prec, mib(l.Measured.Peak), mib(r.Peak), 100*e,
			mib(l.Measured.AfterFwd), mib(r.AfterForward), 100*rel(r.AfterForward, l.Measured.AfterFwd),
			mib(l.Measured.PeakReq), mib(r.PeakRequested), 100*rel(r.PeakRequested, l.Measured.PeakReq),
			mib(l.Measured.M0), mib(r.M0))
		if math.Abs(e) > 0.03 {
			t.Errorf("%s batch %d %s: peak %d, measured %d (%+.2f%%), beyond 3%%", l.Cfg, l.Batch, prec, r.Peak, l.Measured.Peak, 100*e)
		}
		if e := rel(r.PeakRequested, l.Measured.PeakReq); math.Abs(e) > reqTolerance(l.Cfg) {
			t.Errorf("%s batch %d %s: requested peak %d, measured %d (%+.2f%%), beyond 0.1%%", l.Cfg, l.Batch, prec, r.PeakRequested, l.Measured.PeakReq, 100*e)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Float64s(errs)
	if len(errs) > 0 {
		fmt.Fprintf(&out, "peak: median |error| %.2f%%, largest %.2f%%\n", 100*errs[len(errs)/2], 100*errs[len(errs)-1])
	}
	t.Log("\n" + out.String())
	return n
}

// TestTorchvisionTraces replays calibration/results/torchvision_steps.json,
// the allocation trace of the measured step of resnet18 and
// mobilenet_v3_large (batch 8 fp32 and AMP, 64 fp32; each model in a fresh
// process, calibration/torchvision_ops.py), against the program onnxmem
// builds: the same allocations and frees of the same sizes, in the same
// order, up to the harness's own cleanup (the last three events: it keeps
// the input and frees the loss after the output). Frees that come together
// are compared as sets: autocast's cache frees its bias casts in its hash
// map's order. The first step of each process, which ran on a fresh
// allocator as every simulation does, must also give every figure to the
// byte; the later ones (and torchvision.jsonl's, a model's steps one after
// another in one process) start from the cache earlier steps left.
func TestTorchvisionTraces(t *testing.T) {
	b, err := measured.Read("torchvision_steps.json")
	if err != nil {
		t.Fatal(err)
	}
	var steps []struct {
		Model        string  `json:"model"`
		B            int64   `json:"B"`
		AMP          bool    `json:"amp"`
		M0           int64   `json:"m0"`
		AfterFwd     int64   `json:"after_fwd"`
		Peak         int64   `json:"peak"`
		PeakReq      int64   `json:"peak_req"`
		PeakReserved int64   `json:"peak_reserved"`
		Events       [][]any `json:"events"`
	}
	if err := json.Unmarshal(b, &steps); err != nil {
		t.Fatal(err)
	}
	models := map[string]*sim.Model{}
	for _, s := range steps {
		sc := sim.Options{Batch: s.B, Height: 224, Width: 224, AMP: s.AMP, EmptyCache: ownHarness}
		m := models[s.Model]
		if m == nil {
			if m, err = sim.Load(onnxbuild.Shared(t, "torchvision/"+s.Model+"-train.onnx")); err != nil {
				t.Fatal(err)
			}
			models[s.Model] = m
			// The first step of each process ran on a fresh allocator, as
			// onnxmem simulates every step: every figure to the byte.
			r, err := m.Simulate(sc)
			if err != nil {
				t.Fatal(err)
			}
			got := [5]int64{r.M0, r.AfterForward, r.Peak, r.PeakRequested, r.PeakReserved}
			if want := [5]int64{s.M0, s.AfterFwd, s.Peak, s.PeakReq, s.PeakReserved}; got != want {
				t.Errorf("%s batch %d: m0, after_fwd, peak, peak_req, peak_reserved %v, measured in a fresh process %v", s.Model, s.B, got, want)
			}
		}
		p, err := m.Program(sc)
		if err != nil {
			t.Fatal(err)
		}
		var sim, meas []string
		for _, e := range p.Events {
			c := "+"
			if e.Free {
				c = "-"
			}
			sim = append(sim, fmt.Sprintf("%s%d", c, p.Buffers[e.Buf].Bytes))
		}
		for _, e := range s.Events {
			c, _ := e[0].(string)
			size, _ := e[1].(float64)
			switch c {
			case "a":
				meas = append(meas, fmt.Sprintf("+%d", int64(size)))
			case "f":
				meas = append(meas, fmt.Sprintf("-%d", int64(size)))
			}
		}
		what := fmt.Sprintf("%s batch %d amp %v", s.Model, s.B, s.AMP)
		n := len(meas) - 3
		if len(sim) < n || n < 100 {
			t.Errorf("%s: %d events, %d measured", what, len(sim), len(meas))
			continue
		}
		sim, meas = freeRuns(sim[:n]), freeRuns(meas[:n])
		first := -1
		for i := range meas {
			if sim[i] != meas[i] {
				first = i
				break
			}
		}
		t.Logf("%s: %d events compared, first difference at %d", what, n, first)
		if first >= 0 {
			t.Errorf("%s: event %d is %s, measured %s (around: %v, measured %v)", what, first, sim[first], meas[first],
				sim[max(first-3, 0):min(first+5, n)], meas[max(first-3, 0):min(first+5, n)])
		}
	}
}

// freeRuns sorts each run of consecutive frees, whose order the comparison
// leaves open.
func freeRuns(ev []string) []string {
	out := slices.Clone(ev)
	for i := 0; i < len(out); {
		j := i
		for j < len(out) && out[j][0] == '-' {
			j++
		}
		slices.Sort(out[i:j])
		i = j + 1
	}
	return out
}

// TestTorchvisionFreshSteps checks steps traced each in a fresh process
// (calibration/vit_trace.py --runs: the ground truth's model step, the
// second of two, after the cache was emptied): vit_b_32 at batch 128 in
// float32, efficientnet_b0 and shufflenet_v2_x1_0 at batch 2 under AMP,
// whose peaks in torchvision_more.jsonl and torchvision_wide.jsonl read up
// to 1.8% low only because those measured one step after another in one
// process; and shufflenet_v2 at batch 8 in float32, whose channel shuffle
// (a transpose made contiguous, then a view) copies in the forward and in
// the backward; and vit_trace.py's first runs, vit_b_32 at batch 8 and 32
// and vit_b_16 at batch 8 under AMP, whose traces showed what the encoder
// does: the cat of the float32 class token with the half patches is
// float32 (type promotion), and so is the residual stream; q.view(bsz,
// num_heads, tgt_len, head_dim) of a transposed q is a view (it only splits
// a dim); the residual stream after MultiheadAttention's transpose back
// keeps the (L, B, E) order, which each layer norm copies, forward and
// backward. Each requested peak must come within 0.01%; vit_b_16's
// reserved peak, which those made exact, must stay so. cnn_steps_more.json
// (2026-12-05): alexnet float32 at batch 128 and AMP at 32, vgg11_bn AMP
// at 32, convnext_tiny float32 at 32. tf_window_steps.json (2026-12-05, an
// H100 80GB HBM3 with the same torch and cuDNN): maxvit_t and swin_t at
// batch 8 under AMP, whose in-order reserved peaks read up to 5.9% low
// until their convolutions were measured: alone in a fresh process
// maxvit_t's is 0.11% low. cnn_steps_new.json (the same H100): nine steps of
// the networks of torchvision_new.jsonl, every requested peak exact;
// convnext_base's float32 reserved peaks, 4.0% and 4.6% low until its
// channels-last convolutions were measured, must stay within 0.1%, and
// the others' but regnet_y_1_6gf's (+5.6%, AMP at batch 32) are exact.
func TestTorchvisionFreshSteps(t *testing.T) {
	type step struct {
		Model        string `json:"model"`
		B            int64  `json:"B"`
		AMP          bool   `json:"amp"`
		PeakReq      int64  `json:"peak_req"`
		PeakReserved int64  `json:"peak_reserved"`
		M0           int64  `json:"m0"`
	}
	var all []step
	for _, f := range []string{"vit_steps_more.json", "cnn_steps.json", "vit_steps.json", "cnn_steps_more.json", "tf_window_steps.json", "cnn_steps_new.json"} {
		b, err := measured.Read(f)
		if err != nil {
			t.Fatal(err)
		}
		var steps []step
		if err := json.Unmarshal(b, &steps); err != nil {
			t.Fatal(err)
		}
		all = append(all, steps...)
	}
	// convnext_vit_ops.py's traced steps: convnext_tiny and vit_b_16 at
	// batch 8, float32 and AMP.
	b, err := measured.Read("convnext_vit_ops.json")
	if err != nil {
		t.Fatal(err)
	}
	var ops struct{ Steps []step }
	if err := json.Unmarshal(b, &ops); err != nil {
		t.Fatal(err)
	}
	all = append(all, ops.Steps...)
	if len(all) != 26 {
		t.Fatalf("%d steps, want 26", len(all))
	}
	for _, s := range all {
		m, err := sim.Load(measured.Path("tv/") + s.Model + "-train.onnx")
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.Simulate(sim.Options{Batch: s.B, Height: 224, Width: 224, AMP: s.AMP, EmptyCache: ownHarness})
		if err != nil {
			t.Fatal(err)
		}
		e := float64(r.PeakRequested-s.PeakReq) / float64(s.PeakReq)
		t.Logf("%s batch %d amp %v: requested peak %d, measured %d (%+.3f%%), m0 %d, measured %d", s.Model, s.B, s.AMP, r.PeakRequested, s.PeakReq, 100*e, r.M0, s.M0)
		if math.Abs(e) > 0.0001 || r.M0 != s.M0 {
			t.Errorf("%s batch %d amp %v: requested peak %d, measured %d (%+.3f%%), m0 %d, measured %d", s.Model, s.B, s.AMP, r.PeakRequested, s.PeakReq, 100*e, r.M0, s.M0)
		}
		// Reserved to the byte: the ViT steps, and AlexNet's float32 one
		// since its first conv (11×11, padding 2) was measured
		// (conv_sweep_big.sh; +8.8% on the rule).
		if (s.Model == "vit_b_16" || s.Model == "alexnet" && !s.AMP) && r.PeakReserved != s.PeakReserved {
			t.Errorf("%s batch %d amp %v: reserved peak %d, measured %d", s.Model, s.B, s.AMP, r.PeakReserved, s.PeakReserved)
		}
		switch e := float64(r.PeakReserved-s.PeakReserved) / float64(s.PeakReserved); s.Model {
		case "convnext_base":
			if math.Abs(e) > 0.001 {
				t.Errorf("%s batch %d amp %v: reserved peak %d, measured %d (%+.2f%%), beyond 0.1%%", s.Model, s.B, s.AMP, r.PeakReserved, s.PeakReserved, 100*e)
			}
		case "vgg16_bn", "shufflenet_v2_x0_5", "resnet101", "squeezenet1_0", "efficientnet_b3":
			if math.Abs(e) > 0.002 {
				t.Errorf("%s batch %d amp %v: reserved peak %d, measured %d (%+.2f%%), beyond 0.2%%", s.Model, s.B, s.AMP, r.PeakReserved, s.PeakReserved, 100*e)
			}
		}
	}
}

// TestTorchvisionReservedInOrder replays the model steps of
// torchvision_wide.jsonl and torchvision_more.jsonl as they were measured:
// each network's scenarios one after another in one process, the cache
// emptied before each warm-up (torchvision_more.py --empty-cache) or never.
// The reserved peaks depend on which ops run in place (generic.InPlace):
// with torchvision's conventions read from its source (SqueezeNet's and
// AlexNet's conv ReLUs in place, MNASNet's and RegNet's sums out of place,
// EfficientNet's and ConvNeXt's result += input in place) 78 of 150 and 23
// of 50 were exact to the byte (63 and 10 before), with medians of 0.00%
// and 0.19%; with the ViT encoder's layouts and types (calibration/
// README.md §13, §14) and channels-last cuDNN workspaces measured 80 and
// 26, medians 0.00% and 0.00%, worst 23% (AlexNet, its process's history)
// and 4.0%. maxvit_t's AMP steps read 1.2–5.9% low from batch 2 on until
// its and swin_t's convolutions were measured (calibration §19: their
// MBConv convolutions had come from the workspace rule); now its steps
// follow within 0.92% but AMP at batch 1, after float32 at 128, 18% low:
// its process's history. The rest is mostly the measuring process's
// history (§10, §11). torchvision_new.jsonl's twelve networks, predicted
// before any of their steps was looked at (calibration §19): 54 of 120 to
// the byte, median 0.08%, worst 13% (vgg16_bn AMP at batch 1, after
// float32 at 128, which traced alone in a fresh process is exact); 53
// since a linear on a contiguous input of more than two dims makes
// cuBLASLt's workspace, as aten::linear's flattened addmm does (a
// transformer's 3-d inputs, calibration §28; ConvNeXt's 4-d ones, whose
// convnext_base float32 step at batch 8 moved from exact to 0.07% while
// torchvision_wide's convnext_small at batch 1 became exact).
func TestTorchvisionReservedInOrder(t *testing.T) {
	for _, c := range []struct {
		file          string
		mode          sim.EmptyCache
		exact         int
		median, worst float64
	}{
		{"torchvision_wide.jsonl", sim.EmptyCacheWarmUp, 80, 0.0005, 0.28},
		{"torchvision_more.jsonl", sim.EmptyCacheNever, 26, 0.0005, 0.04},
		{"torchvision_new.jsonl", sim.EmptyCacheWarmUp, 53, 0.001, 0.14},
	} {
		b, err := measured.Read(c.file)
		if err != nil {
			t.Fatal(err)
		}
		var (
			errs    []float64
			exact   int
			model   string
			process *sim.Process
		)
		for l := range strings.Lines(string(b)) {
			var s torchvisionLine
			if err := json.Unmarshal([]byte(l), &s); err != nil {
				t.Fatal(err)
			}
			if s.Kind != "model_step" {
				continue
			}
			if s.Model != model {
				m, err := sim.Load(measured.Path(s.Model))
				if err != nil {
					t.Fatal(err)
				}
				model, process = s.Model, m.NewProcess()
			}
			r, err := process.Simulate(sim.Options{Batch: s.Batch, Height: s.Img, Width: s.Img, AMP: s.AMP, EmptyCache: c.mode})
			if err != nil {
				t.Fatal(err)
			}
			e := math.Abs(float64(r.PeakReserved-s.Measured.PeakReserved)) / float64(s.Measured.PeakReserved)
			if e == 0 {
				exact++
			}
			errs = append(errs, e)
		}
		slices.Sort(errs)
		median, worst := errs[len(errs)/2], errs[len(errs)-1]
		t.Logf("%s: %d steps, reserved peak median %.2f%%, worst %.2f%%, %d to the byte", c.file, len(errs), 100*median, 100*worst, exact)
		if exact < c.exact || median > c.median || worst > c.worst {
			t.Errorf("%s: reserved peaks %d to the byte (want at least %d), median %.2f%% (want at most %.2f%%), worst %.2f%% (want at most %.0f%%)",
				c.file, exact, c.exact, 100*median, 100*c.median, 100*worst, 100*c.worst)
		}
	}
}

// TestAttentionWithoutFlash holds the ViTs' predictions, which take the
// flash kernel for attention under autocast, to steps measured on an H100
// with flash attention turned off (calibration/torchvision_more.py
// --no-flash: torch.backends.cuda.enable_flash_sdp(False), as on a card
// below sm 8.0) and, as the control, on. Their peaks came out the same to
// the byte, so onnxmem's prediction stands for cards without flash
// attention too.
func TestAttentionWithoutFlash(t *testing.T) {
	for _, file := range []string{"torchvision_flash_h100.jsonl", "torchvision_noflash.jsonl"} {
		if n := checkTorchvisionSteps(t, measured.Path(file), measured.Path); n != 12 {
			t.Errorf("%s: %d model steps simulated, want 12", file, n)
		}
	}
}
