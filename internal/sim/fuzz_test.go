package sim_test

import (
	"math"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/sim"
	"github.com/onnxmem/onnxmem/models"
)

// FuzzLoad feeds ONNX bytes to LoadBytes and simulates what loads: every
// input must give a Model or an error, never a panic. The seeds are the
// built-in gelan-t and yolov9-t exports, whole and cut short, and a chain of
// two conv blocks, small enough for thousands of mutations a second.
func FuzzLoad(f *testing.F) {
	g := onnxbuild.New("tiny")
	x := g.Input("images", 3)
	for i := range 2 {
		x = g.Module("blocks").Index(i).Block(x, 4, 3, 1)
	}
	g.Output(x)
	tiny, err := g.Bytes()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tiny)
	for _, name := range []string{"gelan-t", "yolov9-t"} {
		data, err := models.Build(name, models.Options{Classes: 2})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		f.Add(data[:len(data)/2])
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := sim.LoadBytes("fuzz", data)
		if err != nil {
			return
		}
		m.Simulate(sim.Scenario{Batch: 1, Height: 64, Width: 64}) // an error is fine; a panic is not
	})
}

// FuzzParseDevice reads device names and sizes: an error, or a device
// whose total is positive and larger than its context; and a size that
// ParseBytes reads, written back by FormatBytes, reads within the two
// decimals FormatBytes keeps.
func FuzzParseDevice(f *testing.F) {
	for _, s := range []string{"h200", "24GB", "23.5GiB", "24GB+ctx=600MiB", "1e3TB", "0.5KiB+ctx=0B", "-3GB", "NaNGB", "24GB+600MiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, err := sim.ParseDevice(s); err == nil {
			if d.Total <= 0 || d.Context < 0 || d.Context >= d.Total || d.Usable() <= 0 {
				t.Fatalf("%q: total %d, context %d, usable %d", s, d.Total, d.Context, d.Usable())
			}
		}
		n, err := sim.ParseBytes(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("%q: %d bytes", s, n)
		}
		back, err := sim.ParseBytes(sim.FormatBytes(n))
		if err != nil {
			t.Fatalf("%q: %d bytes written %q, which does not read: %v", s, n, sim.FormatBytes(n), err)
		}
		if d := math.Abs(float64(back - n)); d > 0.005*float64(n)+0.5 {
			t.Fatalf("%q: %d bytes written %q read back as %d", s, n, sim.FormatBytes(n), back)
		}
	})
}
