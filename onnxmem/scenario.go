package onnxmem

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/onnxmem/onnxmem/family/yolov9/dataset"
	"github.com/onnxmem/onnxmem/internal/cards"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// The defaults of a Scenario, MaxBatch and a RunPlan, the command line's
// too. NoBoxes: no boxes. BuiltinData: COCO's sizes, its boxes assumed.
const (
	DefaultBatch        = 16
	DefaultImage        = 640
	DefaultBoxes        = 16
	DefaultAMPWarmSteps = 4
	MaxBatchLimit       = 1024
	NoBoxes             = -1
	DefaultEpochs       = 2
	DefaultSeed         = 1
	BuiltinData         = dataset.COCOName
)

// Step is what one simulated step runs.
type Step string

// The steps: forward, sum(o.sum()) and backward; an iteration of the
// family's training script; the validation's no_grad forward of a copy.
const (
	ModelStep Step = "model"
	TrainStep Step = "train"
	EvalStep  Step = "eval"
)

// Range is a half-open range [From, To) of top-level layers.
type Range struct{ From, To int }

// Scenario is one step to simulate. Its zero fields mean the defaults.
type Scenario struct {
	// Batch, image (DefaultImage, or the export's), a text model's length.
	Batch, Height, Width, Seq int64
	Step                      Step // ModelStep by default
	// Autocast to float16 (bfloat16 with BF16), or model.half().
	AMP, BF16, Half bool
	// checkpoint_sequential's segments, or layers under checkpoint().
	Segments   int
	Checkpoint []Range
	// A train step's most boxes in an image, what its loss pads to
	// (DefaultBoxes; NoBoxes: none), or each image's count.
	Boxes     int64
	BoxCounts []int64
	// A train step's optimizer (ParseOptimizer; SGD); NoEMA drops YOLOv9's EMA.
	Optimizer string
	NoEMA     bool
	// Iterations before a train step (DefaultAMPWarmSteps under fp16 AMP).
	WarmSteps int
	// A run's DDP over GPUs ranks, each at Batch/GPUs, and its --sync-bn.
	GPUs      int
	SyncBN    bool
	EvalFloat bool // an eval step of a float32 copy, as without AMP
	// The card (ParseDevice), whose usable memory limits the step, or
	// the allocator's limit as set_per_process_memory_fraction sets it.
	Device       string
	Capacity     int64
	AllocConf    string // PYTORCH_CUDA_ALLOC_CONF: "expandable_segments:True"
	NoWorkspaces bool   // no cuDNN workspaces: a band's bottom (Device.Exact)
}

// Check says why sc cannot be simulated on any model, or nil.
func (sc Scenario) Check() error {
	_, _, err := (*Model)(nil).options(sc)
	return err
}

// decode returns m's engine model and sc decoded for it (options).
func (m *Model) decode(sc Scenario) (*sim.Model, Scenario, sim.Options, error) {
	e, err := m.engine()
	if err != nil {
		return nil, sc, sim.Options{}, err
	}
	sc, o, err := m.options(sc)
	return e, sc, o, err
}

