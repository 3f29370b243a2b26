package sim

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCountPrograms is counts.go's brute-force oracle: for yolov9-s (a dual
// head) and gelan-c (one branch) at two batch sizes, a run's train steps at
// seeded random box counts (most images a few boxes, some dozens, some
// none) come from program, which derives them once its count class has a
// fit, and each must equal the program built from scratch, buffer by
// buffer, event by event. It also checks that the fit was used: builds
// without it would pass trivially.
func TestCountPrograms(t *testing.T) {
	for _, c := range []struct {
		model string
		batch int64
	}{{"yolov9-s", 4}, {"yolov9-s", 9}, {"gelan-c", 3}} {
		m, err := Builtin(c.model)
		if err != nil {
			t.Fatal(err)
		}
		sc := Options{Batch: c.batch, Height: 320, Width: 256, AMP: true, Train: true, Optimizer: SGD, EMA: true, PrevPredAlive: true}
		rng := rand.New(rand.NewPCG(uint64(c.batch), 33))
		derived := 0
		for i := range 40 {
			counts := make([]int64, c.batch)
			for j := range counts {
				switch r := rng.Float64(); {
				case r < 0.1:
				case r < 0.8:
					counts[j] = 1 + rng.Int64N(12)
				default:
					counts[j] = 10 + rng.Int64N(120)
				}
			}
			s := sc
			s.BoxCounts = counts
			got, err := m.program(s)
			if err != nil {
				t.Fatal(err)
			}
			p, s2, err := m.programPrep(s)
			if err != nil {
				t.Fatal(err)
			}
			want, err := buildTrimmed(m, p, s2)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want.Buffers, got.Buffers); d != "" {
				t.Fatalf("%s batch %d, iteration %d, counts %v: buffers differ (-built +derived):\n%s", c.model, c.batch, i, counts, d)
			}
			if !sameSteps(want, got) {
				t.Fatalf("%s batch %d, iteration %d, counts %v: the events differ", c.model, c.batch, i, counts)
			}
		}
		p, _, _ := m.programPrep(sc)
		derived = p.counts.derived
		if derived == 0 {
			t.Errorf("%s batch %d: no program was derived: the count classes never fit", c.model, c.batch)
		}
		t.Logf("%s batch %d: %d of 40 iterations' programs derived", c.model, c.batch, derived)
	}
}
