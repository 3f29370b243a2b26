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

// FuzzEinsumLabels parses arbitrary equations: an error, or labels that are
// letters, one an operand's dim, with output labels that are distinct and
// each some operand's.
func FuzzEinsumLabels(f *testing.F) {
	f.Add("B G H I D, B G H J D -> B G H I J", 2)
	f.Add("ij,jk", 2)
	f.Add("...ij->ji", 1)
	f.Add("ii,,->", 3)
	f.Fuzz(func(t *testing.T, eq string, n int) {
		if n < 0 || n > 8 {
			return
		}
		ops, out, err := EinsumLabels(eq, n)
		if err != nil {
			return
		}
		if len(ops) != n {
			t.Fatalf("%q: %d operands, want %d", eq, len(ops), n)
		}
		in := map[byte]bool{}
		for _, labels := range ops {
			for _, l := range labels {
				if !isLabel(l) {
					t.Fatalf("%q: label %q", eq, l)
				}
				in[l] = true
			}
		}
		seen := map[byte]bool{}
		for _, l := range out {
			if !in[l] || seen[l] {
				t.Fatalf("%q: output label %q of no operand, or twice", eq, l)
			}
			seen[l] = true
		}
	})
}
