package sim_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/internal/sim"
)

// BenchmarkProgramYolov9E is the first half of BenchmarkSimulateYolov9E:
// shape inference and the step's program.
func BenchmarkProgramYolov9E(b *testing.B) {
	sc := sim.Options{Batch: 64, Height: 640, Width: 640, AMP: true}
	m := builtinBench(b, "yolov9-e", sc)
	for b.Loop() {
		if _, err := m.Program(sc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunYolov9E is the second half: the allocator's replay of a
// built program (the warm-up step and the measured one) and its liveness.
func BenchmarkRunYolov9E(b *testing.B) {
	sc := sim.Options{Batch: 64, Height: 640, Width: 640, AMP: true}
	m := builtinBench(b, "yolov9-e", sc)
	p, err := m.Program(sc)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		sim.Run(p, sc)
	}
}
