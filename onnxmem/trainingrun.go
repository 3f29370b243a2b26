package onnxmem

import (
	"fmt"
	"math/rand/v2"

	"github.com/onnxmem/onnxmem/family/yolov9/dataset"
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

// RunPlan is a run: epochs of Iterations and validation, boxes of mean
// MeanBoxes from Seed; or of Data's images (a YOLO data yaml).
type RunPlan struct {
	Epochs, Iterations   int
	Batch, Height, Width int64
	ValImages            int64
	MeanBoxes            float64
	Seed                 uint64
	Data                 string
}

// PlanRun returns the events of a synthetic run.
func (m *Model) PlanRun(p RunPlan) ([]RunEvent, error) {
	e, err := m.engine()
	if err != nil {
		return nil, err
	}
	sp := sim.RunPlan{Epochs: p.Epochs, Iterations: p.Iterations, Batch: p.Batch, Height: p.Height, Width: p.Width,
		ValImages: p.ValImages, MeanBoxes: p.MeanBoxes, Seed: p.Seed}
	if p.Data != "" {
		if err := dataPlan(&sp, m.Family, p.Data); err != nil {
			return nil, err
		}
	}
	evs, err := e.PlanRun(sp)
	if err != nil {
		return nil, err
	}
	out := make([]RunEvent, len(evs))
	for i, ev := range evs {
		out[i] = RunEvent(ev)
	}
	return out, nil
}

// valStride is the stride of YOLOv9's validation batches,
// max(int(model.stride.max()), 32): 32 for every YOLOv9 model.
const valStride = 32

// dataPlan fills p's iterations and validation batches from the YOLO data
// yaml file, for a model of family fam.
func dataPlan(p *sim.RunPlan, fam, file string) error {
	switch {
	case fam != "yolov9":
		return fmt.Errorf("onnxmem: plan run: data %s: a %s model; the dataset's sampler is YOLOv9's dataloader (-family yolov9 if the model is trained with it)", file, fam)
	case p.ValImages != 0 || p.MeanBoxes != 0:
		return fmt.Errorf("onnxmem: plan run: data %s: ValImages and MeanBoxes are the synthetic run's; the dataset gives both", file)
	case p.Batch < 1:
		return fmt.Errorf("onnxmem: plan run: batch %d: want at least 1", p.Batch)
	}
	set, err := dataset.Load(file)
	if err != nil {
		return fmt.Errorf("onnxmem: plan run: %w", err)
	}
	side := max(p.Height, p.Width)
	batches, err := dataset.Batches(set.Val, 2*p.Batch, side, valStride)
	if err != nil {
		return fmt.Errorf("onnxmem: plan run: %w", err)
	}
	for _, b := range batches {
		p.ValBatches = append(p.ValBatches, sim.RunEvent{Kind: sim.RunEventVal, Batch: int64(len(b.Boxes)), Height: b.H, Width: b.W, BoxCounts: b.Boxes})
	}
	batch := int(p.Batch)
	p.TrainBoxes = func(rng *rand.Rand) [][]int64 { return set.Epoch(batch, side, dataset.ScratchHigh, rng) }
	return nil
}

// MaxBatchRun is MaxBatch for the whole run p, planned at each batch.
func (m *Model) MaxBatchRun(sc Scenario, p RunPlan, limit int64) (int64, *RunResult, error) {
	_, _, o, err := m.decode(sc)
	if err != nil {
		return 0, nil, err
	}
	if _, err := limitOf(o, "max batch of a run"); err != nil {
		return 0, nil, err
	}
	if limit <= 0 {
		limit = MaxBatchLimit
	}
	// A run's memory grows with its batch: doubling from 1 finds one that
	// does not complete, bisection the last that does.
	tried := map[int64]*RunResult{}
	completes := func(b int64) (bool, error) {
		s, q := sc, p
		s.Batch, q.Batch = b, b
		if q.Height == 0 && q.Width == 0 {
			q.Height, q.Width = o.Height, o.Width
		}
		events, err := m.PlanRun(q)
		if err != nil {
			return false, err
		}
		r, err := m.Run(s, events)
		if err != nil {
			return false, err
		}
		tried[b] = r
		return !r.OOM, nil
	}
	lo, hi := int64(0), int64(1) // lo completes (0: none yet), hi is to try
	for {
		ok, err := completes(hi)
		if err != nil {
			return 0, nil, err
		}
		if !ok {
			break
		}
		if lo = hi; hi == limit {
			return lo, tried[lo], nil
		}
		hi = min(2*hi, limit)
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := completes(mid)
		if err != nil {
			return 0, nil, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, tried[lo], nil
}
