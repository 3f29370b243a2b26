package onnxmem

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/onnxmem/onnxmem/internal/sim"
)

// Plan is the layers to checkpoint, the step with them, its fit and FLOPs.
type Plan struct {
	Ranges                       []Range
	Result                       *Result
	Fits                         bool
	RecomputeFLOPs, ForwardFLOPs int64
	Simulations                  int
}

// ErrNoPlan says no plan fits Limit: the lowest peak was Lowest, with Ranges.
type ErrNoPlan struct {
	Limit, Lowest int64
	Ranges        []Range
}

func (e *ErrNoPlan) Error() string {
	layers := "no layers"
	if len(e.Ranges) > 0 {
		layers = "layers " + formatRanges(e.Ranges)
	}
	return fmt.Sprintf("onnxmem: plan: no checkpoint plan fits a limit of %s: the lowest peak reachable is %s allocated, checkpointing %s; use a smaller batch or image, or AMP",
		FormatBytes(e.Limit), FormatBytes(e.Lowest), layers)
}

// formatRanges writes ranges as -checkpoint takes them: "0-5,9,11-12".
func formatRanges(rs []Range) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strconv.Itoa(r.From)
		if r.To-1 > r.From {
			parts[i] += "-" + strconv.Itoa(r.To-1)
		}
	}
	return strings.Join(parts, ",")
}

// Plan finds the checkpoint plan of fewest FLOPs recomputed that fits sc.
func (m *Model) Plan(sc Scenario) (*Plan, error) {
	sc.Segments, sc.Checkpoint = 0, nil
	e, sc, o, err := m.decode(sc)
	if err != nil {
		return nil, err
	}
	capacity, err := limitOf(o, "plan")
	if err != nil {
		return nil, err
	}
	o.Capacity = 0
	p, err := e.MakePlan(o, capacity)
	if np := (*sim.ErrNoPlan)(nil); errors.As(err, &np) {
		return nil, &ErrNoPlan{Limit: np.Capacity, Lowest: np.Lowest, Ranges: publicRanges(np.Plan)}
	}
	if err != nil {
		return nil, err
	}
	sc.Capacity = 0
	ranged := sc
	ranged.Checkpoint = publicRanges(p.Ranges)
	return &Plan{Ranges: ranged.Checkpoint, Result: result(p.Result, ranged), Fits: p.Fits,
		RecomputeFLOPs: p.RecomputeFLOPs, ForwardFLOPs: p.ForwardFLOPs, Simulations: p.Simulations}, nil
}

// Cost is a step's FLOPs (a multiply-add is 2) by phase.
type Cost struct {
	Forward, Backward, Recompute int64
}

// Overhead is Recompute / (Forward + Backward).
func (c Cost) Overhead() float64 { return sim.Cost(c).Overhead() }

// Cost counts the FLOPs of a step (an eval step's forward only).
func (m *Model) Cost(sc Scenario) (Cost, error) {
	e, sc, o, err := m.decode(sc)
	if err != nil {
		return Cost{}, err
	}
	c, err := e.Cost(o)
	if sc.Step == EvalStep {
		c.Backward, c.Recompute = 0, 0 // no_grad
	}
	return Cost(c), err
}
