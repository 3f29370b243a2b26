package schedule

import (
	"strings"

	"github.com/onnxmem/onnxmem/ir"
)

// What the Python code of a forward keeps alive, beyond what each op reads.
//
// Eager PyTorch frees a tensor when its last Python reference goes. Autograd's
// saved tensors are one kind of reference (the op rules say which); the
// model's own Python code holds the others: a layer loop's variables, the
// arguments of a module's forward until it returns, a list that a module
// builds. Those depend on the model's source, so a model family says what
// they are (a Holder); this file gives the generic pieces that families
// assemble:
//
//   - Flow.LayerLoop: a forward that runs its top-level layers one after the
//     other as x = layer(x), keeping in a list the outputs that a later layer
//     reads. Layer 2's output, read by layers 3 and 7, stays to the end of the
//     forward; layer 3's, read only by layer 4, goes once layer 4 has run.
//   - Flow.ArgumentHolds: a module's forward keeps its arguments until it
//     returns. In a block "/b.1/cv1/conv/Conv" … "/b.1/cv3/act/Mul" that
//     reads the output of "/b.0/…", that output lives until "/b.1/cv3/act/Mul"
//     has run, even when cv1 was its last reader.

// The special values of Holds.LayerEnd.
const (
	// HoldNone means the layer loop keeps no reference to the value.
	HoldNone = -1
	// HoldToEnd means the loop keeps the value to the end of the forward.
	HoldToEnd = -2
)

// Holds is what the Python code of a forward keeps alive beyond each op's own
// reads.
type Holds struct {
	// LayerEnd is, by value, the top-level layer after whose forward the
	// layer loop drops its reference, HoldNone or HoldToEnd.
	LayerEnd []int
	// LastUse is, by value, the last top-level layer that reads it, or -1.
	// A checkpointed range returns only what a layer after it reads, so a
	// value held to the end of the forward but read only inside its range
	// goes when the range returns.
	LastUse []int
	// Until lists, by node, references that the node's run takes and that
	// last until another node has run: a module's arguments, the list of a
	// module that has not returned. They end innermost first: in reverse
	// order of the list.
	Until [][]Hold
	// InPlace is, by node, whether the op runs in place on its first data
	// input: relu_, hardswish_, dropout_, add_ (x += y), as the model's
	// Python code chooses (nn.ReLU(inplace=True), out += identity) and the
	// graph does not record. nil means that no op runs in place. Build
	// accepts it only for ops with an in-place form (Relu, Sigmoid,
	// HardSwish, HardSigmoid, Dropout, Add), and only where that input is an
	// activation that no other op reads, of the output's shape.
	InPlace []bool
}

// Hold keeps value V alive until node End has run.
type Hold struct {
	V   ir.ValueID
	End int32
}

// A Holder says what a model family's forward keeps alive. Build calls Holds
// once per program, before the forward; f is valid only during the call.
type Holder interface {
	Holds(f *Flow) *Holds
}

// LayerLoop sets h.LayerEnd and h.LastUse for a forward that runs the
// top-level layers in order, x = layer(x): a layer's output is a data value
// that another layer reads. The loop keeps it in x until the next layer has
// run, and in its list of saved outputs to the end of the forward when a
// later layer reads it.
func (f *Flow) LayerLoop(h *Holds) {
	g := f.graph
	h.LayerEnd, h.LastUse = make([]int, len(g.Values)), make([]int, len(g.Values))
	for i := range h.LayerEnd {
		h.LayerEnd[i], h.LastUse[i] = HoldNone, -1
	}
	for v := range g.Values {
		if !f.data[v] || g.Values[v].Producer < 0 {
			continue
		}
		l := g.Nodes[g.Values[v].Producer].Layer
		if l < 0 {
			continue
		}
		for _, c := range g.Values[v].Consumers {
			cl := g.Nodes[c].Layer
			if cl == l || cl < 0 || f.Meta(c) {
				// A reader outside every layer is the forward's own code
				// (ViT's torch.cat of its class token and the patches):
				// x = cat(...) drops the layer's output when it runs.
				continue
			}
			h.LastUse[v] = max(h.LastUse[v], cl)
			end := l + 1
			if cl > end {
				end = HoldToEnd
			}
			if h.LayerEnd[v] != HoldToEnd && (end == HoldToEnd || end > h.LayerEnd[v]) {
				h.LayerEnd[v] = end
			}
		}
	}
}

// ScopeOf returns the module path of a node name: "/b.3/cv1/conv/Conv" →
// "/b.3/cv1/conv/".
func ScopeOf(name string) string {
	return name[:strings.LastIndexByte(name, '/')+1]
}

// LastInScope returns, for every module path that a running node's name
// lies in ("/b.3/", "/b.3/cv1/", …), the last such node.
func (f *Flow) LastInScope() map[string]int32 {
	g := f.graph
	last := make(map[string]int32)
	for i := range g.Nodes {
		if !f.Runs(int32(i)) {
			continue
		}
		sc := ScopeOf(g.Nodes[i].Name)
		for j := 1; j < len(sc); j++ {
			if sc[j] == '/' {
				last[sc[:j+1]] = int32(i)
			}
		}
	}
	return last
}

// ArgumentHolds finds, for each read of each running node, the outermost
// module on the reader's call stack that does not contain the producer: the
// value is that module's argument, and lives until the module's last op.
// last is LastInScope's map.
func (f *Flow) ArgumentHolds(last map[string]int32) [][]Hold {
	g := f.graph
	out := make([][]Hold, len(g.Nodes))
	for i := range g.Nodes {
		if !f.Runs(int32(i)) {
			continue
		}
		sc := ScopeOf(g.Nodes[i].Name)
		for _, v := range f.Reads(int32(i)) {
			from := ""
			if p := g.Values[v].Producer; p >= 0 {
				from = ScopeOf(g.Nodes[p].Name)
			}
			for j := 1; j < len(sc); j++ {
				if sc[j] != '/' {
					continue
				}
				if pre := sc[:j+1]; !strings.HasPrefix(from, pre) {
					if end := last[pre]; end > int32(i) {
						out[i] = append(out[i], Hold{v, end})
					}
					break
				}
			}
		}
	}
	return out
}

// layerHolds is the Holder of a forward with a layer loop and no other
// holds.
type layerHolds struct{}

func (layerHolds) Holds(f *Flow) *Holds {
	h := &Holds{Until: make([][]Hold, len(f.Graph().Nodes))}
	f.LayerLoop(h)
	return h
}

// LayerLoopOnly is the Holder of a forward that keeps nothing but the layer
// loop's references (Flow.LayerLoop). Build uses it when Config.Holder is
// nil.
var LayerLoopOnly Holder = layerHolds{}
