package sim

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// Cost is the arithmetic of one training step, in FLOPs: a multiply-add
// counts 2. It tells what checkpointing costs in compute, next to the
// memory it saves.
//
// Forward is every op of the forward at the scenario's shapes. Backward is
// the usual estimate of twice the forward of the ops that need gradients
// (one product for the gradient of the input, one for that of the weight);
// ops that no parameter reaches, or whose outputs never reach the loss, have
// none. Recompute is the forward of the checkpointed layer ranges, which
// checkpoint(use_reentrant=False) runs again inside the backward. PyTorch
// stops that rerun after the range's last op that saves a tensor for the
// backward, skipping trailing ops that save nothing (a Concat, an Add);
// Recompute counts the whole range, an upper bound that is off by those few
// ops.
//
// The precision (AMP, half) changes the cost of a FLOP, not their count.
type Cost struct {
	Forward, Backward, Recompute int64
}

// Total is the step's FLOPs: forward, backward and recomputation.
func (c Cost) Total() int64 { return c.Forward + c.Backward + c.Recompute }

// Overhead is the recomputation's extra FLOPs relative to the step without
// it: Recompute / (Forward + Backward); 0 for an empty step.
func (c Cost) Overhead() float64 {
	if c.Forward+c.Backward == 0 {
		return 0
	}
	return float64(c.Recompute) / float64(c.Forward+c.Backward)
}

// Cost counts the FLOPs of a scenario's step.
//
// Only ops on tensor data count: the graph's image input and what is computed
// from it. Shape arithmetic (Shape, Gather, Concat of sizes, …), which eager
// PyTorch does on Python ints, costs nothing. The FLOPs of one op come from
// its rule in the op table (schedule.FLOPs lists them): a convolution's
// multiply-adds, a few per element for batch norms and softmaxes, one per
// element for element-wise ops, none for views and copies. In a CNN the
// convolutions make nearly all of the count (99.5% on the default model). An
// op on tensor data outside the table is an error.
func (m *Model) Cost(sc Options) (Cost, error) {
	if err := sc.Supported(); err != nil {
		return Cost{}, err
	}
	// Every FLOP rule grows in proportion to the batch, so batch 1's count
	// times the batch bounds the step's: past 2^62 the count would wrap.
	if sc.Batch > 1 {
		one := sc
		one.Batch = 1
		if len(sc.BoxCounts) > 0 { // one image's count, the densest's
			one.BoxCounts = []int64{slices.Max(sc.BoxCounts)}
		}
		c1, err := m.Cost(one)
		if err != nil {
			return Cost{}, err
		}
		for _, f := range []int64{c1.Forward, c1.Backward, c1.Recompute} {
			if hi, lo := bits.Mul64(uint64(f), uint64(sc.Batch)); hi != 0 || lo > 1<<62 {
				return Cost{}, fmt.Errorf("onnxmem: batch %d: the step's FLOPs pass 2^62, beyond what onnxmem counts exactly; use a smaller batch", sc.Batch)
			}
		}
	}
	p, err := m.forScenario(sc)
	if err != nil {
		return Cost{}, err
	}
	g := p.graph
	if err := m.checkLayers(sc, layers(g)); err != nil {
		return Cost{}, err
	}
	s, err := m.infer(g, sc)
	if err != nil {
		return Cost{}, err
	}
	ranges := sc.Checkpoint
	if sc.Segments > 1 {
		ranges = Sequential(layers(g), sc.Segments)
	}
	inRange := func(l int) bool {
		for _, r := range ranges {
			if l >= r.From && l < r.To {
				return true
			}
		}
		return false
	}
	data, grad := flopFlow(g, s)
	var c Cost
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if !readsData(n, data) {
			continue
		}
		f, err := schedule.FLOPs(n, s)
		if err != nil {
			return Cost{}, fmt.Errorf("onnxmem: %s: %w", m.Name, err)
		}
		c.Forward += f
		if grad[i] {
			c.Backward += 2 * f
		}
		if n.Layer >= 0 && inRange(n.Layer) {
			c.Recompute += f
		}
	}
	return c, nil
}

// readsData reports whether node n reads tensor data.
func readsData(n *ir.Node, data []bool) bool {
	for _, v := range n.Inputs {
		if v != ir.NoValue && data[v] {
			return true
		}
	}
	return false
}

// flopFlow marks, by value, the tensor data: the graph's inputs and the
// float outputs of ops that read data; and, by node, the ops whose backward
// runs: they read a parameter or a value computed from one, and an output of
// theirs reaches a graph output (the loss sums them all).
func flopFlow(g *ir.Graph, s *ir.Shapes) (data, grad []bool) {
	data = make([]bool, len(g.Values))
	rg := make([]bool, len(g.Values)) // requires grad
	for _, v := range g.Inputs {
		data[v] = true
	}
	for i := range g.Values {
		rg[i] = isParamValue(g, ir.ValueID(i))
	}
	grad = make([]bool, len(g.Nodes))
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if !readsData(n, data) || n.OpType == "Shape" {
			continue
		}
		needs := false
		for _, v := range n.Inputs {
			needs = needs || v != ir.NoValue && rg[v]
		}
		for _, v := range n.Outputs {
			if isFloatType(s.DTypes[v]) {
				data[v], rg[v] = true, needs
			}
		}
		grad[i] = needs
	}
	// Keep only the ops whose outputs reach the loss, walking back from it.
	reach := make([]bool, len(g.Values))
	for _, v := range g.Outputs {
		reach[v] = true
	}
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		n := &g.Nodes[i]
		hit := false
		for _, v := range n.Outputs {
			hit = hit || reach[v]
		}
		grad[i] = grad[i] && hit
		if hit {
			for _, v := range n.Inputs {
				if v != ir.NoValue {
					reach[v] = true
				}
			}
		}
	}
	return data, grad
}

// isParamValue reports whether v is a parameter: a float initializer whose data
// the model owns (weights keep no data in a weightless export), or one that
// a Conv or BatchNormalization reads.
func isParamValue(g *ir.Graph, v ir.ValueID) bool {
	val := &g.Values[v]
	if val.Kind != ir.Initializer || !isFloatType(val.DType) {
		return false
	}
	if val.Data == nil && val.Floats == nil {
		return true
	}
	for _, c := range val.Consumers {
		if op := g.Nodes[c].OpType; op == "Conv" || op == "BatchNormalization" {
			return true
		}
	}
	return false
}

func isFloatType(d ir.DType) bool {
	return d == ir.Float32 || d == ir.Float16 || d == ir.BFloat16 || d == ir.Float64
}
