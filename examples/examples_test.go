package examples_test

import (
	"fmt"
	"log"

	"github.com/onnxmem/onnxmem/onnxmem"
)

// tiny is the model the examples run on, relative to this folder.
const tiny = "../testdata/tiny.onnx"

// mib formats bytes in MiB.
func mib(n int64) string { return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20)) }

// Load a model and predict the peak of one fp32 training step at batch 8 on
// 320×320 images: what torch.cuda.max_memory_allocated would report, and
// where in the step it falls.
func ExampleModel_Simulate() {
	m, err := onnxmem.Load(tiny)
	if err != nil {
		log.Fatal(err)
	}
	r, err := m.Simulate(onnxmem.Scenario{Batch: 8, Height: 320, Width: 320})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("peak:", mib(r.Peak))
	fmt.Println("in the", r.PeakPhase, "at", r.PeakNode, "of layer", r.PeakLayer)
	fmt.Println("resident before the step:", mib(r.M0))
	fmt.Println("largest tensor then:", r.AtPeak[0].Kind, r.AtPeak[0].Name, mib(r.AtPeak[0].Bytes))
	// Output:
	// peak: 186.51 MiB
	// in the backward at /model.6/m.0/Conv of layer 6
	// resident before the step: 9.52 MiB
	// largest tensor then: activation /model.5/Concat_output_0 18.75 MiB
}

// Predict the peak over several batch sizes.
func ExampleModel_Sweep() {
	m, err := onnxmem.Load(tiny)
	if err != nil {
		log.Fatal(err)
	}
	rs, err := m.Sweep(onnxmem.Scenario{Height: 320, Width: 320}, []int64{1, 2, 4}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("batch  peak        after forward")
	for _, r := range rs {
		fmt.Printf("%5d  %-10s  %s\n", r.Scenario.Batch, mib(r.Peak), mib(r.AfterForward))
	}
	// Output:
	// batch  peak        after forward
	//     1  23.45 MiB   20.90 MiB
	//     2  47.21 MiB   42.12 MiB
	//     4  93.33 MiB   83.16 MiB
}

// Find the largest batch size whose step fits in a memory budget.
func ExampleModel_MaxBatch() {
	m, err := onnxmem.Load(tiny)
	if err != nil {
		log.Fatal(err)
	}
	const budget = 256 << 20
	batch, r, err := m.MaxBatch(onnxmem.Scenario{Height: 320, Width: 320, Capacity: budget}, 1024)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("batch %d fits in %s: peak %s\n", batch, mib(budget), mib(r.Peak))
	// Output:
	// batch 10 fits in 256.00 MiB: peak 238.39 MiB
}

// Follow the allocator's counters through the step, event by event.
func ExampleModel_Timeline() {
	m, err := onnxmem.Load(tiny)
	if err != nil {
		log.Fatal(err)
	}
	sc := onnxmem.Scenario{Batch: 8, Height: 320, Width: 320}
	r, samples, err := m.Timeline(sc)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("events:", len(samples))
	peak := samples[r.PeakEvent]
	fmt.Println("peak at event", peak.Event, "in the", peak.Phase, "with", mib(peak.Allocated), "allocated")
	var top int64
	for _, s := range samples {
		top = max(top, s.Allocated)
	}
	fmt.Println("largest sample is the peak:", top == r.Peak)
	// The liveness analysis says what the buffers alive there hold; the rest
	// is what cached blocks hold beyond their requests.
	fmt.Println("live at the peak:", mib(peak.Live), "in blocks of", mib(peak.Allocated))
	// Output:
	// events: 226
	// peak at event 79 in the backward with 186.51 MiB allocated
	// largest sample is the peak: true
	// live at the peak: 186.51 MiB in blocks of 186.51 MiB
}

// Answer the question of a train_dual.py user with no file at all: how much
// memory does a full AMP training step of the built-in yolov9-c take at
// batch 16, and what is the largest batch an RTX 4090 holds?
func ExampleBuiltin() {
	m, err := onnxmem.Builtin("yolov9-c")
	if err != nil {
		log.Fatal(err)
	}
	fp, err := m.Footprint()
	if err != nil {
		log.Fatal(err)
	}
	params := fp.Trainable
	sc := onnxmem.Scenario{Batch: 16, Step: onnxmem.TrainStep, AMP: true}
	r, err := m.Simulate(sc)
	if err != nil {
		log.Fatal(err)
	}
	sc.Device = "rtx4090"
	n, _, err := m.MaxBatch(sc, 256)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("parameters:", params)
	fmt.Printf("peak at batch 16: %.2f GiB, in the %s\n", float64(r.Peak)/(1<<30), r.PeakPhase)
	fmt.Println("largest batch on an RTX 4090:", n)
	// Output:
	// parameters: 51182048
	// peak at batch 16: 16.75 GiB, in the loss
	// largest batch on an RTX 4090: 22
}

// A text model takes token ids: give its sequence length. GPT-2's train
// step (cross-entropy on the logits, AdamW) under AMP at 512 tokens, and
// the largest batch that an RTX 4090 takes.
func ExampleScenario_text() {
	m, err := onnxmem.Load("../calibration/results/hf/gpt2-train.onnx")
	if err != nil {
		log.Fatal(err)
	}
	sc := onnxmem.Scenario{Step: onnxmem.TrainStep, Optimizer: "AdamW", AMP: true, Batch: 8, Seq: 512, Device: "rtx4090"}
	r, err := m.Simulate(sc)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("peak:", onnxmem.FormatBytes(r.Peak), "fits:", r.Fits())
	n, _, err := m.MaxBatch(sc, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("largest batch:", n)
	// Output:
	// peak: 7.38GiB fits: true
	// largest batch: 27
}
