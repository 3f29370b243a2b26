package yolov9

import (
	"strings"

	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// Holds returns what YOLOv9's Python forward keeps alive beyond each op's
// reads (schedule.Holder):
//
//   - _forward_once (models/yolo.py) runs model.model as a layer loop,
//     x = m(x), and keeps in y the outputs of the layers in model.save, the
//     ones a later layer reads (schedule.Flow.LayerLoop), among them every
//     input of the detection head, which names them by index (headInputs).
//   - Every module keeps its forward's arguments until it returns
//     (schedule.Flow.ArgumentHolds).
//   - ADown's x = avg_pool2d(x, 2, 1, 0, False, True); x1, x2 = x.chunk(2, 1)
//     keeps the pooled map, a local variable, until ADown returns, after its
//     convs and cat; it shows where nothing saves it (checkpointed ranges,
//     no_grad).
//   - The ELAN idiom of RepNCSPELAN4 and its kin: y = list(self.cv1(x).chunk(2, 1));
//     y.extend(m(y[-1]) for m in [self.cv2, self.cv3]); return self.cv4(torch.cat(y, 1)).
//     The list y keeps every part of a concat of three or more tensors until
//     the module returns, past the convs that follow.
//   - CBFuse does the same with torch.stack(res + xs[-1:]): res, the list of
//     upsampled maps, lives until the module returns, past the sum.
//
// Per node the holds are listed in that order, ADown's local first: a
// frame's holds end innermost first.
func (Family) Holds(f *schedule.Flow) *schedule.Holds {
	g := f.Graph()
	h := &schedule.Holds{Until: make([][]schedule.Hold, len(g.Nodes)), InPlace: inPlaceSiLU(f)}
	f.LayerLoop(h)
	headInputs(f, h)
	last := f.LastInScope()
	args := f.ArgumentHolds(last)
	for i := range g.Nodes {
		id := int32(i)
		if !f.Runs(id) {
			continue
		}
		n := &g.Nodes[i]
		sc := schedule.ScopeOf(n.Name)
		if n.OpType == "Slice" || n.OpType == "Split" {
			for _, v := range f.Reads(id) {
				if p := g.Values[v].Producer; p >= 0 && schedule.ScopeOf(g.Nodes[p].Name) == sc && sc != "" {
					if end := last[sc]; end > id {
						h.Until[i] = append(h.Until[i], schedule.Hold{V: v, End: end})
					}
				}
			}
		}
		h.Until[i] = append(h.Until[i], args[i]...)
		if end := listEnd(f, id); end >= 0 {
			for _, v := range f.Reads(id) {
				h.Until[i] = append(h.Until[i], schedule.Hold{V: v, End: end})
			}
		}
	}
	return h
}

// inPlaceSiLU says, by node, which ops run in place: every SiLU whose input
// nothing else reads. Model.__init__ (models/yolo.py) calls
// initialize_weights (utils/torch_utils.py), which sets inplace = True on
// every nn.SiLU of the model, so a Conv's act(bn(conv(x))) overwrites the
// batch norm's output, and RepConvN's act(conv1(x) + conv2(x)) the sum.
// The ONNX export cannot say so: torch.onnx writes silu_ and silu alike.
func inPlaceSiLU(f *schedule.Flow) []bool {
	g := f.Graph()
	ip := make([]bool, len(g.Nodes))
	for i := range g.Nodes {
		if _, silu := f.SiLU(int32(i)); silu {
			_, ip[i] = f.Overwritable(int32(i))
		}
	}
	return ip
}

// headInputs holds the detection head's inputs to the end of the forward:
// the head (the last layer) names them by index in every YOLOv9 and GELAN
// configuration ([28, 25, 22, 15, 18, 21], never -1), so parse_model lists
// each in model.save and _forward_once keeps it in y until the forward
// returns, through the eval head's decode. LayerLoop alone would free the
// one of the layer just before the head when the head's last op returns
// (measured: yolov9-t's eval step, calibration/eval_step.py).
func headInputs(f *schedule.Flow, h *schedule.Holds) {
	g := f.Graph()
	head := -1
	for i := range g.Nodes {
		head = max(head, g.Nodes[i].Layer)
	}
	for v := range g.Values {
		p := g.Values[v].Producer
		if !f.Data(ir.ValueID(v)) || p < 0 || g.Nodes[p].Layer < 0 || g.Nodes[p].Layer == head {
			continue
		}
		for _, c := range g.Values[v].Consumers {
			if g.Nodes[c].Layer == head && !f.Meta(c) {
				h.LayerEnd[v] = schedule.HoldToEnd
			}
		}
	}
}

// listEnd returns, for a concat whose parts a module's list holds (three or
// more data inputs, or a torch.stack), the module's last node; else -1.
func listEnd(f *schedule.Flow, i int32) int32 {
	g := f.Graph()
	n := &g.Nodes[i]
	if n.OpType != "Concat" || (f.DataInputs(i) < 3 && !isStack(g, n)) {
		return -1
	}
	scope := schedule.ScopeOf(n.Name)
	if scope == "" {
		return -1
	}
	end := int32(-1)
	for j := int(i) + 1; j < len(g.Nodes); j++ {
		if !f.Meta(int32(j)) && strings.HasPrefix(g.Nodes[j].Name, scope) {
			end = int32(j)
		}
	}
	if end > i {
		return end
	}
	return -1
}

// isStack reports whether n is torch.stack as exported: a Concat of
// Unsqueeze outputs along the new axis.
func isStack(g *ir.Graph, n *ir.Node) bool {
	for _, v := range n.Inputs {
		if v == ir.NoValue {
			return false
		}
		if p := g.Values[v].Producer; p < 0 || g.Nodes[p].OpType != "Unsqueeze" {
			return false
		}
	}
	return len(n.Inputs) > 0
}
