package ir

import (
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
)

// FuzzInfer loads a graph and infers its shapes at a binding: whatever the
// bytes and the sizes, Load and Infer return a result or an error, never a
// panic. The seed is a small YOLO-like graph (onnxbuild.Tiny) at ordinary
// and absurd sizes.
func FuzzInfer(f *testing.F) {
	data, err := onnxbuild.Tiny().Bytes()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data, int64(1), int64(64), int64(64))
	f.Add(data, int64(8), int64(320), int64(256))
	f.Add(data, int64(1)<<40, int64(1)<<20, int64(7))
	f.Add(data[:len(data)/2], int64(2), int64(32), int64(32))
	f.Fuzz(func(t *testing.T, data []byte, batch, h, w int64) {
		g, err := Load(data)
		if err != nil {
			return
		}
		g.Infer(Binding{Batch: batch, Height: h, Width: w})
	})
}
