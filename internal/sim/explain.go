package sim

import (
	"cmp"
	"slices"
	"strings"

	"github.com/onnxmem/onnxmem/schedule"
)

// Explain says what makes a step's peak: the bytes alive at the peak by
// what they are and by the top-level layer that made them, and the tensors
// that cost most with the op that made each.
//
// Worked example: a 25 M-parameter detector's train step at batch 16
// under AMP peaks in its loss, at 16.75 GiB. Its by-kind list reads the
// activations first (14.98 GiB), then the autocast copies and the loss's
// tensors (0.49 and 0.48 GiB), the parameters, the EMA copy and the
// momentum (0.19 GiB each), the allocator's slack (0.12 GiB: what blocks
// that the caching allocator did not split hold beyond their requests),
// the input batch and the cuBLAS workspace. The kinds sum to the peak
// exactly; the layers sum to it too, with the buffers that no layer
// made (the input, the loop's tensors, the slack) under layer -1.
type Explanation struct {
	Result *Result
	// Peak is Result.Peak, the allocated peak.
	Peak int64
	// ByKind is the bytes alive at the peak by kind, largest first; the
	// kinds are those of ExplainKinds, and they sum to Peak.
	ByKind []KindBytes
	// ByLayer is the bytes alive at the peak by top-level layer, in layer
	// order, the layer -1 (none) first; they sum to Peak.
	ByLayer []LayerBytes
	// Largest are the largest tensors alive at the peak, largest first.
	Largest []Tensor
}

// LayerBytes is the bytes of one top-level layer's buffers.
type LayerBytes struct {
	// Layer is the top-level layer's index, or -1 for buffers that no
	// layer made; Name the name of its first node's module path, or "".
	Layer int
	Name  string
	Bytes int64
	Count int
}

// The kinds of Explanation.ByKind.
const (
	KindParameters  = "parameters"       // the model's parameters and buffers
	KindCopy        = "model copy"       // the EMA copy of a train step, the half copy of an eval step
	KindState       = "optimizer state"  // momentum, Adam's moments
	KindGradients   = "gradients"        // the parameters' .grad
	KindActivations = "activations"      // op outputs, saved or not, and what ops save beside them
	KindActGrads    = "activation grads" // the backward's gradients of activations
	KindCasts       = "autocast copies"  // autocast's float16 copies of weights and inputs
	KindCopies      = "kernel copies"    // contiguous copies that kernels make of strided inputs
	KindLoss        = "loss"             // what the loss allocates (assigner, decoded boxes, terms)
	KindWorkspaces  = "workspaces"       // cuDNN and cuBLAS workspaces
	KindInput       = "input"            // the batch
	KindLoop        = "loop tensors"     // the training loop's small tensors, the eval head's anchors
	KindSlack       = "allocator slack"  // what unsplit blocks hold beyond their requests
)

// ExplainKinds lists the kinds of Explanation.ByKind.
func ExplainKinds() []string {
	return []string{KindParameters, KindCopy, KindState, KindGradients, KindActivations, KindActGrads, KindCasts,
		KindCopies, KindLoss, KindWorkspaces, KindInput, KindLoop, KindSlack}
}

