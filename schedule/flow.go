package schedule

import (
	"fmt"
	"slices"

	"github.com/onnxmem/onnxmem/ir"
)

// Flow is the dataflow that Build sees in a graph: which values hold device
// data and which nodes run as eager ops, and what each one reads. It depends
// on the graph and its element types alone, not on the sizes.
type Flow struct {
	graph  *ir.Graph
	shapes *ir.Shapes
	data   []bool // by value: holds device data
	param  []bool // by value: a float initializer owned by the model
	buffer []bool // by value: a buffer owned by the model that is no parameter (indexBuffer, linearInput, maskBuffer)
	// copies counts, by value, the modules that hold a buffer of their own
	// that the export inlined as one shared constant (maskBuffer); 0 or 1
	// means one.
	copies []int
	plans  map[int32]einsumPlan // by node: how an Einsum or MatMul runs as bmm
	kind   []ir.Eager           // by node
	class  []ir.Autocast        // by node: its op's autocast class
	siluIn []ir.ValueID         // by node: the input of a fused SiLU
	// gnReshape reports by node the two Reshapes around an exported
	// GroupNorm's InstanceNormalization (groupNorms), which eager PyTorch
	// never runs; nil when the graph has none.
	gnReshape []bool
	// reads caches readsOf by node (nil: not known yet); the lists share
	// arena's backing array.
	reads [][]ir.ValueID
	arena []ir.ValueID
}

// Graph returns the graph.
func (f *Flow) Graph() *ir.Graph { return f.graph }

// Shapes returns the shapes the program is built at.
func (f *Flow) Shapes() *ir.Shapes { return f.shapes }

// Data reports whether value v holds device data: an activation or the
// input, not a parameter nor shape arithmetic.
func (f *Flow) Data(v ir.ValueID) bool { return v != ir.NoValue && f.data[v] }

// Meta reports whether node i is shape arithmetic, which eager PyTorch runs
// on Python integers.
func (f *Flow) Meta(i int32) bool { return f.kind[i] == ir.EagerMeta }

// Runs reports whether node i runs as an eager op of its own: it is neither
// shape arithmetic nor absorbed into a neighbour (the Sigmoid of a SiLU).
func (f *Flow) Runs(i int32) bool { return f.kind[i].RunsOnData() }

// SiLU reports whether node i is a fused SiLU (a Mul of x and sigmoid(x),
// one eager kernel) and returns its input x.
func (f *Flow) SiLU(i int32) (ir.ValueID, bool) {
	if f.kind[i] != ir.EagerSiLU {
		return ir.NoValue, false
	}
	return f.siluIn[i], true
}

// Overwritable returns the value that an in-place form of node i would
// overwrite, its first data input (a fused SiLU's x), and reports whether
// nothing else needs it: an op produced it, it is not a graph output, the
// node reads it once, and no other running node reads it.
func (f *Flow) Overwritable(i int32) (ir.ValueID, bool) {
	g := f.graph
	x, others := f.overwrites(i)
	if !f.Data(x) {
		return ir.NoValue, false
	}
	if g.Values[x].Producer < 0 || slices.Contains(g.Outputs, x) || slices.Contains(others, x) {
		return x, false
	}
	for _, c := range g.Values[x].Consumers {
		if c != i && f.Runs(c) {
			return x, false
		}
	}
	return x, true
}

// overwrites returns the input that an in-place form of node i writes
// into, and its other inputs (ir.NoValue when it has none).
func (f *Flow) overwrites(i int32) (x ir.ValueID, others []ir.ValueID) {
	n := &f.graph.Nodes[i]
	switch {
	case f.kind[i] == ir.EagerSiLU:
		// The Mul of x and sigmoid(x): the Sigmoid, fused into it, does
		// not run.
		return f.siluIn[i], nil
	case len(n.Inputs) == 0:
		return ir.NoValue, nil
	}
	return n.Inputs[0], n.Inputs[1:]
}

