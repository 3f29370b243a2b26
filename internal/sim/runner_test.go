package sim_test

import (
	"slices"
	"testing"

	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestRunSteadyState checks a run against the train step it repeats: from
// the third iteration on, with the same box counts every time, an
// iteration's peak is the steady-state train step's (the measured step of
// Simulate, with the previous pred alive) but for the loop's few tiny
// tensors, and allocated memory after each iteration is the same; both
// up to the blocks that the allocator does not split, which hold up to
// 1 MiB beyond their requests and fall differently in another history.
func TestRunSteadyState(t *testing.T) {
	m, err := sim.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	for _, amp := range []bool{false, true} {
		// One warm step: no iteration skipped, the state made in the first.
		sc := sim.Options{Batch: 4, Height: 320, Width: 320, AMP: amp, Train: true, EMA: true, WarmSteps: 1}
		counts := []int64{3, 0, 7, 1}
		events := []sim.RunEvent{{Kind: sim.RunEventSetup}}
		for range 4 {
			events = append(events, sim.RunEvent{Kind: sim.RunEventTrain, BoxCounts: counts})
		}
		r, err := m.Run(sc, events)
		if err != nil {
			t.Fatal(err)
		}
		step := sc
		step.BoxCounts, step.PrevPredAlive = counts, true
		want, err := m.Simulate(step)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range r.Steps[3:] {
			if d := s.Peak - want.Peak; d < -1<<20 || d > 1<<20 {
				t.Errorf("amp %v: iteration %d peaks at %d, the train step at %d", amp, s.Event, s.Peak, want.Peak)
			}
			if d := s.Allocated - r.Steps[2].Allocated; d < -2<<20 || d > 2<<20 {
				t.Errorf("amp %v: allocated after iteration %d is %d, after the second %d", amp, s.Event, s.Allocated, r.Steps[2].Allocated)
			}
		}
		// The first iteration makes the optimizer's state: allocated after
		// it grows by the momentum buffers (one per parameter, float32).
		params, err := m.Parameters()
		if err != nil {
			t.Fatal(err)
		}
		if grown := r.Steps[1].Allocated - r.Steps[0].Allocated; grown < 4*params {
			t.Errorf("amp %v: the first iteration leaves %d bytes more, less than the %d of the momentum buffers", amp, grown, 4*params)
		}
	}
}

// TestRunValEvents checks what validation leaves: after the last val
// event of a row, allocated memory is what it was before the row (the EMA
// is float32 again and run()'s tensors are gone), and each val event's
// peak is within the eval step's at that shape and the training run's
// resident memory.
func TestRunValEvents(t *testing.T) {
	m, err := sim.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	for _, amp := range []bool{false, true} {
		// One warm step: no iteration skipped, the state made in the first.
		sc := sim.Options{Batch: 4, Height: 320, Width: 320, AMP: amp, Train: true, EMA: true, WarmSteps: 1}
		events := []sim.RunEvent{{Kind: sim.RunEventSetup}, {Kind: sim.RunEventTrain, BoxCounts: []int64{1, 2, 3, 4}},
			{Kind: sim.RunEventVal, Batch: 8, Height: 256, Width: 320}, {Kind: sim.RunEventVal, Batch: 8, Height: 320, Width: 320},
			{Kind: sim.RunEventVal, Batch: 3, Height: 320, Width: 256}, {Kind: sim.RunEventCkpt}}
		r, err := m.Run(sc, events)
		if err != nil {
			t.Fatal(err)
		}
		if before, after := r.Steps[1].Allocated, r.Steps[4].Allocated; before != after {
			t.Errorf("amp %v: allocated %d before validation, %d after it", amp, before, after)
		}
		if before, after := r.Steps[4].Allocated, r.Steps[5].Allocated; before != after {
			t.Errorf("amp %v: allocated %d before the checkpoint, %d after it", amp, before, after)
		}
		if r.Steps[5].Peak <= r.Steps[4].Allocated {
			t.Errorf("amp %v: the checkpoint's copies add nothing to the peak", amp)
		}
		if r.PeakReserved < slices.MaxFunc(r.Steps, func(a, b sim.RunStep) int { return int(a.Reserved - b.Reserved) }).Reserved {
			t.Errorf("amp %v: the run's reserved peak is below an event's", amp)
		}
	}
}

// TestRunPlan checks PlanRun: its events' order and sizes, its
// validation shapes (YOLO's rectangles of 640: 512×672, 448×672, 672×672
// and 672×512), and that a seed gives the same counts every time.
func TestRunPlan(t *testing.T) {
	p := sim.RunPlan{Epochs: 2, Iterations: 3, Batch: 16, Height: 640, Width: 640, ValImages: 100, MeanBoxes: 7.3, Seed: 5}
	m, err := sim.Builtin("yolov9-s")
	if err != nil {
		t.Fatal(err)
	}
	ev, err := m.PlanRun(p)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range ev {
		if len(kinds) == 0 || kinds[len(kinds)-1] != e.Kind {
			kinds = append(kinds, e.Kind)
		}
	}
	if want := []string{"setup", "train", "val", "ckpt", "train", "val", "ckpt"}; !slices.Equal(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
	var shapes [][3]int64
	var total, boxes, n int64
	for _, e := range ev[4:8] {
		shapes = append(shapes, [3]int64{e.Batch, e.Height, e.Width})
		total += e.Batch
	}
	if want := [][3]int64{{32, 512, 672}, {32, 448, 672}, {32, 672, 672}, {4, 672, 512}}; !slices.Equal(shapes, want) || total != 100 {
		t.Errorf("val batches %v, want %v", shapes, want)
	}
	for _, e := range ev {
		for _, c := range e.BoxCounts {
			boxes += c
			n++
		}
	}
	if mean := float64(boxes) / float64(n); mean < 5 || mean > 10 {
		t.Errorf("mean boxes per image %.2f, want about 7.3", mean)
	}
	again, err := m.PlanRun(p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(ev, again, func(a, b sim.RunEvent) bool { return slices.Equal(a.BoxCounts, b.BoxCounts) }) {
		t.Error("the same plan gave other counts")
	}
}

// TestRunSkipped checks GradScaler's skipped steps: until the first step
// that runs, the optimizer has no state, so allocated memory after a
// skipped iteration lacks the momentum buffers that the first real step
// makes; skipping is refused without AMP.
func TestRunSkipped(t *testing.T) {
	m, err := sim.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	params, err := m.Parameters()
	if err != nil {
		t.Fatal(err)
	}
	sc := sim.Options{Batch: 2, Height: 320, Width: 320, AMP: true, Train: true, EMA: true}
	counts := []int64{2, 5}
	events := []sim.RunEvent{{Kind: sim.RunEventSetup},
		{Kind: sim.RunEventTrain, BoxCounts: counts, Skipped: true}, {Kind: sim.RunEventTrain, BoxCounts: counts, Skipped: true},
		{Kind: sim.RunEventTrain, BoxCounts: counts}, {Kind: sim.RunEventTrain, BoxCounts: counts, Skipped: true}}
	r, err := m.Run(sc, events)
	if err != nil {
		t.Fatal(err)
	}
	a := func(i int) int64 { return r.Steps[i].Allocated }
	if d := a(2) - a(1); d > 1<<20 || d < -1<<20 {
		t.Errorf("two skipped iterations leave %d and %d bytes", a(1), a(2))
	}
	if d := a(3) - a(2); d < 4*params {
		t.Errorf("the first real step adds %d bytes, less than the momentum's %d", d, 4*params)
	}
	if d := a(4) - a(3); d > 1<<20 || d < -1<<20 {
		t.Errorf("a skipped step after the state exists changes allocated by %d", d)
	}
	sc.AMP = false
	if _, err := m.Run(sc, events); err == nil {
		t.Error("a skipped step without AMP was accepted")
	}
}
