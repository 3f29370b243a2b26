package sim_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestFamilies checks the detected family of the built-in models, the
// override by Scenario.Family and by Model.As, and their errors.
func TestFamilies(t *testing.T) {
	m, err := sim.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	if m.Family != "yolov9" {
		t.Fatalf("yolov9-t: family %q, want yolov9", m.Family)
	}
	train := sim.Options{Batch: 4, Height: 320, Width: 320, Train: true, Boxes: 32, AMP: true}
	yolo, err := m.Simulate(train)
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.As("generic")
	if err != nil {
		t.Fatal(err)
	}
	if g.Family != "generic" || g.Layers() != m.Layers() {
		t.Errorf("As(generic): family %q, %d layers; want generic, %d", g.Family, g.Layers(), m.Layers())
	}
	viaAs, err := g.Simulate(train)
	if err != nil {
		t.Fatal(err)
	}
	train.Family = "generic"
	viaScenario, err := m.Simulate(train)
	if err != nil {
		t.Fatal(err)
	}
	viaAs.Scenario.Family = "generic"
	if d := cmp.Diff(viaAs, viaScenario); d != "" {
		t.Errorf("Scenario.Family and Model.As differ (-As +Scenario):\n%s", d)
	}
	// The generic recipe's loss is the sum of the outputs: none of the
	// assigner's [B, boxes, anchors] tensors, and a float input resident
	// instead of the uint8 upload.
	if viaAs.Peak >= yolo.Peak {
		t.Errorf("generic train step peak %d, want below the YOLOv9 loss's %d", viaAs.Peak, yolo.Peak)
	}
	// The model step of the generic family keeps the layer loop's and the
	// modules' arguments; YOLOv9's lists (ELAN, CBFuse) keep a little more.
	step := sim.Options{Batch: 8, Height: 640, Width: 640, Segments: 4}
	a, err := m.Simulate(step)
	if err != nil {
		t.Fatal(err)
	}
	b, err := g.Simulate(step)
	if err != nil {
		t.Fatal(err)
	}
	// (Allocated bytes, so where the allocator's blocks fall moves them by
	// up to a block's rounding.)
	if b.AfterForward >= a.AfterForward+1<<20 || b.AfterForward < a.AfterForward*9/10 {
		t.Errorf("4 segments: generic after the forward %d, yolov9 %d: want less, within 10%%", b.AfterForward, a.AfterForward)
	}

	for _, tc := range []struct {
		run  func() error
		want string
	}{
		{func() error { _, err := m.As("yolov5"); return err }, `onnxmem: yolov9-t: family: unknown family "yolov5": want one of yolov9, generic`},
		{func() error {
			_, err := m.Simulate(sim.Options{Batch: 1, Height: 64, Width: 64, Family: "yolov5"})
			return err
		}, `unknown family "yolov5"`},
		{func() error {
			_, err := (&sim.Model{Name: "x"}).Simulate(sim.Options{Batch: 1, Height: 64, Width: 64})
			return err
		}, "was not made by Load"},
	} {
		if err := tc.run(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", err, tc.want)
		}
	}
}

// TestClasses checks the classes that a model's family reads from its
// outputs: the YOLOv9 heads' 80 or the classes they were built with, and
// none for the generic family.
func TestClasses(t *testing.T) {
	for _, tc := range []struct {
		name string
		nc   int
		want int64
	}{
		{"yolov9-t", 0, 80},
		{"yolov9-s", 20, 20},
		{"gelan-c", 1, 1},
		{"yolov9-e", 365, 365},
	} {
		m, err := sim.BuiltinClasses(tc.name, int64(tc.nc))
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Classes()
		if err != nil || got != tc.want {
			t.Errorf("%s built with %d classes: Classes %d, %v; want %d", tc.name, tc.nc, got, err, tc.want)
		}
		g, err := m.As("generic")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := g.Classes(); err != nil || got != 0 {
			t.Errorf("%s as the generic family: Classes %d, %v; want 0", tc.name, got, err)
		}
	}
}
