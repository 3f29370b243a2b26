package onnxmem

import (
	"fmt"

	"github.com/onnxmem/onnxmem/internal/sim"
)

// RunEvent is a run's "setup", "train" (an iteration, Skipped when
// GradScaler skipped its step), "val" (a batch at Batch×Height×Width) or
// "ckpt" (the checkpoint save); BoxCounts are its images' boxes.
type RunEvent struct {
	Kind                 string
	BoxCounts            []int64
	Batch, Height, Width int64
	Skipped              bool
}

// RunStep is the allocator's counters after an event, and their peaks.
type RunStep struct {
	Event                                   int
	Kind                                    string
	Allocated, Reserved, Peak, PeakReserved int64
}

// GPUMem is Reserved as the training loop prints it.
func (s RunStep) GPUMem() string { return gpuMem(s.Reserved) }

// RunResult is a run's counters after each event (up to OOMEvent), peaks.
type RunResult struct {
	Scenario           Scenario
	Steps              []RunStep
	Peak, PeakReserved int64
	OOM                bool
	OOMEvent           int
}

// Run simulates a training run of the train step sc (its Step TrainStep,
// or empty) in one process, one iteration per "train" event, as the
// family's training script runs it.
func (m *Model) Run(sc Scenario, events []RunEvent) (*RunResult, error) {
	switch sc.Step {
	case "":
		sc.Step = TrainStep
	case TrainStep:
	default:
		return nil, fmt.Errorf("onnxmem: run: Step %s: a run trains; give TrainStep, or leave Step empty", sc.Step)
	}
	e, sc, o, err := m.decode(sc)
	if err != nil {
		return nil, err
	}
	evs := make([]sim.RunEvent, len(events))
	for i, ev := range events {
		evs[i] = sim.RunEvent(ev)
	}
	r, err := e.Run(o, evs)
	if err != nil {
		return nil, err
	}
	out := &RunResult{Scenario: sc, Steps: make([]RunStep, len(r.Steps)), Peak: r.Peak, PeakReserved: r.PeakReserved,
		OOM: r.OOM, OOMEvent: r.OOMEvent}
	for i, s := range r.Steps {
		out.Steps[i] = RunStep(s)
	}
	return out, nil
}

// RunPlan is a synthetic run: epochs of iterations, each epoch's
// validation at twice the batch on common aspect ratios, a checkpoint; box
// counts of mean MeanBoxes (COCO: 7.3), drawn from Seed.
type RunPlan struct {
	Epochs, Iterations   int
	Batch, Height, Width int64
	ValImages            int64
	MeanBoxes            float64
	Seed                 uint64
}

// PlanRun returns the events of a synthetic run.
func (m *Model) PlanRun(p RunPlan) ([]RunEvent, error) {
	e, err := m.engine()
	if err != nil {
		return nil, err
	}
	evs, err := e.PlanRun(sim.RunPlan{Epochs: p.Epochs, Iterations: p.Iterations, Batch: p.Batch, Height: p.Height, Width: p.Width,
		ValImages: p.ValImages, MeanBoxes: p.MeanBoxes, Seed: p.Seed})
	if err != nil {
		return nil, err
	}
	out := make([]RunEvent, len(evs))
	for i, ev := range evs {
		out[i] = RunEvent(ev)
	}
	return out, nil
}
