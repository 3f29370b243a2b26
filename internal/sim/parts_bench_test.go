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

// BenchmarkTrainingRun is a run of 200 training iterations of yolov9-c at
// batch 16 under AMP, box counts of COCO's mean drawn per image, without
// validation: its time per iteration (ns/iter) times 7,300 is a COCO
// epoch's.
func BenchmarkTrainingRun(b *testing.B) {
	sc := sim.Options{Batch: 16, Height: 640, Width: 640, AMP: true, Train: true, Optimizer: sim.SGD, EMA: true}
	m := builtinBench(b, "yolov9-c", sc)
	const iters = 200
	events, err := m.PlanRun(sim.RunPlan{Epochs: 1, Iterations: iters, Batch: 16, Height: 640, Width: 640, MeanBoxes: 7.3, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := m.Run(sc, events); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*iters), "ns/iter")
}
