package onnxmem_test

import (
	"fmt"
	"log"

	"github.com/onnxmem/onnxmem/onnxmem"
)

// Will train_dual.py's step of yolov9-c at batch 16 under AMP fit an
// RTX 4090, and what is the largest batch that does? The package
// documentation shows this program.
func Example() {
	m, err := onnxmem.Builtin("yolov9-c")
	if err != nil {
		log.Fatal(err)
	}
	sc := onnxmem.Scenario{Step: onnxmem.TrainStep, AMP: true, Device: "rtx4090"}
	r, err := m.Simulate(sc) // batch 16 at 640×640, train_dual.py's step
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("peak %s, GPU_mem %s, fits: %v\n", onnxmem.FormatBytes(r.Peak), r.GPUMem(), r.Fits())
	n, _, err := m.MaxBatch(sc, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("largest batch:", n)
	// Output:
	// peak 16.75GiB, GPU_mem 18.3G, fits: true
	// largest batch: 22
}

// Predict the peak of a training step of the built-in yolov9-s at batch 16
// under AMP, and what the training loop prints as GPU_mem after it.
func ExampleModel_Simulate() {
	m, err := onnxmem.Builtin("yolov9-s")
	if err != nil {
		log.Fatal(err)
	}
	r, err := m.Simulate(onnxmem.Scenario{Step: onnxmem.TrainStep, AMP: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("peak %.2f GiB allocated, %.2f GiB reserved, GPU_mem %s\n", float64(r.Peak)/(1<<30), float64(r.PeakReserved)/(1<<30), r.GPUMem())
	// Output:
	// peak 6.03 GiB allocated, 6.47 GiB reserved, GPU_mem 6.94G
}

// Find the largest batch of a yolov9-c train step under AMP that fits an
// RTX 4090, as PyTorch would run it under the card's limit.
func ExampleModel_MaxBatch() {
	m, err := onnxmem.Builtin("yolov9-c")
	if err != nil {
		log.Fatal(err)
	}
	d, err := onnxmem.ParseDevice("rtx4090")
	if err != nil {
		log.Fatal(err)
	}
	n, r, err := m.MaxBatch(onnxmem.Scenario{Step: onnxmem.TrainStep, AMP: true, Device: d.Name}, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("batch %d fits %s, reserving %.2f of its %.2f GiB\n", n, d.Name, float64(r.PeakReserved)/(1<<30), float64(d.Usable())/(1<<30))
	// Output:
	// batch 22 fits rtx4090, reserving 23.08 of its 23.15 GiB
}

// Plan the checkpointing that lets a yolov9-c train step at batch 16 fit
// 12 GiB with the least recomputation.
func ExampleModel_Plan() {
	m, err := onnxmem.Builtin("yolov9-c")
	if err != nil {
		log.Fatal(err)
	}
	p, err := m.Plan(onnxmem.Scenario{Step: onnxmem.TrainStep, AMP: true, Capacity: 12 << 30})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("checkpoint %v: peak %.2f GiB, %.1f%% of the forward recomputed\n", p.Ranges, float64(p.Result.Peak)/(1<<30), 100*float64(p.RecomputeFLOPs)/float64(p.ForwardFLOPs))
	// Output:
	// checkpoint [{0 5} {6 9} {11 16} {18 19}]: peak 11.92 GiB, 16.3% of the forward recomputed
}

// Say what a train step's peak is made of.
func ExampleModel_Explain() {
	m, err := onnxmem.Builtin("yolov9-t")
	if err != nil {
		log.Fatal(err)
	}
	ex, err := m.Explain(onnxmem.Scenario{Batch: 8, Step: onnxmem.TrainStep, AMP: true})
	if err != nil {
		log.Fatal(err)
	}
	for _, k := range ex.ByKind[:3] {
		fmt.Printf("%-16s %5.1f%%\n", k.Kind, 100*float64(k.Bytes)/float64(ex.Result.Peak))
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
	m, err := onnxmem.Builtin("yolov9-t")
	if err != nil {
		log.Fatal(err)
	}
	events := []onnxmem.RunEvent{{Kind: "setup"},
		{Kind: "train", BoxCounts: []int64{3, 0, 7, 12}}, {Kind: "train", BoxCounts: []int64{1, 1, 2, 30}},
		{Kind: "train", BoxCounts: []int64{5, 5, 5, 5}},
		{Kind: "val", Batch: 8, Height: 512, Width: 672}, {Kind: "ckpt"}}
	r, err := m.Run(onnxmem.Scenario{Batch: 4, AMP: true}, events)
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