// Reads lists the distinct data values that node i reads, in input order.
func (f *Flow) Reads(i int32) []ir.ValueID { return f.readsOf(i) }

// DataInputs counts the data values among node i's inputs, repeats included.
func (f *Flow) DataInputs(i int32) int { return f.dataInputs(&f.graph.Nodes[i]) }

// markParams marks the float initializers that data ops read: the model's
// parameters and buffers.
func (f *Flow) markParams() {
	for i := range f.graph.Values {
		v := &f.graph.Values[i]
		if v.Kind == ir.Initializer && isFloat(v.DType) && v.Data == nil && v.Floats == nil {
			f.param[i] = true
		} else if v.Kind == ir.Initializer && isFloat(v.DType) && len(v.Dims) > 0 {
			// Small float initializers with data are still weights when they
			// feed a Conv, BatchNormalization or Gemm.
			for _, c := range v.Consumers {
				switch f.graph.Nodes[c].OpType {
				case "Conv", "BatchNormalization", "Gemm":
					f.param[i] = true
				}
			}
		}
	}
	// The values that depend on no graph input are the model's own (a
	// parameter's, or a table computed from parameters alone, as Swin V2's
	// relative position bias MLP).
	fromInput := f.graph.FromInputs()
	for i := range f.graph.Values {
		f.buffer[i] = f.indexBuffer(ir.ValueID(i), fromInput) || f.maskBuffer(ir.ValueID(i), fromInput)
		if f.param[i] && f.linearInput(ir.ValueID(i)) {
			// A float table a linear reads, such as Swin V2's
			// relative_coords_table (register_buffer): resident, but
			// no parameter, so it gets no gradient.
			f.param[i], f.buffer[i] = false, true
		}
	}
}

// linearInput reports whether initializer v is a table that a small
// network of the model reads to make another table, which an integer
// buffer then indexes: Swin V2's relative_coords_table, the input of its
// bias MLP (linear, ReLU, linear) whose output a Gather of
// relative_position_index reads. Every reader of v takes it as the input
// of a linear layer (Gemm's or MatMul's first operand), and the layer's
// output reaches such a Gather through single-reader ops. That makes v a
// buffer of the model, not a weight: it gets no gradient.
func (f *Flow) linearInput(v ir.ValueID) bool {
	g := f.graph
	cons := g.Values[v].Consumers
	for _, c := range cons {
		n := &g.Nodes[c]
		if (n.OpType != "Gemm" && n.OpType != "MatMul") || n.Inputs[0] != v || len(n.Inputs) < 2 || !f.param[n.Inputs[1]] {
			return false
		}
		// Follow the table through single-reader ops to an indexing
		// Gather.
		t, found := n.Outputs[0], false
		for range 16 {
			next := g.Values[t].Consumers
			if len(next) != 1 {
				break
			}
			m := &g.Nodes[next[0]]
			if m.OpType == "Gather" && len(m.Inputs) == 2 && m.Inputs[0] == t {
				idx := &g.Values[m.Inputs[1]]
				found = idx.Kind == ir.Initializer && !isFloat(idx.DType)
				break
			}
			if len(m.Outputs) != 1 {
				break
			}
			t = m.Outputs[0]
		}
		if !found {
			return false
		}
	}
	return len(cons) > 0
}

// fromParam reports whether value v is computed from a float initializer
// with no data (a parameter or a model buffer), not from constants alone.
func (f *Flow) fromParam(v ir.ValueID) bool {
	seen := map[ir.ValueID]bool{}
	var walk func(v ir.ValueID) bool
	walk = func(v ir.ValueID) bool {
		if v == ir.NoValue || seen[v] {
			return false
		}
		seen[v] = true
		val := &f.graph.Values[v]
		if val.Kind == ir.Initializer {
			return isFloat(val.DType) && val.Data == nil && val.Floats == nil
		}
		if val.Producer < 0 {
			return false
		}
		for _, in := range f.graph.Nodes[val.Producer].Inputs {
			if walk(in) {
				return true
			}
		}
		return false
	}
	return walk(v)
}

