package sim_test

import (
	"fmt"
	"log"

	"github.com/onnxmem/onnxmem/internal/sim"
)

// Run scenarios one after another in one process, as a benchmark harness
// or a notebook does: the segments that the last step's gradients hold
// through torch.cuda.empty_cache() stay reserved. yolov9-s under AMP with
// four checkpoint segments at batch 1, right after two segments at batch
// 64, reserves half as much again as it does alone (the ground truth
// measured 370 MiB there).
func ExampleModel_NewProcess() {
	m, err := sim.Builtin("yolov9-s")
	if err != nil {
		log.Fatal(err)
	}
	p := m.NewProcess()
	for _, sc := range []sim.Options{
		{Batch: 64, Height: 640, Width: 640, AMP: true, Segments: 2},
		{Batch: 1, Height: 640, Width: 640, AMP: true, Segments: 4},
	} {
		after, err := p.Simulate(sc)
		if err != nil {
			log.Fatal(err)
		}
		alone, err := m.Simulate(sc)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("batch %2d, %d segments: %5.0f MiB reserved in the process, %5.0f MiB alone\n", sc.Batch, sc.Segments,
			float64(after.PeakReserved)/(1<<20), float64(alone.PeakReserved)/(1<<20))
	}
	// Output:
	// batch 64, 2 segments: 13132 MiB reserved in the process, 13132 MiB alone
	// batch  1, 4 segments:   370 MiB reserved in the process,   248 MiB alone
}
