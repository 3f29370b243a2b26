package onnxmem_test

import (
	"os"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/onnxmem"
)

// loadShared loads a model of the shared yolov9 folder for a benchmark,
// skipping it when the data is missing.
func loadShared(b *testing.B, name string) *onnxmem.Model {
	b.Helper()
	m, err := onnxmem.Load(onnxbuild.Shared(b, "yolov9/"+name))
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkSimulateYolov9E predicts the largest model, YOLOv9-E, at batch 64
// and 640×640: shape inference, the schedule and the allocator replay (a
// warm-up step and the measured one), on a model loaded once.
// Goal: under 5 ms.
func BenchmarkSimulateYolov9E(b *testing.B) {
	m := loadShared(b, "yolov9-e-train.onnx")
	sc := onnxmem.Scenario{Batch: 64, Height: 640, Width: 640}
	for b.Loop() {
		if _, err := m.Simulate(sc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSweep7 sweeps YOLOv9-C over 7 batch sizes, 1 to 64, at 640×640.
// Goal: under 30 ms on one core (go test -bench Sweep7 -cpu 1).
func BenchmarkSweep7(b *testing.B) {
	m := loadShared(b, "yolov9-c-train.onnx")
	sc := onnxmem.Scenario{Height: 640, Width: 640}
	batches := []int64{1, 2, 4, 8, 16, 32, 64}
	for b.Loop() {
		if _, err := m.Sweep(sc, batches, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoad decodes the YOLOv9-E training export (708 kB, held in
// memory) into a Model: ONNX decoding, the typed graph and its
// normalization. Goal: under 20 ms.
func BenchmarkLoad(b *testing.B) {
	data, err := os.ReadFile(onnxbuild.Shared(b, "yolov9/yolov9-e-train.onnx"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := onnxmem.LoadBytes("yolov9-e-train", data); err != nil {
			b.Fatal(err)
		}
	}
}
