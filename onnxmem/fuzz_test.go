package onnxmem_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/models"
	"github.com/onnxmem/onnxmem/onnxmem"
)

// FuzzLoad feeds ONNX bytes to LoadBytes and simulates what loads: every
// input must give a Model or an error, never a panic. The seeds are the
// built-in gelan-t and yolov9-t exports, whole and cut short.
func FuzzLoad(f *testing.F) {
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
		m, err := onnxmem.LoadBytes("fuzz", data)
		if err != nil {
			return
		}
		m.Simulate(onnxmem.Scenario{Batch: 1, Height: 64, Width: 64}) // an error is fine; a panic is not
	})
}
