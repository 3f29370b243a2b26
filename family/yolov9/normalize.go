package yolov9

import (
	"fmt"

	"github.com/onnxmem/onnxmem/ir"
)

// Normalize returns g with the eager structure that the exporter flattened
// restored, or g itself when there is nothing to restore.
//
// The one rewrite so far: nested concats. torch.onnx folds
// cat((cat((a, b), 1), c), 1) into one Concat of a, b and c. In YOLOv9 this
// happens when an ADown layer, which ends with cat((x1, x2), 1), feeds a
// Concat layer: the graph then shows a Concat of layer M that reads two
// values produced inside layer L. A top-level layer only sees another layer's
// output, so a run of two or more inputs from one other layer is that layer's
// own cat, which eager PyTorch allocates at the end of layer L. Normalize
// puts it back there.
//
// Example (yolov9-c, batch 8, 640): /model.18/Concat reads
// /model.17/cv1/act/Mul_output_0, /model.17/cv2/act/Mul_output_0 and the
// output of layer 13; eager PyTorch first allocates ADown's 13 MiB cat at the
// end of layer 17, then layer 18's 39 MiB cat.
func Normalize(g *ir.Graph) (*ir.Graph, error) {
	type group struct {
		node     int
		from, to int // input positions [from, to)
		layer    int
	}
	var groups []group
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.OpType != "Concat" || n.Layer < 0 {
			continue
		}
		layerOf := func(v ir.ValueID) int {
			if v == ir.NoValue || g.Values[v].Producer < 0 {
				return -1
			}
			return g.Nodes[g.Values[v].Producer].Layer
		}
		for j := 0; j < len(n.Inputs); {
			l := layerOf(n.Inputs[j])
			k := j + 1
			for k < len(n.Inputs) && layerOf(n.Inputs[k]) == l {
				k++
			}
			if l >= 0 && l != n.Layer && k-j >= 2 {
				groups = append(groups, group{node: i, from: j, to: k, layer: l})
			}
			j = k
		}
	}
	if len(groups) == 0 {
		return g, nil
	}
	ng := &ir.Graph{Name: g.Name, ProducerName: g.ProducerName, Opset: g.Opset,
		Values: append([]ir.Value(nil), g.Values...), Inputs: g.Inputs, Outputs: g.Outputs}
	// Where each restored cat goes: after the last node of its layer that
	// precedes the reader.
	after := make(map[int][]ir.Node)
	inputs := make([][]ir.ValueID, len(g.Nodes))
	for _, gr := range groups {
		n := &g.Nodes[gr.node]
		if inputs[gr.node] == nil {
			inputs[gr.node] = append([]ir.ValueID(nil), n.Inputs...)
		}
		last := -1
		for i := 0; i < gr.node; i++ {
			if g.Nodes[i].Layer == gr.layer {
				last = i
			}
		}
		if last < 0 {
			return nil, fmt.Errorf("yolov9: node %s: cannot place the concat of layer %d", n.Name, gr.layer)
		}
		name := fmt.Sprintf("/model.%d/Concat_restored_%d", gr.layer, len(ng.Values))
		v := ir.ValueID(len(ng.Values))
		ng.Values = append(ng.Values, ir.Value{ID: v, Name: name + "_output_0", Kind: ir.Activation, DType: g.Values[n.Inputs[gr.from]].DType})
		cat := ir.Node{Name: name, OpType: "Concat", Domain: n.Domain, Layer: gr.layer,
			Inputs: append([]ir.ValueID(nil), n.Inputs[gr.from:gr.to]...), Outputs: []ir.ValueID{v}, Attrs: n.Attrs}
		after[last] = append(after[last], cat)
		// The reader now takes the restored cat in place of the run.
		in := inputs[gr.node]
		for p := gr.from; p < gr.to; p++ {
			in[p] = ir.NoValue
		}
		in[gr.from] = v
	}
	for i := range g.Nodes {
		n := g.Nodes[i]
		if inputs[i] != nil {
			var in []ir.ValueID
			for _, v := range inputs[i] {
				if v != ir.NoValue {
					in = append(in, v)
				}
			}
			n.Inputs = in
		}
		ng.Nodes = append(ng.Nodes, n)
		ng.Nodes = append(ng.Nodes, after[i]...)
	}
	if err := ng.Reindex(); err != nil {
		return nil, fmt.Errorf("yolov9: normalizing %q: %w", g.Name, err)
	}
	return ng, nil
}
