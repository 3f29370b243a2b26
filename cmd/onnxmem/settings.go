package main

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/onnxmem/onnxmem/onnxmem"
)

// setting is one way to run the step: a precision and a number of
// checkpoint segments, and for a full training step (Train) the boxes in
// each image, the optimizer and whether an EMA copy is updated. Without
// Train the step is the model step.
type setting struct {
	AMP, Half bool
	Segments  int
	// Checkpoint is an explicit plan of checkpointed layer ranges
	// (-checkpoint 0-5,9-12); it excludes Segments.
	Checkpoint []onnxmem.Range
	Train      bool
	Boxes      int64
	Optimizer  string
	EMA        bool
	// WarmSteps is the loop's iterations before the measured train step
	// under float16 AMP (-warm-steps); 0 is onnxmem's default. Settings
	// without AMP run one, whatever it says (report and knobs show both).
	WarmSteps int
	// AllocConf is the caching allocator's options (-alloc-conf).
	AllocConf string
	// Eval is the validation step instead (-eval), on a half copy of the
	// model, or a float32 one with EvalFloat.
	Eval, EvalFloat bool
	// Run, for a train step, gives each batch its training run's densest
	// iteration's box counts (a step command's default); Densest says a
	// scenario's counts are those.
	Run     *runStep
	Densest bool
	// GPUs and SyncBN are a training run's DDP (-gpus, -sync-bn).
	GPUs   int
	SyncBN bool
}

// warmNeedsAMP fails on -warm-steps above 1 without -amp, for a command
// whose flags fix the precision: only float16 AMP's GradScaler skips
// iterations.
func (s setting) warmNeedsAMP() error {
	if s.Train && s.WarmSteps > 1 && !s.AMP {
		return fmt.Errorf("-warm-steps %d needs -amp: GradScaler skips iterations only under float16 AMP, and a step without it makes the optimizer's state in its first", s.WarmSteps)
	}
	return nil
}

// equal reports whether two settings are the same.
func (s setting) equal(o setting) bool {
	return s.AMP == o.AMP && s.Half == o.Half && s.Segments == o.Segments && slices.Equal(s.Checkpoint, o.Checkpoint) &&
		s.Train == o.Train && s.Boxes == o.Boxes && s.Optimizer == o.Optimizer && s.EMA == o.EMA && s.WarmSteps == o.WarmSteps &&
		s.AllocConf == o.AllocConf && s.Eval == o.Eval && s.EvalFloat == o.EvalFloat && s.Run == o.Run && s.Densest == o.Densest &&
		s.GPUs == o.GPUs && s.SyncBN == o.SyncBN
}

// settingOf is the setting of a scenario.
func settingOf(sc onnxmem.Scenario) setting {
	st := setting{AMP: sc.AMP, Half: sc.Half, Segments: sc.Segments, Checkpoint: sc.Checkpoint, AllocConf: sc.AllocConf,
		Eval: sc.Step == onnxmem.EvalStep, EvalFloat: sc.EvalFloat}
	if sc.Step == onnxmem.TrainStep {
		st.Train, st.Boxes, st.Optimizer, st.EMA, st.WarmSteps = true, max(sc.Boxes, 0), sc.Optimizer, !sc.NoEMA, sc.WarmSteps
		st.Densest = sc.BoxCounts != nil
		st.GPUs, st.SyncBN = sc.GPUs, sc.SyncBN
	}
	return st
}

// precision names the setting's precision: fp32, amp or half (a
// validation step's copy is half unless EvalFloat).
func (s setting) precision() string {
	switch {
	case s.Eval && !s.EvalFloat:
		return "half"
	case s.AMP:
		return "amp"
	case s.Half:
		return "half"
	}
	return "fp32"
}

// String is the setting's short name: "fp32", "amp k2", "half k4".
func (s setting) String() string {
	if len(s.Checkpoint) > 0 {
		return s.precision() + " ckpt " + rangesFlag(s.Checkpoint)
	}
	if s.Segments > 1 {
		return s.precision() + " k" + strconv.Itoa(s.Segments)
	}
	return s.precision()
}

// step describes the step the setting runs, for a model of family, without
// its precision: "model step (forward, loss, backward)" or the parts of a
// training step: YOLOv9's loss, or the generic family's sum of the outputs.
func (s setting) step(family string) string {
	if s.Eval {
		return "validation step (no_grad forward of a copy of the model)"
	}
	if !s.Train {
		return "model step (forward, loss, backward)"
	}
	opt, ema := "no optimizer step", "no EMA"
	if s.Optimizer != "none" {
		opt = cmpOr(s.Optimizer, "SGD") + " step"
	}
	if s.EMA {
		ema = "EMA update"
	}
	if s.Densest || s.Run != nil {
		return fmt.Sprintf("step of the training run's densest iteration (forward, YOLOv9 loss, its densest image %d boxes, backward, %s, %s)", s.Boxes, opt, ema)
	}
	if family != "yolov9" {
		return fmt.Sprintf("train step (forward, cross-entropy on its logits, backward, %s, %s)", opt, ema)
	}
	return fmt.Sprintf("train step (forward, YOLOv9 loss with %d boxes an image, backward, %s, %s)", s.Boxes, opt, ema)
}

// scenario is the step of the setting at a batch size and image size.
func (s setting) scenario(batch int64, img imageSize) onnxmem.Scenario {
	sc := scenario(batch, img)
	sc.AMP, sc.Half, sc.Segments, sc.AllocConf = s.AMP, s.Half, s.Segments, s.AllocConf
	sc.Checkpoint = s.Checkpoint
	switch {
	case s.Eval:
		sc.Step, sc.EvalFloat = onnxmem.EvalStep, s.EvalFloat
	case s.Train:
		sc.Step, sc.Boxes, sc.Optimizer, sc.NoEMA = onnxmem.TrainStep, s.Boxes, s.Optimizer, !s.EMA
		if s.Boxes == 0 {
			sc.Boxes = onnxmem.NoBoxes
		}
		if s.Run != nil && batch > 0 {
			if c := s.Run.densest(batch, img.H, img.W); c != nil {
				sc.BoxCounts, sc.Boxes = c, 0
			}
		}
		if s.AMP {
			sc.WarmSteps = s.WarmSteps
		}
		sc.GPUs, sc.SyncBN = s.GPUs, s.SyncBN
	}
	return sc
}

// settingsOf lists the settings of each precision with each number of
// segments, precision by precision.
func settingsOf(precisions []setting, segments []int) []setting {
	var out []setting
	for _, p := range precisions {
		for _, k := range segments {
			p.Segments = k
			out = append(out, p)
		}
	}
	return out
}

// precisions are fp32, amp and half, in the order tables list them.
var precisions = []setting{{}, {AMP: true}, {Half: true}}

// checkpointSegments are the segment counts the report and knobs compare:
// none, 2 and 4.
var checkpointSegments = []int{0, 2, 4}

// parallel calls fn(0), …, fn(n-1) on up to GOMAXPROCS goroutines and
// returns the error of the lowest index that failed, or nil. Each call writes
// only its own results, so the outcome does not depend on the scheduling.
func parallel(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				errs[i] = fn(i)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
