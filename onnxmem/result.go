package onnxmem

import (
	"fmt"
	"strconv"

	"github.com/onnxmem/onnxmem/internal/sim"
)

// Result is a step as torch.cuda.memory_stats() reads it, after a warm-up
// step, with the parameters (the optimizer's state, the EMA) resident.
type Result struct {
	Scenario Scenario // the step, its defaults filled in
	// max_memory_allocated(), the same before rounding, max_memory_reserved()
	// and memory_reserved() when the step ends (GPUMem).
	Peak, PeakRequested, PeakReserved, ReservedAfter int64
	// Allocated before the step, after the forward, at its peak, after backward.
	M0, AfterForward, ForwardPeak, AfterBackward int64
	// The peak's phase, op, top-level layer (-1: none) and event of Events.
	PeakPhase, PeakNode  string
	PeakLayer, PeakEvent int
	// The largest buffers alive at the peak, and all of them by kind.
	AtPeak     []Tensor
	PeakByKind []KindBytes
	// OOM: out of memory under the limit, after the cache's release; the
	// figures stop there. FellBack: cuDNN shapes run without workspace.
	OOM              bool
	FellBack, Events int
}

// Tensor is a buffer alive at the peak, rounded and requested, and its op.
type Tensor struct {
	Name, Kind       string
	Bytes, Requested int64
	Node             string
}

// KindBytes is the bytes and buffers of a kind ("activations", …).
type KindBytes struct {
	Kind  string
	Bytes int64
	Count int
}

// Fits reports whether the step ran to its end under its limit.
func (r *Result) Fits() bool { return !r.OOM }

// GPUMem is ReservedAfter as YOLO's training loop prints GPU_mem: "18.3G".
func (r *Result) GPUMem() string { return gpuMem(r.ReservedAfter) }

// gpuMem writes reserved bytes as the training loops print them.
func gpuMem(n int64) string { return strconv.FormatFloat(float64(n)/1e9, 'g', 3, 64) + "G" }

// result converts the engine's result of the scenario sc.
func result(r *sim.Result, sc Scenario) *Result {
	if r == nil {
		return nil
	}
	out := &Result{Scenario: sc, Peak: r.Peak, PeakRequested: r.PeakRequested, PeakReserved: r.PeakReserved,
		ReservedAfter: r.ReservedAfter, M0: r.M0, AfterForward: r.AfterForward, ForwardPeak: r.ForwardPeak,
		AfterBackward: r.AfterBackward, PeakPhase: r.PeakPhase, PeakNode: r.PeakNode, PeakLayer: r.PeakLayer,
		PeakEvent: r.PeakEvent, OOM: r.OOM, FellBack: r.FellBack, Events: r.Events}
	out.Scenario.Batch = r.Scenario.Batch
	for _, t := range r.AtPeak {
		out.AtPeak = append(out.AtPeak, Tensor(t))
	}
	for _, k := range r.PeakByKind {
		out.PeakByKind = append(out.PeakByKind, KindBytes(k))
	}
	return out
}

// Simulate predicts one step.
func (m *Model) Simulate(sc Scenario) (*Result, error) {
	e, sc, o, err := m.decode(sc)
	if err != nil {
		return nil, err
	}
	r, err := e.Simulate(o)
	return result(r, sc), err
}

// Sweep predicts sc at each batch size, on all CPUs, calling progress.
func (m *Model) Sweep(sc Scenario, batches []int64, progress func(done, total int)) ([]*Result, error) {
	e, sc, o, err := m.decode(sc)
	if err != nil {
		return nil, err
	}
	rs, err := e.Sweep(o, batches, progress)
	if err != nil {
		return nil, err
	}
	out := make([]*Result, len(rs))
	for i, r := range rs {
		out[i] = result(r, sc)
	}
	return out, nil
}

// MaxBatch returns the largest batch, at most limit (0: MaxBatchLimit),
// whose step fits sc's Device or Capacity, and its Result (0, nil: none).
func (m *Model) MaxBatch(sc Scenario, limit int64) (int64, *Result, error) {
	e, sc, o, err := m.decode(sc)
	if err != nil {
		return 0, nil, err
	}
	capacity, err := limitOf(o, "max batch")
	if err != nil {
		return 0, nil, err
	}
	if limit, err = searchLimit(limit); err != nil {
		return 0, nil, err
	}
	n, r, err := e.MaxBatch(o, capacity, limit)
	return n, result(r, sc), err
}

// maxSearch is the largest batch a max-batch search considers: a million
// images, where a step's sizes approach what int64 bytes hold.
const maxSearch = 1 << 20

// searchLimit returns a max-batch search's limit: MaxBatchLimit for 0 or
// less, an error beyond maxSearch.
func searchLimit(limit int64) (int64, error) {
	switch {
	case limit <= 0:
		return MaxBatchLimit, nil
	case limit > maxSearch:
		return 0, fmt.Errorf("onnxmem: max batch up to %d: a search considers batches up to %d; give a smaller limit", limit, maxSearch)
	}
	return limit, nil
}

// Fit simulates sc without a limit and says if it fits its Device.
func (m *Model) Fit(sc Scenario) (*Result, bool, error) {
	e, sc, o, err := m.decode(sc)
	if err != nil {
		return nil, false, err
	}
	capacity, err := limitOf(o, "fit")
	if err != nil {
		return nil, false, err
	}
	r, ok, err := e.Fit(o, capacity)
	return result(r, sc), ok, err
}
