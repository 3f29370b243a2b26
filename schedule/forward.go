package schedule

import (
	"github.com/onnxmem/onnxmem/ir"
)

// forward emits the forward pass. Every value takes one reference on its
// storage while the Python code can still reach it: until its last reader has
// run and nothing keeps it any more: neither the layer loop's x and y, nor the
// list of a module that has not returned, nor the caller (the graph's inputs
// and outputs). Autograd's saved tensors take one more reference each, which
// the backward releases.
func (b *builder) forward() {
	g := b.g
	b.phase = Forward
	li := b.layers()
	f := &fwd{
		pending: make([]int32, len(g.Values)),
		holds:   make([]int32, len(g.Values)),
		alive:   make([]bool, len(g.Values)),
		keep:    make([]bool, len(g.Values)),
	}
	for i := range g.Nodes {
		if b.kind[i] == opMeta || b.kind[i] == opSkip {
			continue
		}
		for _, v := range b.readsOf(int32(i)) {
			f.pending[v]++
		}
	}
	for _, v := range g.Outputs {
		f.keep[v] = true
	}
	for _, v := range g.Inputs {
		f.keep[v] = true
	}
	scopeHolds := make(map[int32][]ir.ValueID)
	ended := make(map[int]bool)
	var layerHeld []ir.ValueID

	for i := range g.Nodes {
		k := b.kind[i]
		if k == opMeta || k == opSkip {
			continue
		}
		n := &g.Nodes[i]
		b.node = int32(i)
		b.run(n, k)
		reads := b.readsOf(int32(i))
		if end := li.scope[i]; end >= 0 {
			for _, v := range reads {
				f.holds[v]++
				scopeHolds[end] = append(scopeHolds[end], v)
			}
		}
		for _, v := range n.Outputs {
			if b.data[v] {
				f.alive[v] = true
				if li.holdEnd[v] != -1 {
					f.holds[v]++
					layerHeld = append(layerHeld, v)
				}
			}
		}
		// A tuple or list of tensors (cat's argument) dies last item first.
		if k == opConcat {
			for j := len(reads) - 1; j >= 0; j-- {
				f.pending[reads[j]]--
				b.maybeRelease(f, reads[j])
			}
		} else {
			for _, v := range reads {
				f.pending[v]--
				b.maybeRelease(f, v)
			}
		}
		for _, v := range n.Outputs {
			if b.data[v] {
				b.maybeRelease(f, v)
			}
		}
		for _, v := range scopeHolds[int32(i)] {
			f.holds[v]--
			b.maybeRelease(f, v)
		}
		if l := n.Layer; li.last[l] == int32(i) {
			b.p.LayerEnds = append(b.p.LayerEnds, LayerEnd{Layer: l, Event: len(b.p.Events)})
			ended[l] = true
			layerHeld = b.dropHolds(f, li, layerHeld, func(e int) bool { return e >= 0 && ended[e] })
		}
	}
	b.node = -1
	// The loop's list y dies with the forward, last item first.
	for j, k := 0, len(layerHeld)-1; j < k; j, k = j+1, k-1 {
		layerHeld[j], layerHeld[k] = layerHeld[k], layerHeld[j]
	}
	b.dropHolds(f, li, layerHeld, func(int) bool { return true })
}

// fwd is the forward's bookkeeping, indexed by value.
type fwd struct {
	pending []int32 // readers still to run
	holds   []int32 // references of the layer loop and of module lists
	alive   []bool  // the value's own reference is still taken
	keep    []bool  // the caller keeps it: graph inputs and outputs
}

// maybeRelease drops value v's reference once nothing can reach it.
func (b *builder) maybeRelease(f *fwd, v ir.ValueID) {
	if f.alive[v] && f.pending[v] == 0 && f.holds[v] == 0 && !f.keep[v] {
		f.alive[v] = false
		b.unref(b.vst[v])
	}
}

// dropHolds ends the layer loop's holds that are due, in the order they were
// taken, and returns those still held.
func (b *builder) dropHolds(f *fwd, li layerInfo, held []ir.ValueID, due func(int) bool) []ir.ValueID {
	kept := held[:0]
	for _, v := range held {
		if !due(li.holdEnd[v]) {
			kept = append(kept, v)
			continue
		}
		f.holds[v]--
		b.maybeRelease(f, v)
	}
	return kept
}

// readsOf lists the distinct data values that node i reads, in input order.
func (b *builder) readsOf(i int32) []ir.ValueID {
	n := &b.g.Nodes[i]
	if b.kind[i] == opSiLU {
		return []ir.ValueID{b.siluIn[i]}
	}
	var out []ir.ValueID
	for _, v := range n.Inputs {
		if v == ir.NoValue || !b.data[v] {
			continue
		}
		dup := false
		for _, u := range out {
			dup = dup || u == v
		}
		if !dup {
			out = append(out, v)
		}
	}
	return out
}
