package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/onnxmem/onnxmem/family/yolov9/dataset"
	"github.com/onnxmem/onnxmem/onnxmem"
)

// runStep gives a step command's default step, for a model whose family's
// training script onnxmem runs: the iteration of that training run whose
// densest image carries the most boxes (what sizes the loss's assigner,
// and so the run's allocated peak), at whatever batch size the command
// asks for. Its box counts come from the run's plan at that batch
// (onnxmem.Model.PlanRun), on -data's dataset or the built-in COCO-like
// one, the earliest of equally dense iterations.
type runStep struct {
	m    *onnxmem.Model
	plan onnxmem.RunPlan // the run: its data, epochs and seed; the batch and image are the command's
	mu   sync.Mutex
	memo map[[3]int64][]int64
	err  error // the first plan that failed
}

// densest returns the box counts of the densest iteration of the run at
// batch and image h×w, nil after an error (Err says it).
func (r *runStep) densest(batch, h, w int64) []int64 {
	h, w = cmp.Or(h, onnxmem.DefaultImage), cmp.Or(w, onnxmem.DefaultImage)
	r.mu.Lock()
	defer r.mu.Unlock()
	key := [3]int64{batch, h, w}
	if c, ok := r.memo[key]; ok || r.err != nil {
		return c
	}
	p := r.plan
	p.Batch, p.Height, p.Width = batch, h, w
	events, err := r.m.PlanRun(p)
	if err != nil {
		r.err = err
		return nil
	}
	var best []int64
	most := int64(-1)
	for _, e := range events {
		if e.Kind == "train" && int64(len(e.BoxCounts)) == batch {
			if d := slices.Max(append([]int64{0}, e.BoxCounts...)); d > most {
				best, most = e.BoxCounts, d
			}
		}
	}
	if r.memo == nil {
		r.memo = map[[3]int64][]int64{}
	}
	r.memo[key] = best
	return best
}

// Err is the error of the first plan that failed, or nil.
func (r *runStep) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// runDefault returns st as a step command's default makes it when no
// step flag (-step, -train, -eval, -half) was given and onnxmem runs m's
// family's training script: the densest iteration of that run, under
// AMP unless -amp=false, with SGD and the EMA, on data (a data yaml, or
// "" for the built-in COCO-like dataset). Otherwise st is the step the
// flags name, -step train and eval read as -train and -eval.
func (f *flagSet) runDefault(m *onnxmem.Model, st setting, step, data string) (setting, *onnxmem.Model, error) {
	named := st.Train || st.Eval || st.Half
	switch {
	case step != "" && (f.isSet("train") || f.isSet("eval")):
		return st, m, fmt.Errorf("-step and -train or -eval: give one")
	case data != "" && (step != "" && step != "run" || named):
		return st, m, fmt.Errorf("-data gives the run's densest iteration: drop -step %s, -train, -eval and -half", step)
	}
	switch step {
	case "model":
		return st, m, nil
	case "train":
		st.Train, st.Boxes, st.Optimizer, st.EMA = true, onnxmem.DefaultBoxes, "SGD", true
		return st, m, nil
	case "eval":
		st.Eval = true
		return st, m, nil
	case "":
		if !wantsRun(m, step, named) {
			return st, m, nil
		}
	}
	if !hasRun(m) {
		return st, m, fmt.Errorf("-step run: onnxmem runs no training script of the %s family", m.Family)
	}
	if data != "" {
		var err error
		if m, err = f.dataClasses(m, data); err != nil {
			return st, m, err
		}
	}
	st.Train, st.Optimizer, st.EMA = true, "SGD", true
	if f.Lookup("amp") != nil && !f.isSet("amp") {
		st.AMP = true // train_dual.py's default
	}
	st.Run = &runStep{m: m, plan: onnxmem.RunPlan{Data: data}}
	if st.Run.plan.Drawn() {
		st.Run.plan.Seed = onnxmem.DefaultSeed
	}
	return st, m, nil
}

// runStepFlags adds -step and -data, what a step command simulates: by
// default, for a model whose family's training script onnxmem runs, the
// step of that run's densest iteration on -data's dataset or the built-in
// COCO-like one.
func (f *flagSet) runStepFlags() (step, data *string) {
	step = f.stepFlag()
	data = f.String("data", "", "the YOLO data `FILE.yaml` whose training run's densest iteration is the default step (default: the built-in COCO-like data)")
	return step, data
}

// printNote writes, after a step command's table, which run's densest
// iteration the step is, when it is one; what the data assumes; and how
// to name another step.
func (st setting) printNote(w io.Writer) {
	if st.Run == nil {
		return
	}
	p := st.Run.plan
	assumed := ""
	if p.Dataset() == onnxmem.BuiltinData {
		assumed = ", its boxes assumed (-data FILE.yaml for yours)"
	}
	drawn := fmt.Sprintf(", seed %d", cmp.Or(p.Seed, onnxmem.DefaultSeed))
	if !p.Drawn() {
		drawn = fmt.Sprintf(" (the dataloader's own batches, %d workers)", dataset.DefaultWorkers)
	}
	fmt.Fprintf(w, "\nthe step is train_dual.py's at the densest iteration of its run on %s%s%s;\n-step model, train or eval for another\n",
		p.Dataset(), assumed, drawn)
}