// options decodes sc, the one place where a Scenario's zero fields get
// their defaults: it returns sc with them filled in and the engine's
// options.
func (m *Model) options(sc Scenario) (Scenario, sim.Options, error) {
	if sc.Batch == 0 {
		sc.Batch = DefaultBatch
	}
	h, w, fixed := m.FixedImage()
	if !fixed {
		h, w = DefaultImage, DefaultImage
	}
	if sc.Height == 0 {
		sc.Height = h
	}
	if sc.Width == 0 {
		sc.Width = w
	}
	o := sim.Options{Batch: sc.Batch, Height: sc.Height, Width: sc.Width, Seq: sc.Seq, AMP: sc.AMP, Half: sc.Half,
		Segments: sc.Segments, AllocConf: sc.AllocConf, Capacity: sc.Capacity, NoConvWorkspace: sc.NoWorkspaces}
	for _, r := range sc.Checkpoint {
		o.Checkpoint = append(o.Checkpoint, sim.Range(r))
	}
	switch {
	case sc.Capacity < 0:
		return sc, o, fmt.Errorf("onnxmem: Capacity %d: want the limit in bytes above 0, or 0 for none", sc.Capacity)
	case sc.Boxes < NoBoxes:
		return sc, o, fmt.Errorf("onnxmem: Boxes %d: want the most boxes in an image, 0 for DefaultBoxes or NoBoxes for none", sc.Boxes)
	case sc.Boxes == NoBoxes && sc.BoxCounts != nil:
		return sc, o, fmt.Errorf("onnxmem: Boxes NoBoxes with BoxCounts: give one or the other")
	}
	if sc.BF16 {
		if !sc.AMP {
			return sc, o, fmt.Errorf("onnxmem: bf16 without amp: bfloat16 is autocast's type; set AMP too")
		}
		o.AMPDType = "bfloat16"
	}
	if sc.Step == "" {
		sc.Step = ModelStep
	}
	if err := sc.fieldsApply(); err != nil {
		return sc, o, err
	}
	switch sc.Step {
	case TrainStep:
		switch {
		case sc.BoxCounts != nil && sc.Boxes == 0:
			sc.Boxes = slices.Max(append([]int64{0}, sc.BoxCounts...))
		case sc.Boxes == 0:
			sc.Boxes = DefaultBoxes
		}
		boxes := sc.Boxes
		if boxes == NoBoxes {
			boxes = 0
		}
		opt, err := ParseOptimizer(cmp.Or(sc.Optimizer, "SGD"))
		if err != nil {
			return sc, o, err
		}
		sc.Optimizer = opt
		// train_dual.py keeps an EMA copy; a generic training loop (timm's
		// train.py without --model-ema, transformers' Trainer) none.
		ema := !sc.NoEMA && (m == nil || m.Family != "generic")
		sc.NoEMA = !ema
		o.Train, o.Boxes, o.BoxCounts, o.Optimizer, o.EMA, o.WarmSteps = true, boxes, sc.BoxCounts, sim.Optimizer(opt), ema, sc.WarmSteps
		sc.WarmSteps = o.WarmStepsUsed()
		o.GPUs, o.SyncBN = int64(sc.GPUs), sc.SyncBN
		if sc.GPUs > 0 {
			// train_dual.py: batch_size // WORLD_SIZE per rank, after
			// asserting that it divides.
			if sc.Batch%int64(sc.GPUs) != 0 {
				return sc, o, fmt.Errorf("onnxmem: batch %d over %d GPUs: the batch must be a multiple of the GPUs (train_dual.py asserts it)", sc.Batch, sc.GPUs)
			}
			o.Batch = sc.Batch / int64(sc.GPUs)
		}
	case EvalStep:
		o.Eval, o.EvalFloat = true, sc.EvalFloat
	}
	if sc.Device == "" {
		return sc, o, o.Supported()
	}
	d, err := ParseDevice(sc.Device)
	switch {
	case err != nil:
		return sc, o, err
	case sc.Capacity != 0:
		return sc, o, fmt.Errorf("onnxmem: device %s and capacity %d: a device's limit is its usable memory; give one of them", sc.Device, sc.Capacity)
	case sc.BF16 && !cards.Device(d).BF16():
		return sc, o, fmt.Errorf("onnxmem: bf16 on %s: bfloat16 autocast needs compute capability 8.0 (Ampere) or newer, and the %s is %s: use float16 AMP", d.Name, d.Long, d.Capability)
	}
	o.Capacity, o.CuBLASWorkspace, o.NoFlash = d.Usable(), d.CuBLASWorkspace, !cards.Device(d).Flash()
	if sc.GPUs > 0 {
		o.Capacity -= cards.NCCL // each rank's NCCL, beside its context
	}
	return sc, o, o.Supported()
}

// fieldsApply returns an error naming a field that sc's step does not
// take, or the step when it is unknown.
func (sc Scenario) fieldsApply() error {
	train, eval := sc.Step == TrainStep, sc.Step == EvalStep
	if !train && !eval && sc.Step != ModelStep {
		return fmt.Errorf("onnxmem: step %q: want %s, %s or %s", sc.Step, ModelStep, TrainStep, EvalStep)
	}
	for _, f := range []struct {
		set, applies bool
		name, step   string
	}{
		{sc.Boxes != 0, train, "Boxes", "train"}, {sc.BoxCounts != nil, train, "BoxCounts", "train"},
		{sc.Optimizer != "", train, "Optimizer", "train"}, {sc.NoEMA, train, "NoEMA", "train"},
		{sc.WarmSteps != 0, train, "WarmSteps", "train"}, {sc.EvalFloat, eval, "EvalFloat", "eval"},
		{sc.GPUs != 0, train, "GPUs", "train"}, {sc.SyncBN, train, "SyncBN", "train"},
	} {
		if f.set && !f.applies {
			return fmt.Errorf("onnxmem: %s applies to %s steps, and this step is %s", f.name, f.step, sc.Step)
		}
	}
	return nil
}

// ParseOptimizer spells an optimizer as Scenario does ("LION": "Lion").
func ParseOptimizer(name string) (string, error) {
	for _, o := range []string{"SGD", "Adam", "AdamW", "Lion", "none"} {
		if strings.EqualFold(name, o) {
			return o, nil
		}
	}
	return "", fmt.Errorf("onnxmem: unknown optimizer %q: want SGD, Adam, AdamW, Lion (LION) or none", name)
}

// limitOf returns the caching allocator's limit of a decoded scenario, or an
// error when it has none.
func limitOf(o sim.Options, what string) (int64, error) {
	if o.Capacity <= 0 {
		return 0, fmt.Errorf("onnxmem: %s needs a limit: give the Scenario a Device or a Capacity", what)
	}
	return o.Capacity, nil
}

// publicRanges converts the engine's layer ranges.
func publicRanges(rs []sim.Range) []Range {
	out := make([]Range, len(rs))
	for i, r := range rs {
		out[i] = Range(r)
	}
	return slices.Clip(out)
}
