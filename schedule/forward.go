package schedule

import (
	"fmt"

	"github.com/onnxmem/onnxmem/ir"
)

// forward emits the forward pass. Every value takes one reference on its
// storage while the Python code can still reach it: until its last reader has
// run and nothing keeps it any more: neither the layer loop's x and y, nor the
// list of a module that has not returned, nor the caller (the graph's inputs
// and outputs). Autograd's saved tensors take one more reference each, which
// the backward releases.
//
// Nodes in a checkpointed range save nothing: a saved tensor's reference is
// dropped as soon as the op returns, and what only the saved set held is
// freed there. The range's inputs are kept instead, by the checkpoint's
// frame, until the range's backward is done.
func (fp *forwardPass) forward() error {
	g := fp.g
	fp.phase = Forward
	if err := fp.setHolds(); err != nil {
		return err
	}
	fp.cp.assign()
	fp.cp.chunkHolds()
	var nodes []int32
	for i := range g.Nodes {
		if fp.kind[i].RunsOnData() {
			nodes = append(nodes, int32(i))
		}
	}
	if fp.cfg.Train != nil {
		fp.loadBatch()
	}
	f := fp.newFwd(nodes)
	for _, v := range g.Outputs {
		f.keep[v] = true
	}
	for _, v := range g.Inputs {
		f.keep[v] = true
	}
	cur := -1
	for _, i := range nodes {
		c := fp.cp.chunkOf[i]
		if c != cur && c >= 0 {
			// checkpoint(fn, *inputs) keeps its inputs in the frame.
			for _, v := range fp.cp.chunks[c].inputs {
				fp.ref(fp.vst[v])
			}
		}
		cur = c
		fp.noSave = c >= 0 || fp.cfg.Eval != nil
		fp.step(f, i)
	}
	fp.noSave = false
	if fp.cfg.Eval != nil && fp.cfg.Eval.Head != nil {
		// The eval head decodes its outputs; what it returns lives to the
		// end of the step.
		for _, buf := range fp.cfg.Eval.Head.Decode(tape{fp.builder}, fp.outputs()) {
			fp.decoded = append(fp.decoded, int32(buf))
		}
	}
	fp.node = -1
	// The loop's list y dies with the forward, last item first.
	held := f.layerHeld
	for j, k := 0, len(held)-1; j < k; j, k = j+1, k-1 {
		held[j], held[k] = held[k], held[j]
	}
	fp.dropHolds(f, held, func(int) bool { return true })
	return nil
}

// setHolds asks the config's Holder what the forward keeps alive and checks
// the answer's sizes, and finds each top-level layer's last node.
func (fp *forwardPass) setHolds() error {
	g := fp.g
	h := fp.cfg.Holder.Holds(fp.Flow)
	if h == nil || len(h.LayerEnd) != len(g.Values) || len(h.LastUse) != len(g.Values) || len(h.Until) != len(g.Nodes) {
		return fmt.Errorf("schedule: graph %q: the forward's holds do not cover its %d values and %d nodes", g.Name, len(g.Values), len(g.Nodes))
	}
	for i, hs := range h.Until {
		for _, x := range hs {
			if x.V < 0 || int(x.V) >= len(g.Values) || x.End < 0 || int(x.End) >= len(g.Nodes) {
				return fmt.Errorf("schedule: graph %q: node %s holds value %d until node %d, outside the graph", g.Name, g.Nodes[i].Name, x.V, x.End)
			}
		}
	}
	if err := fp.setInPlace(h.InPlace); err != nil {
		return err
	}
	fp.holds = h
	fp.last = make(map[int]int32)
	for i := range g.Nodes {
		if fp.kind[i] != ir.EagerMeta {
			fp.last[g.Nodes[i].Layer] = int32(i)
		}
	}
	return nil
}

