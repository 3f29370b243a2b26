package sim_test

import (
	"os"
	"testing"

	"github.com/onnxmem/onnxmem/internal/cards"
	"github.com/onnxmem/onnxmem/internal/cudnn"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/sim"
	"github.com/onnxmem/onnxmem/schedule"
)

// The benchmarks of the simulations people run by the hundred. Each builds
// its model once, outside the timer; the goals are for one core
// (go test ./internal/sim -run X -bench . -cpu 1) and docs/performance.md lists
// the figures measured.

// builtinBench returns a built-in model, warmed by one simulation so that
// what is built once per model (its family's holds, the cuDNN table) is
// not timed.
func builtinBench(b *testing.B, name string, warm sim.Options) *sim.Model {
	b.Helper()
	m, err := sim.Builtin(name)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Simulate(warm); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	return m
}

// BenchmarkSimulateYolov9E predicts the largest model, yolov9-e, at batch 64
// and 640×640 under AMP: shape inference, the schedule, its liveness and the
// allocator replay (a warm-up step and the measured one). Goal: under 2 ms.
func BenchmarkSimulateYolov9E(b *testing.B) {
	sc := sim.Options{Batch: 64, Height: 640, Width: 640, AMP: true}
	m := builtinBench(b, "yolov9-e", sc)
	for b.Loop() {
		if _, err := m.Simulate(sc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTrainStepYolov9E is the same scenario as a train step of
// train_dual.py with 16 boxes an image, SGD and EMA, under AMP: its
// warm-up replays three iterations that GradScaler skips before the one
// that makes the optimizer's state (Scenario.WarmSteps). Goal: under 4 ms.
func BenchmarkTrainStepYolov9E(b *testing.B) {
	sc := sim.Options{Batch: 64, Height: 640, Width: 640, AMP: true, Train: true, Boxes: 16, EMA: true}
	m := builtinBench(b, "yolov9-e", sc)
	for b.Loop() {
		if _, err := m.Simulate(sc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSweep42 sweeps yolov9-e over batch 1 to 64 (7 sizes) × fp32 and
// AMP × 0, 2 and 4 checkpoint segments at 640×640. Goal: under 50 ms.
func BenchmarkSweep42(b *testing.B) {
	m := builtinBench(b, "yolov9-e", sim.Options{Batch: 1, Height: 640, Width: 640})
	batches := []int64{1, 2, 4, 8, 16, 32, 64}
	for b.Loop() {
		for _, amp := range []bool{false, true} {
			for _, k := range []int{0, 2, 4} {
				if _, err := m.Sweep(sim.Options{Height: 640, Width: 640, AMP: amp, Segments: k}, batches, nil); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}

// BenchmarkLoad decodes the yolov9-e training export (708 kB, held in
// memory) into a Model: ONNX decoding, the typed graph and its family's
// preparation. Goal: under 20 ms.
func BenchmarkLoad(b *testing.B) {
	data, err := os.ReadFile(onnxbuild.Shared(b, "yolov9/yolov9-e-train.onnx"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := sim.LoadBytes("yolov9-e-train", data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadInferenceExport loads gelan-t's inference export, which
// builds the built-in models one by one until one has its convolutions
// (gelan-t is the sixth of ten to be tried). Goal: under 200 ms, once per
// file a command reads (66 ms on one core).
func BenchmarkLoadInferenceExport(b *testing.B) {
	data, err := os.ReadFile(onnxbuild.Shared(b, "yolov9/gelan-t-infer.onnx"))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		m, err := sim.LoadBytes("gelan-t-infer", data)
		if err != nil || m.Builtin != "gelan-t" {
			b.Fatalf("%v, stands for %q", err, m.Builtin)
		}
	}
}

// BenchmarkCuDNNTableFirstModel decodes the H200's workspace table afresh
// and looks up every convolution call of yolov9-e's training step at batch
// 16 and 640 under AMP, decoding their shapes' rows: what the first
// simulation of the largest built-in model spends on the table. Goal:
// under 20 ms.
func BenchmarkCuDNNTableFirstModel(b *testing.B) {
	m, err := sim.Builtin("yolov9-e")
	if err != nil {
		b.Fatal(err)
	}
	var calls []schedule.ConvCall
	if err := sim.ConvCalls(m, sim.Options{Batch: 16, Height: 640, Width: 640, AMP: true, Train: true, Boxes: 16, EMA: true}, func(c schedule.ConvCall) {
		calls = append(calls, c)
	}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		card, err := cudnn.Decode("h200")
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range calls {
			card.Workspace(c)
		}
	}
}

// BenchmarkMaxBatch finds the largest batch of a yolov9-c train step under
// AMP that fits an RTX 4090 (24 GB): the search under its usable memory,
// with its cuBLAS workspace. Goal: under 20 ms.
func BenchmarkMaxBatch(b *testing.B) {
	d, err := cards.Parse("rtx4090")
	if err != nil {
		b.Fatal(err)
	}
	sc := sim.Options{Height: 640, Width: 640, AMP: true, Train: true, Boxes: 16, EMA: true, CuBLASWorkspace: d.CuBLASWorkspace}
	warm := sc
	warm.Batch = 1
	m := builtinBench(b, "yolov9-c", warm)
	for b.Loop() {
		if _, _, err := m.MaxBatch(sc, d.Usable(), 1024); err != nil {
			b.Fatal(err)
		}
	}
}
