package onnxmem_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/onnxmem"
)

func TestDevices(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range onnxmem.Devices() {
		switch {
		case seen[d.Name]:
			t.Errorf("%s listed twice", d.Name)
		case d.Usable() <= 0 || d.Usable() >= d.Total:
			t.Errorf("%s: usable %d of %d", d.Name, d.Usable(), d.Total)
		case d.CuBLASWorkspace <= 0:
			t.Errorf("%s: no cuBLAS workspace", d.Name)
		case !strings.Contains(d.Sources, "total:") || !strings.Contains(d.Sources, "context:"):
			t.Errorf("%s: sources %q do not cite the total and the context", d.Name, d.Sources)
		}
		seen[d.Name] = true
		if got, err := onnxmem.ParseDevice(strings.ToUpper(d.Name)); err != nil || got.Name != d.Name {
			t.Errorf("LookupDevice(%q) = %v, %v", strings.ToUpper(d.Name), got.Name, err)
		}
	}
	for _, n := range []string{"h200", "h100-80", "a100-80", "a100-40", "v100-32", "v100-16", "rtx4090", "rtx3090", "l4", "t4"} {
		if !seen[n] {
			t.Errorf("no profile for %s", n)
		}
	}
	if _, err := onnxmem.ParseDevice("gtx480"); err == nil || !strings.HasPrefix(err.Error(), "onnxmem: unknown device") {
		t.Errorf("LookupDevice(gtx480): %v", err)
	}
}

// TestMaxBatchDevice checks the search against single simulations under
// the card's limit: the batch it finds fits, the next one runs out of
// memory, and a larger card never takes fewer.
func TestMaxBatchDevice(t *testing.T) {
	m, err := onnxmem.Load(onnxbuild.Shared(t, filepath.Join("yolov9", "yolov9-s-train.onnx")))
	if err != nil {
		t.Fatal(err)
	}
	prev := int64(0)
	for _, name := range []string{"t4", "rtx4090", "a100-40"} {
		d, _ := onnxmem.ParseDevice(name)
		sc := onnxmem.Scenario{AMP: true, Device: name}
		n, r, err := m.MaxBatch(sc, 512)
		if err != nil {
			t.Fatal(err)
		}
		if n < 1 || r == nil || !r.Fits() || r.Scenario.Batch != n {
			t.Fatalf("%s: max batch %d", name, n)
		}
		sc.Batch = n + 1
		next, err := m.Simulate(sc)
		if err != nil {
			t.Fatal(err)
		}
		if next.Fits() || !next.OOM {
			t.Errorf("%s: batch %d fits too", name, n+1)
		}
		if n < prev {
			t.Errorf("%s takes batch %d, less than a smaller card's %d", name, n, prev)
		}
		prev = n
		t.Logf("%s: yolov9-s AMP model step, largest batch %d (%.2f GiB reserved of %.2f usable)", name, n, float64(r.PeakReserved)/(1<<30), float64(d.Usable())/(1<<30))
	}
}

