package yolov9_test

import (
	"slices"
	"testing"

	"github.com/onnxmem/onnxmem/family/yolov9"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// TestNormalize builds what torch.onnx makes of cat((cat((a, b), 1), c), 1)
// when an ADown-like layer 1, ending in cat((a, b), 1), feeds a Concat layer
// 2 that also reads layer 0: one flat Concat of a, b and layer 0's output.
// Normalize must restore layer 1's own cat at the end of layer 1 and make
// layer 2's Concat read it.
func TestNormalize(t *testing.T) {
	bl := onnxbuild.New("nested")
	l0 := bl.Layer(0).Block(bl.Input("x", 3), 8, 3, 2)
	down := bl.Layer(1)
	a := down.Sub("cv1").Block(down.MaxPool(l0, 3, 1, 1), 4, 1, 1)
	b := down.Sub("cv2").Block(down.AvgPool(l0, 3, 1, 1), 4, 3, 1)
	bl.Output(bl.Layer(3).Block(bl.Layer(2).Concat(a, b, l0), 8, 1, 1))
	g := loadRaw(t, bl)

	ng, err := yolov9.Normalize(g)
	if err != nil {
		t.Fatal(err)
	}
	if ng == g {
		t.Fatal("Normalize returned the graph unchanged")
	}
	name := func(v ir.ValueID) string { return ng.Values[v].Name }
	i := slices.IndexFunc(ng.Nodes, func(n ir.Node) bool { return n.OpType == "Concat" && n.Layer == 1 })
	if i < 0 {
		t.Fatal("no Concat in layer 1 after Normalize")
	}
	cat := ng.Nodes[i]
	if got := []string{name(cat.Inputs[0]), name(cat.Inputs[1])}; len(cat.Inputs) != 2 || got[0] != a.Name || got[1] != b.Name {
		t.Errorf("restored cat %s reads %v, want [%s %s]", cat.Name, got, a.Name, b.Name)
	}
	if next := ng.Nodes[i+1]; next.Layer != 2 || ng.Nodes[i-1].Layer != 1 {
		t.Errorf("restored cat at %d, between layers %d and %d: want it last in layer 1", i, ng.Nodes[i-1].Layer, next.Layer)
	}
	j := slices.IndexFunc(ng.Nodes, func(n ir.Node) bool { return n.Name == "/model.2/Concat" })
	if got := ng.Nodes[j].Inputs; len(got) != 2 || got[0] != cat.Outputs[0] || name(got[1]) != l0.Name {
		t.Errorf("/model.2/Concat reads %d inputs starting with %s, want the restored cat and %s", len(got), name(got[0]), l0.Name)
	}
	// The normalized graph builds a consistent step, with both cats.
	p := program(t, ng, 2, schedule.Config{})
	var cats []string
	for _, e := range p.Events[:p.ForwardEnd] {
		if !e.Free && e.Node >= 0 && p.Graph.Nodes[e.Node].OpType == "Concat" {
			cats = append(cats, p.Graph.Nodes[e.Node].Name)
		}
	}
	if len(cats) != 2 || cats[1] != "/model.2/Concat" {
		t.Errorf("forward allocates at Concat nodes %v, want the restored cat then /model.2/Concat", cats)
	}

	// Nothing to restore: the same graph comes back.
	tiny := load(t, onnxbuild.Tiny())
	if ng, err := yolov9.Normalize(tiny); err != nil || ng != tiny {
		t.Errorf("Normalize(tiny) = %p, %v; want the graph itself", ng, err)
	}
}
