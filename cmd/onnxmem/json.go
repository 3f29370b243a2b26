package main

import (
	"encoding/json"
	"io"

	"github.com/onnxmem/onnxmem/onnxmem"
)

// predicted is the figures predict adds to a scenario, in bytes; the names
// are those of the measurements in the ground truth.
type predicted struct {
	Peak         int64 `json:"peak"`
	PeakReq      int64 `json:"peak_req"`
	PeakReserved int64 `json:"peak_reserved"`
	// ReservedAfter is memory_reserved() when the step ends; GPUMem the
	// same as YOLOv9's loop prints it.
	ReservedAfter int64  `json:"reserved_after"`
	GPUMem        string `json:"gpu_mem"`
	M0            int64  `json:"m0"`
	AfterFwd      int64  `json:"after_fwd"`
	FwdPeak       int64  `json:"fwd_peak"`
	AfterBwd      int64  `json:"after_bwd"`
}

func newPredicted(r *onnxmem.Result) predicted {
	return predicted{
		Peak: r.Peak, PeakReq: r.PeakRequested, PeakReserved: r.PeakReserved, ReservedAfter: r.ReservedAfter, GPUMem: r.GPUMem(),
		M0: r.M0, AfterFwd: r.AfterForward, FwdPeak: r.ForwardPeak, AfterBwd: r.AfterBackward,
	}
}

// resultJSON is a Result as the -json outputs write it.
type resultJSON struct {
	Batch  int64 `json:"batch"`
	Height int64 `json:"height"`
	Width  int64 `json:"width"`
	// The setting: autocast, model.half() and checkpoint segments.
	AMP      bool `json:"amp"`
	Half     bool `json:"half"`
	Segments int  `json:"segments"`
	// AllocConf is the caching allocator's options, when not PyTorch's
	// defaults.
	AllocConf string `json:"alloc_conf,omitempty"`
	// Train is the training step's setting; absent for a model step.
	Train *trainJSON `json:"train,omitempty"`
	// Eval is the validation step's copy, "half" or "float32"; absent for
	// other steps.
	Eval string `json:"eval,omitempty"`
	predicted
	PeakPhase string `json:"peak_phase"`
	PeakNode  string `json:"peak_node"`
	PeakLayer int    `json:"peak_layer"`
	PeakEvent int    `json:"peak_event"`
	Events    int    `json:"events"`
	OOM       bool   `json:"oom,omitempty"`
	// Only with detail.
	AtPeak     []tensorJSON `json:"at_peak,omitempty"`
	PeakByKind []kindJSON   `json:"peak_by_kind,omitempty"`
}

// trainJSON is the setting of a full training step.
type trainJSON struct {
	Boxes     int64  `json:"boxes"`
	Optimizer string `json:"optimizer"`
	EMA       bool   `json:"ema"`
	WarmSteps int    `json:"warm_steps"` // the loop's iterations before the measured step
}

type tensorJSON struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Bytes     int64  `json:"bytes"`
	Requested int64  `json:"requested"`
	Node      string `json:"node,omitempty"`
}

type kindJSON struct {
	Kind  string `json:"kind"`
	Bytes int64  `json:"bytes"`
	Count int    `json:"count"`
}

// newResultJSON converts a Result; detail adds the buffers alive at the peak.
func newResultJSON(r *onnxmem.Result, detail bool) resultJSON {
	j := resultJSON{
		Batch: r.Scenario.Batch, Height: r.Scenario.Height, Width: r.Scenario.Width,
		AMP: r.Scenario.AMP, Half: r.Scenario.Half, Segments: r.Scenario.Segments, AllocConf: r.Scenario.AllocConf,
		predicted: newPredicted(r),
		PeakPhase: r.PeakPhase, PeakNode: r.PeakNode, PeakLayer: r.PeakLayer, PeakEvent: r.PeakEvent,
		Events: r.Events, OOM: r.OOM,
	}
	if sc := r.Scenario; sc.Step == onnxmem.TrainStep {
		j.Train = &trainJSON{Boxes: max(sc.Boxes, 0), Optimizer: string(sc.Optimizer), EMA: !sc.NoEMA, WarmSteps: sc.WarmSteps}
	}
	switch sc := r.Scenario; {
	case sc.Step == onnxmem.EvalStep && sc.EvalFloat:
		j.Eval = "float32"
	case sc.Step == onnxmem.EvalStep:
		j.Eval = "half"
	}
	if detail {
		for _, t := range r.AtPeak {
			j.AtPeak = append(j.AtPeak, tensorJSON(t))
		}
		for _, k := range r.PeakByKind {
			j.PeakByKind = append(j.PeakByKind, kindJSON(k))
		}
	}
	return j
}

func newResultsJSON(rs []*onnxmem.Result) []resultJSON {
	out := make([]resultJSON, len(rs))
	for i, r := range rs {
		out[i] = newResultJSON(r, false)
	}
	return out
}

// writeJSON writes v indented, with a final newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