// Explain simulates a scenario and explains its peak.
func (m *Model) Explain(sc Options) (*Explanation, error) {
	p, err := m.program(sc)
	if err != nil {
		return nil, err
	}
	r, an := run(p, sc, nil, nil)
	ex := &Explanation{Result: r, Peak: r.Peak, Largest: r.AtPeak}
	if r.PeakEvent < 0 {
		// The peak is before the step's first event: what is resident.
		r.PeakEvent = -1
	}
	role := make([]schedule.Role, len(p.Buffers))
	resident := make([]bool, len(p.Buffers))
	for i, b := range p.Resident {
		role[b], resident[b] = p.ResidentRoles[i], true
	}
	lossBuf := make([]bool, len(p.Buffers))
	for _, e := range p.Events {
		if !e.Free && e.Phase == schedule.LossPhase {
			lossBuf[e.Buf] = true
		}
	}
	// A resident parameter belongs to the layer of the first node that
	// reads it.
	layerOfValue := make(map[int32]int, len(p.Graph.Nodes))
	for i := range p.Graph.Nodes {
		n := &p.Graph.Nodes[i]
		for _, v := range n.Inputs {
			if _, ok := layerOfValue[int32(v)]; !ok && v >= 0 {
				layerOfValue[int32(v)] = n.Layer
			}
		}
	}
	kinds := map[string]*KindBytes{}
	layers := map[int]*LayerBytes{}
	var live int64
	for b := range p.Buffers {
		buf := int32(b)
		if !an.Live(buf, r.PeakEvent) {
			continue
		}
		size := an.Size(buf)
		live += size
		k := explainKind(p.Buffers[b], resident[b], role[b], lossBuf[b])
		kb := kinds[k]
		if kb == nil {
			kb = &KindBytes{Kind: k}
			kinds[k] = kb
		}
		kb.Bytes += size
		kb.Count++
		layer := -1
		switch {
		case p.Buffers[b].Node >= 0:
			layer = p.Graph.Nodes[p.Buffers[b].Node].Layer
		case resident[b] && p.Buffers[b].Value >= 0:
			if l, ok := layerOfValue[int32(p.Buffers[b].Value)]; ok {
				layer = l
			}
		}
		lb := layers[layer]
		if lb == nil {
			lb = &LayerBytes{Layer: layer}
			layers[layer] = lb
		}
		lb.Bytes += size
		lb.Count++
	}
	if slack := r.Peak - live; slack != 0 {
		kinds[KindSlack] = &KindBytes{Kind: KindSlack, Bytes: slack}
		lb := layers[-1]
		if lb == nil {
			lb = &LayerBytes{Layer: -1}
			layers[-1] = lb
		}
		lb.Bytes += slack
	}
	for _, k := range ExplainKinds() {
		if kb := kinds[k]; kb != nil {
			ex.ByKind = append(ex.ByKind, *kb)
		}
	}
	slices.SortStableFunc(ex.ByKind, func(a, b KindBytes) int { return cmp.Compare(b.Bytes, a.Bytes) })
	names := layerNames(p)
	for l := -1; l < len(names); l++ {
		if lb := layers[l]; lb != nil {
			if l >= 0 {
				lb.Name = names[l]
			}
			ex.ByLayer = append(ex.ByLayer, *lb)
		}
	}
	return ex, nil
}

// explainKind returns the Explanation kind of a buffer.
func explainKind(b schedule.Buffer, resident bool, role schedule.Role, loss bool) string {
	if resident {
		switch role {
		case schedule.RoleModel:
			return KindParameters
		case schedule.RoleCopy:
			return KindCopy
		case schedule.RoleState:
			return KindState
		case schedule.RoleWorkspace:
			return KindWorkspaces
		default:
			return KindLoop
		}
	}
	switch b.Kind {
	case schedule.Input:
		return KindInput
	case schedule.ParamGrad:
		return KindGradients
	case schedule.Grad:
		if b.Value < 0 && loss {
			return KindLoss
		}
		return KindActGrads
	case schedule.Cast:
		return KindCasts
	case schedule.Copy:
		return KindCopies
	case schedule.Workspace:
		return KindWorkspaces
	case schedule.Param:
		return KindLoop
	}
	if loss {
		return KindLoss
	}
	if b.Kind == schedule.Scalar {
		return KindLoop
	}
	return KindActivations
}

// layerNames returns, by top-level layer, the module path of its first
// node (modulePath).
func layerNames(p *schedule.Program) []string {
	var names []string
	for i := range p.Graph.Nodes {
		n := &p.Graph.Nodes[i]
		if n.Layer < 0 {
			continue
		}
		for len(names) <= n.Layer {
			names = append(names, "")
		}
		if names[n.Layer] == "" {
			names[n.Layer] = modulePath(n.Name)
		}
	}
	return names
}

// modulePath returns the first element of an exporter's node name
// ("/layer1/0/conv1/Conv" gives "layer1", "/net.3/cv1/Conv" "net.3"), or
// its first two when the second is an index ("/features/3/block/0/Conv"
// gives "features/3").
func modulePath(name string) string {
	parts := slices.DeleteFunc(strings.Split(name, "/"), func(s string) bool { return s == "" })
	switch {
	case len(parts) == 0:
		return name
	case len(parts) > 1 && strings.Trim(parts[1], "0123456789") == "":
		return parts[0] + "/" + parts[1]
	}
	return parts[0]
}
