package sim

import (
	"slices"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
)

// TestClassPrograms is the oracle of the class cache: for built-in models
// and settings of every kind, the program derived for a batch size from its
// class's template has the buffers, events and results of the program built
// at that batch, for every batch from 1 to 70 and some larger ones.
func TestClassPrograms(t *testing.T) {
	batches := []int64{3, 1, 2} // the three builds that make the template
	for b := int64(4); b <= 70; b++ {
		batches = append(batches, b)
	}
	batches = append(batches, 96, 127, 128, 250)
	scenarios := []Options{
		{Height: 640, Width: 640},
		{Height: 640, Width: 640, AMP: true, Segments: 2},
		{Height: 384, Width: 640, Half: true},
		{Height: 640, Width: 640, Eval: true},
		{Height: 640, Width: 640, AMP: true, Train: true, Boxes: 16, EMA: true},
		{Height: 512, Width: 512, Train: true, Boxes: 3, Optimizer: AdamW, Segments: 4},
		{Height: 640, Width: 640, AMP: true, Train: true, Boxes: 7, EMA: true, PrevPredAlive: true},
	}
	// A ViT's and a ConvNeXt's Linears sum their bias gradients over B·L
	// rows, whose staging appears past some batch size: the derived
	// programs must size it anew, as the convs' workspaces.
	tv := []Options{{Height: 224, Width: 224}, {Height: 224, Width: 224, AMP: true}}
	models := []struct {
		name      string
		load      func(string) (*Model, error)
		scenarios []Options
	}{
		{"yolov9-s", Builtin, scenarios},
		{"gelan-t", Builtin, scenarios},
		{measured.Path("tv/vit_b_32-train.onnx"), Load, tv},
		{measured.Path("tv/convnext_tiny-train.onnx"), Load, tv},
	}
	if testing.Short() {
		models, batches = models[:1], batches[:20]
	}
	for _, mod := range models {
		name := mod.name
		built, err := mod.load(name)
		if err != nil {
			t.Fatal(err)
		}
		derived, err := mod.load(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, sc := range mod.scenarios {
			nDerived := 0
			for _, b := range batches {
				sc.Batch = b
				want, err := built.Program(sc)
				if err != nil {
					t.Fatal(err)
				}
				p, _, _ := derived.programPrep(sc)
				_, tmpl := p.classes.lookup(classKey(sc.Defaults()), sc.Batch)
				fromTemplate := tmpl != nil
				got, err := derived.program(sc)
				if err != nil {
					t.Fatal(err)
				}
				if again, _ := derived.program(sc); again != got {
					t.Fatalf("%s %+v: asked for twice, the program was made twice", name, sc)
				}
				if fromTemplate && b > 1 {
					nDerived++
				}
				if !slices.Equal(got.Buffers, want.Buffers) || !slices.Equal(got.Events, want.Events) || !slices.Equal(got.Calls, want.Calls) ||
					!slices.Equal(got.PrevPred, want.PrevPred) || !slices.Equal(got.PrevPredFrom, want.PrevPredFrom) || !slices.Equal(got.Resident, want.Resident) ||
					!slices.Equal(got.ResidentRoles, want.ResidentRoles) || !slices.Equal(got.StateOrder, want.StateOrder) || !slices.Equal(got.StateAt, want.StateAt) {
					t.Fatalf("%s %+v: the derived program differs from the built one", name, sc)
				}
				if r, w := Run(got, sc), Run(want, sc); r.Peak != w.Peak || r.PeakReserved != w.PeakReserved || r.PeakRequested != w.PeakRequested {
					t.Fatalf("%s %+v: derived peak %d/%d, built %d/%d", name, sc, r.Peak, r.PeakReserved, w.Peak, w.PeakReserved)
				}
			}
			// The template must serve most batches: a class whose
			// workspaces change pattern often would be rebuilt each time.
			if nDerived < (len(batches)-3)/2 {
				t.Errorf("%s %+v: %d of %d batches derived", name, sc, nDerived, len(batches)-3)
			}
		}
	}
}