func TestParseDevice(t *testing.T) {
	for _, tc := range []struct {
		in             string
		total, context int64
	}{
		{"24GB", 24e9, contextAssumedForTest},
		{"23.5GiB", 23.5 * (1 << 30), contextAssumedForTest},
		{"24gb+ctx=600MiB", 24e9, 600 << 20},
		{"80GB+ctx=0B", 80e9, 0},
		{"16384MiB", 16 << 30, contextAssumedForTest},
		{"rtx4090+ctx=400MiB", 24217 << 20, 400 << 20}, // a listed card, its context given
		{"T4+ctx=300MiB", 15110 << 20, 300 << 20},
	} {
		d, err := onnxmem.ParseDevice(tc.in)
		if err != nil {
			t.Errorf("ParseDevice(%q): %v", tc.in, err)
			continue
		}
		if d.Total != tc.total || d.Context != tc.context || d.Usable() != tc.total-tc.context || d.Name != tc.in {
			t.Errorf("ParseDevice(%q) = total %d context %d name %q, want %d and %d", tc.in, d.Total, d.Context, d.Name, tc.total, tc.context)
		}
	}
	if d, err := onnxmem.ParseDevice("RTX4090"); err != nil || d.Name != "rtx4090" {
		t.Errorf("ParseDevice(RTX4090) = %v, %v", d.Name, err)
	}
	for _, bad := range []string{"", "24", "GB", "-1GB", "24XB", "24GB+600MiB", "24GB+ctx=", "1GB+ctx=2GB", "gtx480", "1e30GB", "t4+ctx=15GiB", "a100+ctx=400MiB", "4090+400MiB"} {
		if _, err := onnxmem.ParseDevice(bad); err == nil || !strings.HasPrefix(err.Error(), "onnxmem: ") {
			t.Errorf("ParseDevice(%q): %v, want an onnxmem error", bad, err)
		}
	}
	if got := onnxmem.FormatBytes(23.5 * (1 << 30)); got != "23.5GiB" {
		t.Errorf("FormatBytes = %q", got)
	}
}

// contextAssumedForTest is the CUDA context ParseDevice assumes for a card
// given by its size: the one the listed cards without a measured or bounded
// context carry (the rtx4090's).
var contextAssumedForTest = func() int64 {
	d, _ := onnxmem.ParseDevice("rtx4090")
	return d.Context
}()

// TestAllocConf simulates a step with the caching allocator's options: the
// bytes requested do not depend on them, expandable segments reserve no
// more than one segment per request does, and a bad option is an error that
// names it.
func TestAllocConf(t *testing.T) {
	m, err := onnxmem.Builtin("yolov9-s")
	if err != nil {
		t.Fatal(err)
	}
	sc := onnxmem.Scenario{Step: onnxmem.TrainStep, AMP: true}
	base, err := m.Simulate(sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, conf := range []string{"expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4", "expandable_segments:False"} {
		sc.AllocConf = conf
		r, err := m.Simulate(sc)
		if err != nil {
			t.Fatalf("%s: %v", conf, err)
		}
		if r.PeakRequested != base.PeakRequested || r.Scenario.AllocConf != conf {
			t.Errorf("%s: requested peak %d, default %d", conf, r.PeakRequested, base.PeakRequested)
		}
		switch conf {
		case "expandable_segments:True":
			if r.PeakReserved >= base.PeakReserved {
				t.Errorf("%s: reserved %d, not less than the default's %d", conf, r.PeakReserved, base.PeakReserved)
			}
		case "expandable_segments:False":
			if r.Peak != base.Peak || r.PeakReserved != base.PeakReserved {
				t.Errorf("%s: differs from the default", conf)
			}
		}
		t.Logf("%-28s peak %d reserved %d", conf, r.Peak, r.PeakReserved)
	}
	for _, bad := range []string{"expandable:True", "max_split_size_mb:1", "per_process_memory_fraction:0.5"} {
		sc.AllocConf = bad
		if _, err := m.Simulate(sc); err == nil || !strings.HasPrefix(err.Error(), "onnxmem: alloc conf") {
			t.Errorf("%s: %v, want an alloc conf error", bad, err)
		}
	}
}

// TestParseDeviceSpellings checks the names people give a card: case,
// spaces, dashes, a vendor prefix and a trailing GB do not matter, a family
// name that fits one card names it, and one that fits several is an error
// that names them.
func TestParseDeviceSpellings(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"A100-40GB", "a100-40"},
		{"a100_80gb", "a100-80"},
		{"NVIDIA GeForce RTX 4090", "rtx4090"},
		{"4090", "rtx4090"},
		{"RTX-3090", "rtx3090"},
		{"h100", "h100-80"},
		{"NVIDIA H200", "h200"},
		{"T4", "t4"},
	} {
		d, err := onnxmem.ParseDevice(tc.in)
		if err != nil || d.Name != tc.want {
			t.Errorf("LookupDevice(%q) = %q, %v; want %q", tc.in, d.Name, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"a100", `device "a100" fits a100-80 and a100-40`},
		{"v100", `device "v100" fits v100-32 and v100-16`},
		{"mi300", `unknown device "mi300"`},
		{"", `unknown device ""`},
	} {
		if _, err := onnxmem.ParseDevice(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LookupDevice(%q): %v, want an error with %q", tc.in, err, tc.want)
		}
	}
	// A size is still a size.
	if d, err := onnxmem.ParseDevice("24GB"); err != nil || d.Total != 24e9 {
		t.Errorf("ParseDevice(24GB) = %d, %v", d.Total, err)
	}
}