// indexBuffer reports whether value v is an integer buffer of the model
// that indexes a parameter: an integer initializer, or a Constant node's
// table, that a Gather of a parameter, or of a float table computed from
// parameters alone (Swin V2's bias MLP's output; fromInput false), takes as
// its indices, directly or through a reshape (the relative_position_index
// of Swin's and MaxViT's attention, a [49, 49] int64 each, which
// model.to() moves as it moves the parameters; TinyViT's and LeViT's
// attention_bias_idxs, registered with persistent=False, which the
// exporter writes as Constant nodes: calibration §30, their buffer bytes
// as measured). Other integer initializers are an exporter's shape
// constants.
func (f *Flow) indexBuffer(v ir.ValueID, fromInput []bool) bool {
	val := &f.graph.Values[v]
	if val.Kind != ir.Initializer && val.Kind != ir.Constant || isFloat(val.DType) {
		return false
	}
	var indexes func(v ir.ValueID, depth int) bool
	indexes = func(v ir.ValueID, depth int) bool {
		for _, c := range f.graph.Values[v].Consumers {
			n := &f.graph.Nodes[c]
			switch {
			case n.OpType == "Gather" && len(n.Inputs) == 2 && n.Inputs[1] == v &&
				(f.param[n.Inputs[0]] || !fromInput[n.Inputs[0]] && isFloat(f.shapes.DTypes[n.Inputs[0]]) && f.fromParam(n.Inputs[0])):
				return true
			case depth > 0 && len(n.Inputs) > 0 && n.Inputs[0] == v && len(n.Outputs) == 1:
				switch n.OpType {
				case "Reshape", "Flatten", "Squeeze", "Unsqueeze":
					if indexes(n.Outputs[0], depth-1) {
						return true
					}
				}
			}
		}
		return false
	}
	return indexes(v, 2)
}

// maskBuffer reports whether value v is a boolean or integer table of the
// model, a constant too large to be the exporter's shape arithmetic, that
// selects among activations: a torch.where condition, read directly or
// through slices and reshapes (GPT-Neo's causal mask, self.bias[:, :,
// k - q:k, :k] in each attention). Each module that reads it registered
// a buffer of its own (register_buffer with persistent=False, which the
// exporter inlines as a constant, one for equal tensors): f.copies
// counts the modules, by the distinct scopes of its direct readers, and
// the model holds that many (GPT-Neo's six 4 MiB masks are two constants
// of the export; its buffer_bytes, 25,165,824, calibration §37).
func (f *Flow) maskBuffer(v ir.ValueID, fromInput []bool) bool {
	val := &f.graph.Values[v]
	if val.Kind != ir.Initializer && val.Kind != ir.Constant || isFloat(val.DType) || val.Data != nil || len(val.Dims) == 0 {
		return false
	}
	var selects func(v ir.ValueID, depth int) bool
	selects = func(v ir.ValueID, depth int) bool {
		for _, c := range f.graph.Values[v].Consumers {
			n := &f.graph.Nodes[c]
			switch {
			case n.OpType == "Where" && len(n.Inputs) == 3 && n.Inputs[0] == v && (fromInput[n.Inputs[1]] || fromInput[n.Inputs[2]]):
				return true
			case depth > 0 && len(n.Inputs) > 0 && n.Inputs[0] == v && len(n.Outputs) == 1:
				switch n.OpType {
				case "Slice", "Reshape", "Unsqueeze", "Squeeze", "Cast", "Expand":
					if selects(n.Outputs[0], depth-1) {
						return true
					}
				}
			}
		}
		return false
	}
	if !selects(v, 3) {
		return false
	}
	var scopes []string
	for _, c := range val.Consumers {
		if sc := ScopeOf(f.graph.Nodes[c].Name); !slices.Contains(scopes, sc) {
			scopes = append(scopes, sc)
		}
	}
	if f.copies == nil {
		f.copies = make([]int, len(f.graph.Values))
	}
	f.copies[v] = len(scopes)
	return true
}

