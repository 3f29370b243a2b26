// Finding a node's top-level layer from the names exporters leave behind.
//
// TorchScript exports name nodes after the module path: "/model.3/cv1/conv/Conv"
// is in layer 3. Dynamo exports name nodes "node_Conv_3931" and put the module
// path in the node's metadata_props instead ("namespace" and
// "pkg.torch.onnx.name_scopes", holding "model.3"); the ONNX binding predates
// that field, so it is read from the node's unknown fields. The sources, in
// order: the node name, that metadata, the node's output names (TorchScript's
// deduplicated-weight Identity nodes write "model.22.cv3.0.0.conv.bias"), the
// names of initializers the node reads ("model.3.cv1.conv.weight"), and last, for
// a dynamo node that an optimizer made and left without metadata, the layer of
// the node that produces its first input.

package ir

import (
	"github.com/advancedclimatesystems/gonnx/onnx"
	"google.golang.org/protobuf/encoding/protowire"
)

// nodeMetadataField is NodeProto.metadata_props (onnx.proto, ONNX 1.16+).
const nodeMetadataField = 9

// nodeLayer returns the layer of node n (see the file comment), or -1. Nodes
// before n must already have theirs.
func nodeLayer(g *Graph, n *Node, pn *onnx.NodeProto) int {
	if l := layerIn(n.Name); l >= 0 {
		return l
	}
	if l := metadataLayer(pn.ProtoReflect().GetUnknown()); l >= 0 {
		return l
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

// metadataLayer finds the layer in a node's metadata_props entries, given the
// node's unknown-field bytes.
func metadataLayer(b []byte) int {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return -1
		}
		b = b[n:]
		if num != nodeMetadataField || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return -1
			}
			b = b[n:]
			continue
		}
		entry, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return -1
		}
		b = b[n:]
		key, value := stringPair(entry)
		if key == "namespace" || key == "pkg.torch.onnx.name_scopes" {
			if l := layerIn(value); l >= 0 {
				return l
			}
		}
	}
	return -1
}

// stringPair decodes a StringStringEntryProto (key = 1, value = 2).
func stringPair(b []byte) (key, value string) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return key, value
		}
		s, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return key, value
		}
		b = b[n+m:]
		switch num {
		case 1:
			key = string(s)
		case 2:
			value = string(s)
		}
	}
	return key, value
}

// layerIn returns i for the first "model.i" in s that starts s or follows one of
// "/' :[" and is followed by the end of s or one of "./':,]", or -1.
func layerIn(s string) int {
	const prefix = "model."
	for at := 0; at+len(prefix) < len(s); at++ {
		if s[at:at+len(prefix)] != prefix || (at > 0 && !isSep(s[at-1])) {
			continue
		}
		i, l := at+len(prefix), 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' && l < 1e6 {
			l = 10*l + int(s[i]-'0')
			i++
		}
		if i > at+len(prefix) && (i == len(s) || isSep(s[i]) || s[i] == '.') {
			return l
		}
	}
	return -1
}

// isSep reports whether c may delimit a "model.i" path element.
func isSep(c byte) bool {
	switch c {
	case '/', '\'', ' ', ':', '[', ']', ',', '"':
		return true
	}
	return false
}
