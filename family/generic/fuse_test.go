package generic

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// TestFuseConvNeXt checks the fusions on convnext_tiny's training export
// (calibration/torchvision_more.py): its 36 linears, each MatMul of a
// transposed weight and an Add of the bias, become Gemms, its 18 GELUs
// (Div, Erf, Add, Mul, Mul) become Gelu nodes, and nothing else changes.
func TestFuseConvNeXt(t *testing.T) {
	g, err := ir.LoadFile(measured.Path("tv/convnext_tiny-train.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	count := func(g *ir.Graph) map[string]int {
		c := map[string]int{}
		for i := range g.Nodes {
			c[g.Nodes[i].OpType]++
		}
		return c
	}
	before := count(g)
	f, err := fuse(g)
	if err != nil {
		t.Fatal(err)
	}
	after := count(f)
	if after["MatMul"] != 0 || after["Erf"] != 0 || after["Gelu"] != 18 || after["Gemm"] != before["Gemm"]+36 {
		t.Errorf("after fusing: %d MatMul, %d Erf, %d Gelu, %d Gemm (before %d)", after["MatMul"], after["Erf"], after["Gelu"], after["Gemm"], before["Gemm"])
	}
	if want := len(g.Nodes) - 36*2 - 18*4; len(f.Nodes) != want {
		t.Errorf("%d nodes after fusing, want %d", len(f.Nodes), want)
	}
	if before["Transpose"]-after["Transpose"] != 36 {
		t.Errorf("%d weight transposes removed, want 36", before["Transpose"]-after["Transpose"])
	}
	// A graph without the patterns comes back as it is.
	if h, err := fuse(f); err != nil || h != f {
		t.Errorf("fusing twice: %v, a new graph %v", err, h != f)
	}
}

// TestFuseViT checks the attention fusion on vit_b_16's training export:
// its 12 scaled_dot_product_attention decompositions (two scaling Muls, a
// transposed key, MatMul, Softmax, MatMul) become ScaledDotProductAttention
// nodes, its 48 linears Gemms, and each of its 12 packed in-projections gets
// its .contiguous() back: a Contiguous node after the Squeeze, which the
// three Gathers of q, k and v read. Fusing again changes nothing.
func TestFuseViT(t *testing.T) {
	g, err := ir.LoadFile(measured.Path("tv/vit_b_16-train.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := fuse(g)
	if err != nil {
		t.Fatal(err)
	}
	c := map[string]int{}
	for i := range f.Nodes {
		c[f.Nodes[i].OpType]++
	}
	if c["ScaledDotProductAttention"] != 12 || c["Softmax"] != 0 || c["MatMul"] != 0 || c["Gelu"] != 12 || c["Contiguous"] != 12 {
		t.Errorf("after fusing: %d attentions, %d Softmax, %d MatMul, %d Gelu, %d Contiguous", c["ScaledDotProductAttention"], c["Softmax"], c["MatMul"], c["Gelu"], c["Contiguous"])
	}
	for i := range f.Nodes {
		n := &f.Nodes[i]
		if n.OpType != "Contiguous" {
			continue
		}
		from := f.Values[n.Inputs[0]].Producer
		var readers []string
		for _, r := range f.Values[n.Outputs[0]].Consumers {
			readers = append(readers, f.Nodes[r].OpType)
		}
		if from < 0 || f.Nodes[from].OpType != "Squeeze" || !slices.Equal(readers, []string{"Gather", "Gather", "Gather"}) {
			t.Errorf("%s: reads %v, read by %v; want a Squeeze's output, read by three Gathers", n.Name, from, readers)
		}
	}
	if h, err := fuse(f); err != nil || len(h.Nodes) != len(f.Nodes) {
		t.Errorf("fusing twice: %v, %d nodes, want %d", err, len(h.Nodes), len(f.Nodes))
	}
}

// TestPackedProjectionNearMiss checks that the Contiguous fusion takes only
// MultiheadAttention's packed in-projection: a Squeeze of a
// Transpose of an Unsqueeze of a Reshape read by Gathers on axis 0. A
// Gather on another axis, a chain that lacks the Unsqueeze, or a single
// reader leave the graph as it is.
func TestPackedProjectionNearMiss(t *testing.T) {
	build := func(unsqueeze bool, axis int64, readers int) *ir.Graph {
		g := &ir.Graph{Name: "g"}
		val := func(name string, kind ir.ValueKind) ir.ValueID {
			g.Values = append(g.Values, ir.Value{Name: name, Kind: kind, DType: ir.Float32})
			return ir.ValueID(len(g.Values) - 1)
		}
		node := func(op string, in []ir.ValueID, attrs ...ir.Attr) ir.ValueID {
			out := val(op+"_out"+strconv.Itoa(len(g.Nodes)), ir.Activation)
			g.Nodes = append(g.Nodes, ir.Node{Name: "/" + op + strconv.Itoa(len(g.Nodes)), OpType: op, Inputs: in, Outputs: []ir.ValueID{out}, Attrs: attrs})
			return out
		}
		x := val("x", ir.Input)
		g.Inputs = []ir.ValueID{x}
		shape, idx := val("shape", ir.Initializer), val("idx", ir.Initializer)
		v := node("Reshape", []ir.ValueID{x, shape})
		if unsqueeze {
			v = node("Unsqueeze", []ir.ValueID{v, idx})
		}
		v = node("Transpose", []ir.ValueID{v})
		v = node("Squeeze", []ir.ValueID{v, idx})
		for range readers {
			g.Outputs = append(g.Outputs, node("Gather", []ir.ValueID{v, idx}, ir.Attr{Name: "axis", Kind: ir.AttrInt, Int: axis}))
		}
		if err := g.Reindex(); err != nil {
			t.Fatal(err)
		}
		return g
	}
	for _, c := range []struct {
		what       string
		g          *ir.Graph
		contiguous bool
	}{
		{"the packed projection", build(true, 0, 3), true},
		{"Gathers on axis 1", build(true, 1, 3), false},
		{"no Unsqueeze", build(false, 0, 3), false},
		{"one reader", build(true, 0, 1), false},
	} {
		f, err := fuse(c.g)
		if err != nil {
			t.Fatal(err)
		}
		got := slices.ContainsFunc(f.Nodes, func(n ir.Node) bool { return n.OpType == "Contiguous" })
		if got != c.contiguous {
			t.Errorf("%s: a Contiguous node %v, want %v", c.what, got, c.contiguous)
		}
	}
}

// TestFuseAddcmul checks torch.addcmul on resmlp_12_224's export: each of
// its 25 Affine norms (addcmul(beta, alpha, x), written Add(beta,
// Mul(Mul(alpha, x), 1))) loses the Mul by 1; its Add reads the product
// first, which InPlace then runs it into, so that the norm makes one
// output, as the one kernel does. Fusing again changes nothing.
func TestFuseAddcmul(t *testing.T) {
	g, err := ir.LoadFile(measured.Path("timm/resmlp_12_224-train.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := fuse(g)
	if err != nil {
		t.Fatal(err)
	}
	byOne := func(g *ir.Graph) int {
		k := 0
		for i := range g.Nodes {
			if n := &g.Nodes[i]; n.OpType == "Mul" {
				for _, v := range n.Inputs {
					if c := &g.Values[v]; len(c.Floats) == 1 && c.Floats[0] == 1 {
						k++
					}
				}
			}
		}
		return k
	}
	if before, after := byOne(g), byOne(f); before != 25 || after != 0 {
		t.Errorf("%d products by 1 before fusing and %d after, want 25 and 0", before, after)
	}
	marked := 0
	for i := range f.Nodes {
		n := &f.Nodes[i]
		if n.OpType != "Mul" || n.IntAttr("addcmul", 0) == 0 {
			continue
		}
		marked++
		c := f.Values[n.Outputs[0]].Consumers
		if len(c) != 1 || f.Nodes[c[0]].OpType != "Add" || f.Nodes[c[0]].Inputs[0] != n.Outputs[0] {
			t.Errorf("%s: its product is not the first operand of one Add", n.Name)
		}
	}
	if marked != 25 {
		t.Errorf("%d products marked addcmul, want 25", marked)
	}
	if h, err := fuse(f); err != nil || h != f {
		t.Errorf("fusing twice: %v, a new graph %v", err, h != f)
	}
	s, err := f.Infer(ir.Binding{Batch: 2, Height: 224, Width: 224})
	if err != nil {
		t.Fatal(err)
	}
	inPlace := 0
	if _, err := schedule.Build(f, s, schedule.Config{Holder: holderFunc(func(fl *schedule.Flow) *schedule.Holds {
		for i, ip := range InPlace(fl) {
			if n := &f.Nodes[i]; ip && strings.HasSuffix(n.Name, "/Add") && strings.Contains(n.Name, "norm") {
				inPlace++
			}
		}
		return Family{}.Holds(fl)
	})}); err != nil {
		t.Fatal(err)
	}
	if inPlace != 25 {
		t.Errorf("%d of the norms' sums in place, want 25", inPlace)
	}
}

// TestFuseTanhGelu checks the tanh GELU fusion on two transformers
// exports (calibration §37): Gemma's gelu_pytorch_tanh, F.gelu(x,
// approximate="tanh"), which the exporter writes as nine ops (x·x,
// x·(x·x), κ·, x +, β·, Tanh, 1 +, x ·, 0.5 ·), becomes one Gelu with
// approximate "tanh" in each of its six layers, no Tanh left; GPT-2's
// NewGELUActivation, written in Python with torch.pow(x, 3.0), runs as
// those ops in eager PyTorch and keeps its twelve Tanh nodes.
func TestFuseTanhGelu(t *testing.T) {
	for _, c := range []struct {
		model       string
		gelu, tanhs int
	}{
		{"hf/gemma-train.onnx", 6, 0},
		{"hf/gpt2-train.onnx", 0, 12},
	} {
		g, err := ir.LoadFile(measured.Path(c.model))
		if err != nil {
			t.Fatal(err)
		}
		f, err := fuse(g)
		if err != nil {
			t.Fatal(err)
		}
		gelu, tanhs := 0, 0
		for i := range f.Nodes {
			switch n := &f.Nodes[i]; n.OpType {
			case "Gelu":
				if a, ok := n.Attr("approximate"); !ok || a.Str != "tanh" {
					t.Errorf("%s: %s has no approximate=tanh", c.model, n.Name)
				}
				gelu++
			case "Tanh":
				tanhs++
			}
		}
		if gelu != c.gelu || tanhs != c.tanhs {
			t.Errorf("%s: %d tanh GELUs fused, %d Tanh left; want %d and %d", c.model, gelu, tanhs, c.gelu, c.tanhs)
		}
	}
}
