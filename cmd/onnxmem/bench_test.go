package main

import (
	"io"
	"testing"
)

// BenchmarkDefaultCommand runs `onnxmem` with no arguments: the embedded
// yolov9-c's whole train_dual.py run at batch 16 on the built-in COCO-like
// data at eight seeds, the largest batch whose run completes on three cards and the
// densest iteration's tensors. Goal: under 10 s (issue 33).
func BenchmarkDefaultCommand(b *testing.B) {
	for b.Loop() {
		if rc := run(nil, nil, io.Discard, io.Discard); rc != 0 {
			b.Fatalf("exit status %d", rc)
		}
	}
}

// BenchmarkReportTrain runs `onnxmem report -train`, the same for train
// steps. Goal: under 300 ms.
func BenchmarkReportTrain(b *testing.B) {
	for b.Loop() {
		if rc := run([]string{"report", "-train"}, nil, io.Discard, io.Discard); rc != 0 {
			b.Fatalf("exit status %d", rc)
		}
	}
}