func (f *Flow) dataInputs(n *ir.Node) int {
	k := 0
	for _, v := range n.Inputs {
		if v != ir.NoValue && f.data[v] {
			k++
		}
	}
	return k
}

// readsOf lists the distinct data values that node i reads, in input order.
func (f *Flow) readsOf(i int32) []ir.ValueID {
	if f.reads == nil {
		f.reads = make([][]ir.ValueID, len(f.graph.Nodes))
		f.arena = make([]ir.ValueID, 0, 2*len(f.graph.Nodes)+8)
	}
	if r := f.reads[i]; r != nil {
		return r
	}
	start := len(f.arena)
	f.arena = f.computeReads(i, f.arena)
	r := f.arena[start:len(f.arena):len(f.arena)]
	f.reads[i] = r
	return r
}

// computeReads lists the distinct data values node i reads, appending to
// out.
func (f *Flow) computeReads(i int32, out []ir.ValueID) []ir.ValueID {
	n := &f.graph.Nodes[i]
	if f.kind[i] == ir.EagerSiLU {
		return append(out, f.siluIn[i])
	}
	start := len(out)
	for _, v := range n.Inputs {
		if v == ir.NoValue || !f.data[v] {
			continue
		}
		dup := false
		for _, u := range out[start:] {
			dup = dup || u == v
		}
		if !dup {
			out = append(out, v)
		}
	}
	return out
}

// noData marks value v as holding no device data, and forgets what its
// readers read.
func (f *Flow) noData(v ir.ValueID) {
	f.data[v] = false
	if f.reads == nil {
		return
	}
	for _, c := range f.graph.Values[v].Consumers {
		f.reads[c] = nil
	}
}

// classify decides the eager op of every node. data[v] reports whether value v
// holds device data (an activation or the input batch); param[v] whether it is
// a float initializer that the model owns.
func (f *Flow) classify() error {
	g := f.graph
	for i := range g.Nodes {
		n := &g.Nodes[i]
		hasData, floatData := false, false
		for _, v := range n.Inputs {
			if v != ir.NoValue && f.data[v] {
				hasData = true
				floatData = floatData || isFloat(f.shapes.DTypes[v])
			}
		}
		r, _ := ir.OpOf(n)
		// An op on token ids alone but a view of them or an embedding
		// (attention_mask.to(torch.bool), ids != pad) makes small integer
		// tensors of the batch's shape: counted as shape arithmetic.
		ints := hasData && !floatData && !intView(f, n, r) && !(n.OpType == "Gather" && embeddingCheck(f, n))
		if !hasData || r.Eager == ir.EagerMeta || ints {
			f.kind[i] = ir.EagerMeta
			continue
		}
		for _, v := range n.Outputs {
			if f.shapes.DTypes[v].Size() > 0 && (isFloat(f.shapes.DTypes[v]) || intView(f, n, r)) {
				f.data[v] = true
			}
		}
		k, err := f.opOf(n, r)
		if err != nil {
			return err
		}
		f.kind[i] = k
		f.class[i] = r.Autocast
	}
	// A Sigmoid whose only reader is a Mul of its own input is SiLU: eager
	// PyTorch runs one kernel and never stores the sigmoid.
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.OpType != "Sigmoid" || f.kind[i] == ir.EagerMeta {
			continue
		}
		s := n.Outputs[0]
		cons := g.Values[s].Consumers
		if len(cons) != 1 || g.Nodes[cons[0]].OpType != "Mul" {
			continue
		}
		m := &g.Nodes[cons[0]]
		x := n.Inputs[0]
		if (m.Inputs[0] == x && m.Inputs[1] == s) || (m.Inputs[1] == x && m.Inputs[0] == s) {
			f.kind[i] = ir.EagerSkip
			f.kind[cons[0]] = ir.EagerSiLU
			f.siluIn[cons[0]] = x
		}
	}
	f.groupNorms()
	return nil
}

