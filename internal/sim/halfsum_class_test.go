package sim_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestHalfSumAcrossBatches derives yolov9-e's validation step from batch
// classes on both sides of the half-precision sum's 2^31-byte limit (its
// CBFuse sums three stacked maps: past the limit, from batch 52 at 640,
// the kernel keeps a float32 buffer of the output), and asks each derived
// step to equal a fresh build. A class whose template was fitted below the
// limit once missed the buffer above it, and one fitted above kept it
// below: yolov9-e's batch 2 read 5.5% high after batches 8 to 64.
func TestHalfSumAcrossBatches(t *testing.T) {
	o := sim.Options{Height: 640, Width: 640, Eval: true, EmptyCache: sim.EmptyCacheWarmUp}
	for _, seq := range [][]int64{{8, 16, 32, 48, 64, 2, 96}, {64, 96, 128, 2, 24}} {
		m, err := sim.Builtin("yolov9-e")
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range seq {
			o.Batch = b
			got, err := m.Simulate(o)
			if err != nil {
				t.Fatal(err)
			}
			prog, err := m.Program(o) // built, not derived from a class
			if err != nil {
				t.Fatal(err)
			}
			want := sim.Run(prog, o)
			if got.Peak != want.Peak || got.PeakReserved != want.PeakReserved {
				t.Errorf("batch %d after %v: peak %d, reserved %d; a build %d, %d", b, seq, got.Peak, got.PeakReserved, want.Peak, want.PeakReserved)
			}
		}
	}
}
