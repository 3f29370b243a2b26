// Finding a node's top-level layer from the names exporters leave behind.
//
// TorchScript exports name nodes after the module path: "/backbone/3/conv/Conv"
// is in the module backbone.3. Dynamo exports name nodes "node_Conv_3931" and
// put the module path in the node's metadata_props instead ("namespace" and
// "pkg.torch.onnx.name_scopes", holding "backbone.3"), which Load keeps in
// Node.Scopes. The sources, in order: the node name, those scopes, the node's
// output names (TorchScript's deduplicated-weight Identity nodes write
// "backbone.3.conv.bias"), the names of initializers the node reads
// ("backbone.3.conv.weight"), and last, for a dynamo node that an optimizer
// made and left without metadata, the layer of the node that produces its
// first input. Which module path makes a top-level layer, and its index, is
// the model family's to say: AssignLayers takes it as a function.

package ir

import "github.com/onnxmem/onnxmem/internal/onnx"

// AssignLayers sets the Layer of every node, in node order, from the names
// exporters leave behind (see the file comment). layerIn finds the layer in
// one such string and returns it, or -1 when the string names none; a model
// family supplies it, since each family names its top-level layers its own way.
// A node that no source places keeps layer -1.
func (g *Graph) AssignLayers(layerIn func(string) int) {
	for i := range g.Nodes {
		g.Nodes[i].Layer = nodeLayer(g, &g.Nodes[i], layerIn)
	}
}

// nodeLayer returns the layer of node n (see the file comment), or -1. Nodes
// before n must already have theirs.
func nodeLayer(g *Graph, n *Node, layerIn func(string) int) int {
	if l := layerIn(n.Name); l >= 0 {
		return l
	}
	for _, s := range n.Scopes {
		if l := layerIn(s); l >= 0 {
			return l
		}
	}
	for _, o := range n.Outputs {
		if o != NoValue {
			if l := layerIn(g.Values[o].Name); l >= 0 {
				return l
			}
		}
	}
	for _, in := range n.Inputs {
		if in != NoValue && g.Values[in].Kind == Initializer {
			if l := layerIn(g.Values[in].Name); l >= 0 {
				return l
			}
		}
	}
	if len(n.Inputs) > 0 && n.Inputs[0] != NoValue {
		if p := g.Values[n.Inputs[0]].Producer; p >= 0 && p < n.ID {
			return g.Nodes[p].Layer
		}
	}
	return -1
}

// metadataScopes returns the module paths in a node's metadata_props
// entries ("namespace" and "pkg.torch.onnx.name_scopes"), in file order.
func metadataScopes(pn *onnx.NodeProto) []string {
	var out []string
	for _, e := range pn.GetMetadataProps() {
		if k := e.GetKey(); k == "namespace" || k == "pkg.torch.onnx.name_scopes" {
			out = append(out, e.GetValue())
		}
	}
	return out
}