// groupNorms finds the GroupNorms that torch.onnx exports as
//
//	Reshape(x, [N, G, -1]) → InstanceNormalization(·, ones, zeros) →
//	Reshape(·, shape(x)) → Mul(·, weight) → Add(·, bias)
//
// which eager PyTorch runs as one native_group_norm (its affine applied
// by the kernel to its own output): the InstanceNormalization runs as a
// layer norm over its last dim (the N·G rows' statistics, input saved,
// float32 under autocast, group_norm being on autocast's float32 list),
// and the Mul and the Add are the same tensor (EagerView). The weight's
// and bias's C-float gradients are not counted.
func (f *Flow) groupNorms() {
	g := f.graph
	only := func(v ir.ValueID, op string) int32 {
		cons := g.Values[v].Consumers
		if len(cons) != 1 || g.Nodes[cons[0]].OpType != op || g.Nodes[cons[0]].Inputs[0] != v {
			return -1
		}
		return cons[0]
	}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.OpType != "InstanceNormalization" || f.kind[i] != ir.EagerLayerNorm {
			continue
		}
		r2 := only(n.Outputs[0], "Reshape")
		if r2 < 0 {
			continue
		}
		mul := only(g.Nodes[r2].Outputs[0], "Mul")
		if mul < 0 || len(g.Nodes[mul].Inputs) != 2 || f.data[g.Nodes[mul].Inputs[1]] {
			continue
		}
		add := only(g.Nodes[mul].Outputs[0], "Add")
		if add < 0 || len(g.Nodes[add].Inputs) != 2 || f.data[g.Nodes[add].Inputs[1]] {
			continue
		}
		f.kind[mul], f.kind[add] = ir.EagerView, ir.EagerView
		if f.gnReshape == nil {
			f.gnReshape = make([]bool, len(g.Nodes))
		}
		f.gnReshape[r2] = true
		if p := g.Values[n.Inputs[0]].Producer; p >= 0 && g.Nodes[p].OpType == "Reshape" {
			f.gnReshape[p] = true
		}
	}
}

// opOf maps one data-carrying node to its eager op: its row r's kind, as
// the kind's check accepts or changes it.
func (f *Flow) opOf(n *ir.Node, r ir.Op) (ir.Eager, error) {
	if !r.Eager.RunsOnData() {
		return 0, unsupported(n)
	}
	if check := kindRules[r.Eager].check; check != nil {
		return check(f, n)
	}
	return r.Eager, nil
}

// intView reports whether node n, of row r, is a view of integer data
// (a reshape or unsqueeze of a language model's token ids), whose output
// then holds the ids too.
func intView(f *Flow, n *ir.Node, r ir.Op) bool {
	switch r.Eager {
	case ir.EagerView, ir.EagerReshape, ir.EagerFlatten:
		x := n.Inputs[0]
		return f.data[x] && !isFloat(f.shapes.DTypes[x])
	}
	return false
}

// unsupported is the error of a node whose op has no memory rule on
// tensor data.
func unsupported(n *ir.Node) error {
	return fmt.Errorf("schedule: node %s: unsupported op %s on activations: onnxmem has no autograd memory rule for it; export the training graph unfused (opset 17), or open an issue naming %s so its saved tensors can be added", n.Name, n.OpType, n.OpType)
}

// Drawn reports whether value v derives, within a few producers, from a
// random draw (RandomUniformLike, RandomNormalLike): torchvision's
// stochastic depth noise, drawn from shapes alone.
func (f *Flow) Drawn(v ir.ValueID) bool { return drawn(f.graph, v, 8) }

func drawn(g *ir.Graph, v ir.ValueID, depth int) bool {
	if v == ir.NoValue || depth == 0 {
		return false
	}
	p := g.Values[v].Producer
	if p < 0 {
		return false
	}
	switch g.Nodes[p].OpType {
	case "RandomUniformLike", "RandomNormalLike":
		return true
	}
	for _, x := range g.Nodes[p].Inputs {
		if drawn(g, x, depth-1) {
			return true
		}
	}
	return false
}
