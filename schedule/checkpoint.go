package schedule

import "github.com/onnxmem/onnxmem/ir"

// Activation checkpointing, as torch.utils.checkpoint.checkpoint with
// use_reentrant=False runs it (torch/utils/checkpoint.py).
//
// Worked example: the first 19 layers of a detection network under one
// checkpoint, AMP, batch 8.
// In the forward, each op of the range runs as usual, but its pack hook keeps
// no tensor: a conv's fp16 input copy is freed as soon as the conv returns, a
// batch norm's statistics right after the norm, and a conv output as soon as
// its norm has read it. Only the range's inputs (the image) and its outputs
// that later layers read stay. In the backward, the first node of the range
// that unpacks a saved tensor triggers the recomputation: the range's forward
// runs again (with autocast's state restored, so the weights are cast anew),
// every tensor that a node saves is kept for the backward, and the
// recomputation stops after the last op that saves one. From there on the
// range's backward frees the recomputed tensors as it consumes them; the
// frame, and with it the range's inputs, goes once the range's backward is
// done.

// chunk is one checkpointed range of the graph.
type chunk struct {
	nodes      []int32      // its data nodes, in forward order
	inputs     []ir.ValueID // values it reads that are made before it, in value order
	recomputed bool
	released   bool // the frame, and with it the inputs, is gone
}

// assign assigns the data nodes to the checkpointed ranges of the config.
func (cp *checkpoints) assign() {
	g := cp.g
	cp.chunkOf = make([]int, len(g.Nodes))
	cp.hadSave = make([]bool, len(g.Nodes))
	for i := range cp.chunkOf {
		cp.chunkOf[i] = -1
	}
	cp.chunks = make([]chunk, len(cp.cfg.Checkpoint))
	for c, r := range cp.cfg.Checkpoint {
		in := make(map[ir.ValueID]bool)
		for i := range g.Nodes {
			k := cp.kind[i]
			l := g.Nodes[i].Layer
			if !k.RunsOnData() || l < r.From || l >= r.To || cp.chunkOf[i] >= 0 {
				continue
			}
			cp.chunkOf[i] = c
			cp.chunks[c].nodes = append(cp.chunks[c].nodes, int32(i))
		}
		for _, i := range cp.chunks[c].nodes {
			for _, v := range cp.readsOf(i) {
				if p := g.Values[v].Producer; p < 0 || cp.chunkOf[p] != c {
					in[v] = true
				}
			}
		}
		for v := range g.Values {
			if in[ir.ValueID(v)] {
				cp.chunks[c].inputs = append(cp.chunks[c].inputs, ir.ValueID(v))
			}
		}
	}
}

// chunkHolds sets b.hold, the layer loop's holds under the config's
// checkpointed ranges. A range runs as one function that returns only what
// layers after it read: a value made in the range and read by no later
// layer leaves the loop's list when the range returns, even when a layer
// of the range kept it in the loop's list. With two segments over layers
// 0–21, say, an output of layer 13 read by layers 14 and 18, both in the
// first range, is freed as soon as the range returns; one of layer 10 read
// by layer 21, after the range, lives to the end of the forward.
func (cp *checkpoints) chunkHolds() {
	cp.fw.hold = cp.fw.holds.LayerEnd
	if len(cp.chunks) == 0 {
		return
	}
	cp.fw.hold = append([]int(nil), cp.fw.holds.LayerEnd...)
	for v, end := range cp.fw.hold {
		p := cp.g.Values[v].Producer
		if end != HoldToEnd || p < 0 || cp.chunkOf[p] < 0 {
			continue
		}
		if r := cp.cfg.Checkpoint[cp.chunkOf[p]]; cp.fw.holds.LastUse[v] < r.To {
			cp.fw.hold[v] = r.To - 1
		}
	}
}

// recompute reruns chunk c's forward up to its last op that saves a tensor.
// The recomputed values get storages of their own; the saved ones stay
// referenced by their nodes' saved lists, the rest die when the early stop
// unwinds the function. Autocast's cache is the recomputation's own.
func (cp *checkpoints) recompute(c int) {
	ch := &cp.chunks[c]
	ch.recomputed = true
	stop := -1
	for j, i := range ch.nodes {
		if cp.hadSave[i] {
			stop = j
		}
	}
	if stop < 0 {
		return
	}
	// Autograd packs saved inputs before the kernel and saved outputs after
	// it. When the last tensor to pack is an input, the early stop fires
	// before the last op allocates anything but its autocast casts.
	last := ch.nodes[stop]
	nodes := ch.nodes[:stop+1]
	if kindRules[cp.kind[last]].stopsEarly {
		nodes = ch.nodes[:stop]
	}
	vst, cast, casts, node := cp.vst, cp.fw.cast, cp.fw.casts, cp.node
	cp.vst = append([]int32(nil), vst...)
	cp.fw.cast = make([]int32, len(cast))
	for i := range cp.fw.cast {
		cp.fw.cast[i] = -1
	}
	cp.fw.casts = nil
	cp.phase = Recompute
	f := cp.fw.newFwd(ch.nodes[:stop+1]) // the last op's reads count even when it stops early
	for _, v := range ch.inputs {
		f.keep[v] = true
	}
	// A value that a node after the stop reads is still referenced when
	// the stop unwinds the function: by a local of a module that has not
	// returned (a two-branch block's first branch, until the concat that
	// joins them) or by the layer loop's list.
	for _, i := range ch.nodes[stop+1:] {
		for _, v := range cp.readsOf(i) {
			f.pending[v]++
		}
	}
	for _, i := range nodes {
		cp.fw.step(f, i)
	}
	if len(nodes) == stop {
		cp.node, cp.fw.stopAt = last, last
		cp.fw.run(&cp.g.Nodes[last], cp.kind[last])
		cp.fw.stopAt = -1
	}
	// The unwinding frees the running modules' locals first, innermost
	// (the latest made) first, then what the layer loop's list holds.
	for v := len(f.alive) - 1; v >= 0; v-- {
		if f.alive[v] && f.holds[v] == 0 {
			f.alive[v] = false
			cp.unref(cp.vst[v])
		}
	}
	for v, alive := range f.alive {
		if alive {
			f.alive[v] = false
			cp.unref(cp.vst[v])
		}
	}
	cp.fw.exitAutocast()
	cp.vst, cp.fw.cast, cp.fw.casts, cp.node = vst, cast, casts, node
	cp.phase = Backward
}

// firstSaver returns chunk c's first node that saved a tensor, or -1.
func (cp *checkpoints) firstSaver(c int) int32 {
	for _, i := range cp.chunks[c].nodes {
		if cp.hadSave[i] {
			return i
		}
	}
	return -1
}

// releaseFrame drops the references that chunk c's checkpoint frame holds on
// its inputs. The frame lives as long as a saved tensor's unpack hook does:
// until the range's first node that saved a tensor has released it.
func (cp *checkpoints) releaseFrame(c int) {
	if cp.chunks[c].released {
		return
	}
	cp.chunks[c].released = true
	for _, v := range cp.chunks[c].inputs {
		cp.unref(cp.vst[v])
	}
}
