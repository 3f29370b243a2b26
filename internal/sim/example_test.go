package sim_test

import (
	"fmt"
	"log"

	"github.com/onnxmem/onnxmem/internal/sim"
)

// Predict the peak of a training step of the built-in yolov9-s at batch 16
// under AMP, and what the training loop prints as GPU_mem after it.
func ExampleModel_Simulate() {
	m, err := sim.Builtin("yolov9-s")
	if err != nil {
		log.Fatal(err)
	}
	r, err := m.Simulate(sim.Scenario{Batch: 16, Height: 640, Width: 640, AMP: true, Train: true, Boxes: 16, EMA: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("peak %.2f GiB allocated, %.2f GiB reserved, GPU_mem %s\n", float64(r.Peak)/(1<<30), float64(r.PeakReserved)/(1<<30), r.GPUMem())
	// Output:
	// peak 6.03 GiB allocated, 6.47 GiB reserved, GPU_mem 6.95G
}

// Find the largest batch of a yolov9-c train step under AMP that fits an
// RTX 4090, as PyTorch would run it under the card's limit.
func ExampleModel_MaxBatchOn() {
	m, err := sim.Builtin("yolov9-c")
	if err != nil {
		log.Fatal(err)
	}
	d, err := sim.LookupDevice("rtx4090")
	if err != nil {
		log.Fatal(err)
	}
	n, r, err := m.MaxBatchOn(d, sim.Scenario{Height: 640, Width: 640, AMP: true, Train: true, Boxes: 16, EMA: true}, 1024)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("batch %d fits %s, reserving %.2f of its %.2f GiB\n", n, d.Name, float64(r.PeakReserved)/(1<<30), float64(d.Usable())/(1<<30))
	// Output:
	// batch 22 fits rtx4090, reserving 23.06 of its 23.15 GiB
}

// Plan the checkpointing that lets a yolov9-c train step at batch 16 fit
// 12 GiB with the least recomputation.
func ExampleModel_MakePlan() {
	m, err := sim.Builtin("yolov9-c")
	if err != nil {
		log.Fatal(err)
	}
	p, err := m.MakePlan(sim.Scenario{Batch: 16, Height: 640, Width: 640, AMP: true, Train: true, Boxes: 16, EMA: true}, 12<<30)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("checkpoint %v: peak %.2f GiB, %.1f%% of the forward recomputed\n", p.Ranges, float64(p.Result.Peak)/(1<<30), 100*float64(p.RecomputeFLOPs)/float64(p.ForwardFLOPs))
	// Output:
	// checkpoint [{0 5} {6 9} {11 16} {18 19}]: peak 11.92 GiB, 16.3% of the forward recomputed
}

// Say what a train step's peak is made of.
func ExampleModel_Explain() {
	m, err := sim.Builtin("yolov9-t")
	if err != nil {
		log.Fatal(err)
	}
	ex, err := m.Explain(sim.Scenario{Batch: 8, Height: 640, Width: 640, AMP: true, Train: true, Boxes: 16, EMA: true})
	if err != nil {
		log.Fatal(err)
	}
	for _, k := range ex.ByKind[:3] {
		fmt.Printf("%-16s %5.1f%%\n", k.Kind, 100*float64(k.Bytes)/float64(ex.Peak))
	}
	// Output:
	// activations       76.4%
	// loss              13.0%
	// autocast copies    3.6%
}

// Simulate a short training run: setup, three iterations with each image's
// boxes, a validation batch at twice the batch and a checkpoint; reserved
// memory after each iteration is the GPU_mem the loop prints.
func ExampleModel_Run() {
	m, err := sim.Builtin("yolov9-t")
	if err != nil {
		log.Fatal(err)
	}
	events := []sim.RunEvent{{Kind: sim.RunEventSetup},
		{Kind: sim.RunEventTrain, BoxCounts: []int64{3, 0, 7, 12}}, {Kind: sim.RunEventTrain, BoxCounts: []int64{1, 1, 2, 30}},
		{Kind: sim.RunEventTrain, BoxCounts: []int64{5, 5, 5, 5}},
		{Kind: sim.RunEventVal, Batch: 8, Height: 512, Width: 672}, {Kind: sim.RunEventCkpt}}
	r, err := m.Run(sim.Scenario{Batch: 4, Height: 640, Width: 640, AMP: true, Train: true, EMA: true}, events)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range r.Steps {
		fmt.Printf("%-5s GPU_mem %s\n", s.Kind, s.GPUMem())
	}
	fmt.Printf("max reserved %.2f GiB\n", float64(r.PeakReserved)/(1<<30))
	// Output:
	// setup GPU_mem 0.0357G
	// train GPU_mem 1.08G
	// train GPU_mem 1.16G
	// train GPU_mem 1.17G
	// val   GPU_mem 1.17G
	// ckpt  GPU_mem 1.17G
	// max reserved 1.09 GiB
}

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
	for _, sc := range []sim.Scenario{
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
