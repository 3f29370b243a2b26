package sim

import (
	"cmp"
	"fmt"
	"slices"
)

// A checkpoint planner: the ranges of top-level layers to run under
// torch.utils.checkpoint.checkpoint(use_reentrant=False) so that a step fits
// a limit with the fewest recomputed FLOPs.
//
// The search. Memory is not additive over layers (what a checkpointed range
// keeps depends on what later layers read, and the peak moves), so every
// candidate is simulated, and the search keeps its simulations few:
//
//  1. No checkpointing: if it fits, that is the plan.
//  2. checkpoint_sequential with K = 2, 3, ... segments (Sequential), the
//     plans of the literature's usual recipe, and every layer in a range of
//     its own (EachLayer, the most frugal); the fitting plan that recomputes
//     least is the start. None fits: the limit cannot be met, and the error
//     says the lowest peak seen.
//  3. Descent (a greedy local search, as in the checkpoint-selection
//     heuristics that Checkmate, Jain et al. 2020, compares against): take a
//     layer out of the plan, the one whose forward costs most first, by
//     shrinking its range at an end, splitting it in two, or dropping a
//     range of one layer; keep the move when the step still fits; a round
//     tries every layer of the plan once, and rounds repeat until one
//     takes no layer out. Each accepted move lowers the recomputed
//     FLOPs, so the plan never recomputes more than the best
//     checkpoint_sequential K that fits.
//
// Worked example: a 25 M-parameter detector's train step at batch 16 under
// AMP (39 top-level layers) peaks at 16.75 GiB and does not fit a 12 GiB
// limit. Its cheapest fitting recipe is checkpoint_sequential with 2
// segments (layers 0-18 checkpointed), which recomputes 27.1% of the
// forward; the descent then takes out layers 5, 9, 10, 16 and 17, whose
// activations the peak can keep, and stops at 0-4,6-8,11-15,18, which fits
// (11.92 GiB) and recomputes 16.3%, after 23 simulations.

// Plan is a checkpoint plan and the step it gives.
type Plan struct {
	// Ranges are the checkpointed ranges, in layer order.
	Ranges []Range
	// Result is the step's simulation with the plan (no limit); Fits says it
	// fits under the limit the plan was made for.
	Result *Result
	Fits   bool
	// RecomputeFLOPs are the forward FLOPs that the backward recomputes;
	// ForwardFLOPs those of the whole forward.
	RecomputeFLOPs, ForwardFLOPs int64
	// Simulations counts the steps simulated to find the plan.
	Simulations int
}

// ErrNoPlan is returned by MakePlan when no checkpoint plan fits: Lowest is
// the lowest peak that any plan tried reached.
type ErrNoPlan struct {
	Capacity, Lowest int64
	Plan             []Range
}

func (e *ErrNoPlan) Error() string {
	return fmt.Sprintf("onnxmem: plan: no checkpoint plan fits a limit of %d bytes: the lowest peak reachable is %d bytes allocated, checkpointing layers %s; use a smaller batch or image, or AMP",
		e.Capacity, e.Lowest, formatRanges(e.Plan))
}

// formatRanges writes ranges as the -checkpoint flag takes them: inclusive
// layer ranges, "0-5,9-12".
func formatRanges(rs []Range) string {
	if len(rs) == 0 {
		return "no checkpointing"
	}
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf("%d-%d", r.From, r.To-1)
	}
	return s
}

// LayerFLOPs returns the forward FLOPs of each top-level layer at the
// scenario's shapes (Cost's counting), what checkpointing the layer
// recomputes.
func (m *Model) LayerFLOPs(sc Options) ([]int64, error) {
	n := m.Layers()
	out := make([]int64, n)
	for l := range n {
		sc.Segments, sc.Checkpoint = 0, []Range{{l, l + 1}}
		c, err := m.Cost(sc)
		if err != nil {
			return nil, err
		}
		out[l] = c.Recompute
	}
	return out, nil
}

// MakePlan returns the checkpoint plan with the fewest recomputed FLOPs that
// it finds for sc to fit (Model.Fit) under capacity, the caching
// allocator's limit; sc's own Segments and Checkpoint are replaced. When no
// plan fits it returns an *ErrNoPlan.
func (m *Model) MakePlan(sc Options, capacity int64) (*Plan, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("onnxmem: plan: a limit of %d bytes: the limit must be positive", capacity)
	}
	n := m.Layers()
	if n < 1 {
		return nil, fmt.Errorf("onnxmem: plan: %s has no top-level layers to checkpoint", m.Name)
	}
	sc.Segments, sc.Checkpoint = 0, nil
	flops, err := m.LayerFLOPs(sc)
	if err != nil {
		return nil, err
	}
	var total int64
	for _, f := range flops {
		total += f
	}
	cost := func(rs []Range) int64 {
		var c int64
		for _, r := range rs {
			for l := r.From; l < r.To; l++ {
				c += flops[l]
			}
		}
		return c
	}
	sims := 0
	lowest, lowestPlan := int64(-1), []Range(nil)
	try := func(rs []Range) (*Result, bool, error) {
		s := sc
		s.Checkpoint = rs
		r, ok, err := m.Fit(s, capacity)
		sims++
		if err == nil && (lowest < 0 || r.Peak < lowest) {
			lowest, lowestPlan = r.Peak, rs
		}
		return r, ok, err
	}
	done := func(rs []Range, r *Result) *Plan {
		return &Plan{Ranges: rs, Result: r, Fits: true, RecomputeFLOPs: cost(rs), ForwardFLOPs: total, Simulations: sims}
	}
	if r, ok, err := try(nil); err != nil {
		return nil, err
	} else if ok {
		return done(nil, r), nil
	}
	// The start: the cheapest fitting plan of the usual recipes.
	var best []Range
	var bestR *Result
	candidates := [][]Range{EachLayer(n)}
	for k := 2; k <= n; k++ {
		candidates = append(candidates, Sequential(n, k))
	}
	slices.SortStableFunc(candidates, func(a, b []Range) int { return cmp.Compare(cost(a), cost(b)) })
	for _, rs := range candidates {
		if best != nil && cost(rs) >= cost(best) {
			break
		}
		r, ok, err := try(rs)
		if err != nil {
			return nil, err
		}
		if ok {
			best, bestR = rs, r
			break // candidates are in cost order: the first that fits is the cheapest
		}
	}
	if best == nil {
		return nil, &ErrNoPlan{Capacity: capacity, Lowest: lowest, Plan: lowestPlan}
	}
	// Descent: take layers out while the step fits.
	for improved := true; improved; {
		improved = false
		var layers []int
		for _, r := range best {
			for l := r.From; l < r.To; l++ {
				layers = append(layers, l)
			}
		}
		slices.SortStableFunc(layers, func(a, b int) int { return cmp.Compare(flops[b], flops[a]) })
		// One round tries every layer once, keeping each move that fits.
		for _, l := range layers {
			if flops[l] == 0 {
				continue
			}
			rs := without(best, l)
			r, ok, err := try(rs)
			if err != nil {
				return nil, err
			}
			if ok {
				best, bestR, improved = rs, r, true
			}
		}
	}
	return done(best, bestR), nil
}

// without returns the plan rs with layer l taken out: its range shrunk at
// an end, split in two, or dropped.
func without(rs []Range, l int) []Range {
	var out []Range
	for _, r := range rs {
		if l < r.From || l >= r.To {
			out = append(out, r)
			continue
		}
		if r.From < l {
			out = append(out, Range{r.From, l})
		}
		if l+1 < r.To {
			out = append(out, Range{l + 1, r.To})
		}
	}
	return out
}
