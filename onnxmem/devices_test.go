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
	for _, d := range onnxmem.Devices {
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
		if got, err := onnxmem.LookupDevice(strings.ToUpper(d.Name)); err != nil || got.Name != d.Name {
			t.Errorf("LookupDevice(%q) = %v, %v", strings.ToUpper(d.Name), got.Name, err)
		}
	}
	for _, n := range []string{"h200", "h100-80", "a100-80", "a100-40", "v100-32", "v100-16", "rtx4090", "rtx3090", "l4", "t4"} {
		if !seen[n] {
			t.Errorf("no profile for %s", n)
		}
	}
	if _, err := onnxmem.LookupDevice("gtx480"); err == nil || !strings.HasPrefix(err.Error(), "onnxmem: unknown device") {
		t.Errorf("LookupDevice(gtx480): %v", err)
	}
}

// TestMaxBatchOn checks the search against single simulations: the batch it
// finds fits, the next one does not, and a larger card never takes fewer.
func TestMaxBatchOn(t *testing.T) {
	m, err := onnxmem.Load(onnxbuild.Shared(t, filepath.Join("yolov9", "yolov9-s-train.onnx")))
	if err != nil {
		t.Fatal(err)
	}
	prev := int64(0)
	for _, name := range []string{"t4", "rtx4090", "a100-40"} {
		d, _ := onnxmem.LookupDevice(name)
		sc := onnxmem.Scenario{Height: 640, Width: 640, AMP: true}
		n, r, err := m.MaxBatchOn(d, sc, 512)
		if err != nil {
			t.Fatal(err)
		}
		if n < 1 || r == nil || !d.Fits(r) {
			t.Fatalf("%s: max batch %d", name, n)
		}
		sc.Batch, sc.CuBLASWorkspace = n+1, d.CuBLASWorkspace
		next, err := m.Simulate(sc)
		if err != nil {
			t.Fatal(err)
		}
		if d.Fits(next) {
			t.Errorf("%s: batch %d fits too", name, n+1)
		}
		if n < prev {
			t.Errorf("%s takes batch %d, less than a smaller card's %d", name, n, prev)
		}
		prev = n
		t.Logf("%s: yolov9-s AMP model step, largest batch %d (%.2f GiB reserved of %.2f usable)", name, n, float64(r.PeakReserved)/(1<<30), float64(d.Usable())/(1<<30))
	}
}