// TestBF16Refused checks that bfloat16 autocast on a card older than
// Ampere is refused with the reason, and taken on one of 8.0 or newer.
func TestBF16Refused(t *testing.T) {
	m, err := onnxmem.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	for dev, ok := range map[string]bool{"t4": false, "v100-16": false, "a100-40": true, "rtx4090": true, "24GB": true} {
		_, err := m.Simulate(onnxmem.Scenario{Batch: 1, Height: 64, Width: 64, AMP: true, BF16: true, Device: dev})
		if ok != (err == nil) || err != nil && !strings.Contains(err.Error(), "compute capability 8.0") {
			t.Errorf("bf16 on %s: %v; want refused %v, saying why", dev, err, !ok)
		}
	}
}

// TestNoFlashBelowSm80 checks attention on cards without PyTorch's flash
// kernel (below compute capability 8.0, T4 and V100): a transformer under
// AMP simulates there (memory-efficient attention: schedule's
// TestAttentionNoFlash); grouped-query attention in half precision, which
// PyTorch then runs on its math kernel, is refused with the reason.
func TestNoFlashBelowSm80(t *testing.T) {
	vit, err := onnxmem.Load("../calibration/results/timm/deit_tiny_patch16_224-train.onnx")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vit.Simulate(onnxmem.Scenario{Batch: 8, AMP: true, Device: "t4"}); err != nil {
		t.Errorf("deit_tiny on a t4 under AMP: %v", err)
	}
	llama, err := onnxmem.Load("../calibration/results/hf/llama-train.onnx")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dev string
		amp bool
		ok  bool
	}{{"t4", true, false}, {"v100-16", true, false}, {"t4", false, true}, {"rtx4090", true, true}} {
		_, err := llama.Simulate(onnxmem.Scenario{Batch: 1, Seq: 64, AMP: c.amp, Device: c.dev})
		if c.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), "without flash attention") {
			t.Errorf("llama on %s, amp %v: %v; want refused %v, saying why", c.dev, c.amp, err, !c.ok)
		}
	}
}

// TestScriptCuBLASWorkspace checks that a YOLOv9 train step keeps the
// cuBLAS workspace that train_dual.py's init_seeds(deterministic=True)
// sets, CUBLAS_WORKSPACE_CONFIG=:4096:8 (32 MiB), on a card whose own
// default is 8.125 MiB as on a Hopper one: the two steps reserve alike.
func TestScriptCuBLASWorkspace(t *testing.T) {
	m, err := onnxmem.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	var m0 []int64
	for _, dev := range []string{"rtx4090", "h100-80"} {
		d, err := onnxmem.ParseDevice(dev)
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.Simulate(onnxmem.Scenario{Step: onnxmem.TrainStep, Batch: 1, Height: 64, Width: 64, AMP: true, Device: dev})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: the card's default cuBLAS workspace %d bytes; allocated before the step %d", dev, d.CuBLASWorkspace, r.M0)
		m0 = append(m0, r.M0)
	}
	if m0[0] != m0[1] {
		t.Errorf("allocated before the train step: %d on rtx4090, %d on h100-80; want the script's workspace on both", m0[0], m0[1])
	}
}