// setInPlace checks the Holder's in-place ops and keeps them: each must be
// an op with an in-place form whose first input is an activation of the
// output's size that no other running op reads and that the caller does not
// keep.
func (fp *forwardPass) setInPlace(ip []bool) error {
	g := fp.g
	if ip == nil {
		fp.inplace = nil
		return nil
	}
	if len(ip) != len(g.Nodes) {
		return fmt.Errorf("schedule: graph %q: the in-place ops do not cover its %d nodes", g.Name, len(g.Nodes))
	}
	fp.inplace = make([]bool, len(g.Nodes))
	for i, on := range ip {
		if !on {
			continue
		}
		n := &g.Nodes[i]
		if !kindRules[fp.kind[i]].inPlace {
			return fmt.Errorf("schedule: node %s: %s has no in-place form onnxmem simulates", n.Name, n.OpType)
		}
		x, ok := fp.Overwritable(int32(i))
		if !ok || fp.s.Elems(x) != fp.s.Elems(n.Outputs[0]) || fp.s.DTypes[x] != fp.s.DTypes[n.Outputs[0]] {
			name := "its input"
			if x != ir.NoValue {
				name = g.Values[x].Name
			}
			return fmt.Errorf("schedule: node %s: cannot run in place on %s: it must be an activation of the output's size and type that no other op reads", n.Name, name)
		}
		fp.inplace[i] = true
	}
	return nil
}

// fwd is the bookkeeping of one run of forward ops, indexed by value.
type fwd struct {
	pending    []int32 // readers still to run
	holds      []int32 // references of the layer loop and of module lists
	alive      []bool  // the value's own reference is still taken
	keep       []bool  // the caller keeps it: graph inputs and outputs
	scopeHolds map[int32][]ir.ValueID
	ended      map[int]bool
	layerHeld  []ir.ValueID
}

// newFwd counts the readers of every value among nodes.
func (fp *forwardPass) newFwd(nodes []int32) *fwd {
	nv := len(fp.g.Values)
	f := &fwd{
		pending:    make([]int32, nv),
		holds:      make([]int32, nv),
		alive:      make([]bool, nv),
		keep:       make([]bool, nv),
		scopeHolds: make(map[int32][]ir.ValueID),
		ended:      make(map[int]bool),
	}
	for _, i := range nodes {
		for _, v := range fp.readsOf(i) {
			f.pending[v]++
		}
	}
	return f
}

// step runs node i and releases what it was the last to need.
func (fp *forwardPass) step(f *fwd, i int32) {
	n := &fp.g.Nodes[i]
	k := fp.kind[i]
	fp.node = i
	fp.run(n, k)
	reads := fp.readsOf(i)
	for _, a := range fp.holds.Until[i] {
		f.holds[a.V]++
		f.scopeHolds[a.End] = append(f.scopeHolds[a.End], a.V)
	}
	for _, v := range n.Outputs {
		if fp.data[v] {
			f.alive[v] = true
			if fp.hold[v] != -1 {
				f.holds[v]++
				f.layerHeld = append(f.layerHeld, v)
			}
		}
	}
	// A tuple or list of tensors (cat's argument) dies last item first.
	if kindRules[k].list {
		for j := len(reads) - 1; j >= 0; j-- {
			f.pending[reads[j]]--
			fp.maybeRelease(f, reads[j])
		}
	} else {
		for _, v := range reads {
			f.pending[v]--
			fp.maybeRelease(f, v)
		}
	}
	for _, v := range n.Outputs {
		if fp.data[v] {
			fp.maybeRelease(f, v)
		}
	}
	// Frames unwind innermost first: the holds taken last end first, and a
	// list dies last item first.
	for j := len(f.scopeHolds[i]) - 1; j >= 0; j-- {
		v := f.scopeHolds[i][j]
		f.holds[v]--
		fp.maybeRelease(f, v)
	}
	if l := n.Layer; fp.last[l] == i {
		if fp.phase == Forward {
			fp.p.LayerEnds = append(fp.p.LayerEnds, LayerEnd{Layer: l, Event: len(fp.p.Events)})
		}
		f.ended[l] = true
		f.layerHeld = fp.dropHolds(f, f.layerHeld, func(e int) bool { return e >= 0 && f.ended[e] })
	}
}

// maybeRelease drops value v's reference once nothing can reach it.
func (fp *forwardPass) maybeRelease(f *fwd, v ir.ValueID) {
	if f.alive[v] && f.pending[v] == 0 && f.holds[v] == 0 && !f.keep[v] {
		f.alive[v] = false
		fp.unref(fp.vst[v])
	}
}

// dropHolds ends the layer loop's holds that are due, in the order given, and
// returns those still held.
func (fp *forwardPass) dropHolds(f *fwd, held []ir.ValueID, due func(int) bool) []ir.ValueID {
	kept := held[:0]
	for _, v := range held {
		if !due(fp.hold[v]) {
			kept = append(kept, v)
			continue
		}
		f.holds[v]--
		fp.maybeRelease(f, v)
	}
	return kept
}
