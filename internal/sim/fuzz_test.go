package sim_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/family/yolov9/models"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/sim"
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
		m.Simulate(sim.Options{Batch: 1, Height: 64, Width: 64}) // an error is fine; a panic is not
	})
}
