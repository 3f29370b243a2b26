// Command library is the README's library example: yolov9-c trained by
// train_dual.py under AMP, its peaks at a few batch sizes, and the largest
// batch a 24 GB card takes.
package main

import (
	"fmt"
	"log"

	"github.com/onnxmem/onnxmem/onnxmem"
)

func main() {
	m, err := onnxmem.Builtin("yolov9-c") // or onnxmem.Load("my-train.onnx")
	if err != nil {
		log.Fatal(err)
	}
	sc := onnxmem.Scenario{Step: onnxmem.TrainStep, AMP: true} // 640×640, 16 boxes, SGD, EMA
	rs, err := m.Sweep(sc, []int64{8, 16, 32}, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range rs {
		fmt.Printf("batch %2d: peak %s, GPU_mem %s\n", r.Scenario.Batch, onnxmem.FormatBytes(r.Peak), r.GPUMem())
	}
	sc.Device = "24GB"
	n, r, err := m.MaxBatch(sc, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("largest batch on 24GB: %d (GPU_mem %s)\n", n, r.GPUMem())
}
