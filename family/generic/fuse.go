package generic

import (
	"strings"

	"github.com/onnxmem/onnxmem/ir"
)

// fuse returns g with the patterns that the exporter spelled out as several
// ONNX nodes, but that eager PyTorch runs as one op, put back as that op,
// or g itself when there is none:
//
//   - a linear layer on an input of more than two dims, which the exporter
//     writes MatMul(x, Transpose(W)) then Add(b, ·) (b an initializer, or
//     a vector computed from initializers alone), becomes Gemm(x, W, b)
//     with transB (ir's Gemm takes an N-D A as a linear over its last dim):
//     aten::linear runs one matmul into its output and adds the bias in
//     place, and saves x and W;
//   - nn.GELU, which the exporter writes x·0.5·(1 + erf(x/√2)) as Div, Erf,
//     Add, Mul, Mul, becomes Gelu(x): one kernel, which saves x; and so
//     does gelu(x, approximate="tanh") (Gemma's
//     gelu_pytorch_tanh), which it writes 0.5·x·(1 + tanh(β·(x + κ·x·x·x)))
//     with the cube as two Muls, where a Python-written tanh GELU (GPT-2's
//     NewGELUActivation, torch.pow(x, 3.0)) stays the ops it runs;
//   - scaled_dot_product_attention, which the exporter writes
//     softmax((q·√s) @ (kᵀ·√s)) @ v, becomes ScaledDotProductAttention(q, k,
//     v): a fused kernel (flash or memory-efficient attention) that never
//     makes the L×L scores; a mask added to the scores, made from shapes
//     or parameters alone, becomes its fourth input, its attn_mask, and
//     the NaN rows' zeroing after the softmax goes (transformers' models,
//     traced, materialize the mask that eager skips when nothing is
//     padded; timm's TinyViT passes its learned bias so);
//   - MultiheadAttention's packed in-projection (F._in_projection_packed:
//     proj.unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2).squeeze(-2)
//     .contiguous(), then proj[0], proj[1], proj[2]), whose .contiguous()
//     the export drops, gets it back as a Contiguous node after the
//     Squeeze: one copy of the packed q, k and v, of which the three are
//     views (calibration/results/vit_steps.json), instead of a copy of
//     each third where its reshape merges dims;
//   - timm CoaT's forward_features, which turns each serial stage's
//     tokens into the next patch embedding's NCHW input as
//     remove_cls(x1).reshape(B, H1, W1, -1).permute(0, 3, 1, 2)
//     .contiguous() (timm/models/coat.py), gets that .contiguous() back
//     as a Contiguous node after the Transpose (coatNoCLS): the copy is
//     the local x1_nocls, which the conv saves in float32 and which lives
//     until forward_features returns (generic's coatLocals);
//   - torch.addcmul(input, t1, t2), which the exporter writes
//     Add(input, Mul(Mul(t1, t2), 1)) (value=1), loses the Mul by 1: one
//     kernel writes one output, which the graph then makes as t1·t2 with
//     the Add run into it in place (InPlace's Add after a product by a
//     parameter), its Mul marked addcmul (its backward computes t2·value
//     before the product with the gradient); timm's Affine (ResMLP's
//     norms, addcmul(beta, alpha, x)) wrote two transient copies of its
//     output each time without it.
//
// Example: convnext_tiny's CNBlock has two linears and a GELU between them:
// 12 nodes of the export become 3.
func fuse(g *ir.Graph) (*ir.Graph, error) {
	only := func(v ir.ValueID) (int32, bool) {
		c := g.Values[v].Consumers
		if len(c) != 1 {
			return -1, false
		}
		return c[0], true
	}
	isInit := func(v ir.ValueID) bool { return v != ir.NoValue && g.Values[v].Kind == ir.Initializer }
	isConst := func(v ir.ValueID) bool {
		if v == ir.NoValue {
			return false
		}
		if g.Values[v].Kind == ir.Initializer {
			return true
		}
		p := g.Values[v].Producer
		return p >= 0 && g.Nodes[p].OpType == "Constant"
	}
	// A bias that depends on no graph input is the model's own, whatever
	// ops made it (Swin V2 clones its qkv bias and zeroes the k third).
	fromInput := g.FromInputs()
	// vector reports whether v is one-dimensional: declared so, or an
	// in-place edit of a vector (ScatterND, Identity) that the export
	// left undeclared.
	var vector func(v ir.ValueID) bool
	vector = func(v ir.ValueID) bool {
		if d := g.Values[v].Dims; len(d) > 0 {
			return len(d) == 1
		}
		p := g.Values[v].Producer
		return p >= 0 && (g.Nodes[p].OpType == "ScatterND" || g.Nodes[p].OpType == "Identity") && vector(g.Nodes[p].Inputs[0])
	}
	other := func(n *ir.Node, v ir.ValueID) ir.ValueID {
		if n.Inputs[0] == v {
			return n.Inputs[1]
		}
		return n.Inputs[0]
	}
	// shapeOnly reports whether v is computed from constants, parameters
	// and the graph's shapes alone, no tensor data of the batch: an
	// attention mask of positions, or a learned bias (TinyViT's, BEiT's
	// relative position bias), which timm passes to the fused kernel as
	// its attn_mask.
	known := map[ir.ValueID]bool{}
	var shapeOnly func(v ir.ValueID) bool
	shapeOnly = func(v ir.ValueID) bool {
		if r, ok := known[v]; ok {
			return r
		}
		known[v] = false // a cycle is no mask
		val := &g.Values[v]
		r := val.Kind != ir.Input
		if p := val.Producer; r && p >= 0 && g.Nodes[p].OpType != "Shape" {
			for _, in := range g.Nodes[p].Inputs {
				if in != ir.NoValue && !shapeOnly(in) {
					r = false
					break
				}
			}
		}
		known[v] = r
		return r
	}
	drop := make([]bool, len(g.Nodes))
	replace := map[int]ir.Node{} // by node index: the node that takes its place
	after := map[int]ir.Node{}   // by node index: a node to insert after it
	var values []ir.Value        // new values, after g's
	// contiguous puts x.contiguous(), which the export drops, after node
	// i: i writes a new strided value that a Contiguous node copies into
	// i's output.
	contiguous := func(i int) {
		n := &g.Nodes[i]
		out := n.Outputs[0]
		v := g.Values[out]
		mid := ir.Value{Name: v.Name + "_strided", Kind: v.Kind, DType: v.DType}
		mid.ID = ir.ValueID(len(g.Values) + len(values))
		values = append(values, mid)
		sq := *n
		sq.Outputs = []ir.ValueID{mid.ID}
		replace[i] = sq
		after[i] = ir.Node{Name: n.Name + "_contiguous", OpType: "Contiguous", Inputs: []ir.ValueID{mid.ID}, Outputs: []ir.ValueID{out},
			Layer: n.Layer, Scopes: n.Scopes}
	}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		switch n.OpType {
		case "MatMul":
			if len(n.Inputs) != 2 {
				continue
			}
			tp := g.Values[n.Inputs[1]].Producer
			if tp < 0 || g.Nodes[tp].OpType != "Transpose" || !isInit(g.Nodes[tp].Inputs[0]) || len(g.Values[g.Nodes[tp].Inputs[0]].Dims) != 2 {
				continue
			}
			if t, ok := only(n.Inputs[1]); !ok || t != n.ID {
				continue
			}
			w := g.Nodes[tp].Inputs[0]
			fused := ir.Node{Name: n.Name, OpType: "Gemm", Inputs: []ir.ValueID{n.Inputs[0], w}, Outputs: n.Outputs, Layer: n.Layer, Scopes: n.Scopes,
				Attrs: []ir.Attr{{Name: "transB", Kind: ir.AttrInt, Int: 1}}}
			at := i
			if a, ok := only(n.Outputs[0]); ok && g.Nodes[a].OpType == "Add" {
				add := &g.Nodes[a]
				if b := other(add, n.Outputs[0]); b != ir.NoValue && !fromInput[b] && vector(b) {
					fused.Inputs = append(fused.Inputs, b)
					fused.Outputs, fused.Name = add.Outputs, add.Name
					drop[i] = true
					at = int(a)
				}
			}
			drop[tp] = true
			replace[at] = fused
		case "Softmax":
			// The exporter's scaled_dot_product_attention (symbolic
			// opset 14): softmax((q·√s) @ (kᵀ·√s)) @ v, the scales Sqrt
			// of a number computed from the head size.
			mm := g.Values[n.Inputs[0]].Producer
			maskAdd := int32(-1)
			if mm >= 0 && g.Nodes[mm].OpType == "Add" && len(g.Nodes[mm].Inputs) == 2 {
				// An attention mask added to the scores, made from the
				// input's shape alone (transformers' sdpa_mask, which
				// the trace materializes and eager skips: no padding,
				// is_causal or a bidirectional mask).
				add := &g.Nodes[mm]
				for j, in := range add.Inputs {
					if p := g.Values[in].Producer; p >= 0 && g.Nodes[p].OpType == "MatMul" && shapeOnly(add.Inputs[1-j]) {
						if c, ok := only(in); ok && c == add.ID {
							maskAdd, mm = mm, p
						}
						break
					}
				}
			}
			if mm < 0 || g.Nodes[mm].OpType != "MatMul" {
				continue
			}
			scaled := func(v ir.ValueID) (ir.ValueID, int32, bool) {
				p := g.Values[v].Producer
				if p < 0 || g.Nodes[p].OpType != "Mul" {
					return ir.NoValue, -1, false
				}
				m := &g.Nodes[p]
				for j, in := range m.Inputs {
					q := g.Values[in].Producer
					if q >= 0 && g.Nodes[q].OpType == "Cast" {
						q = g.Values[g.Nodes[q].Inputs[0]].Producer // the scale cast to q's type
					}
					if q >= 0 && g.Nodes[q].OpType == "Sqrt" {
						return m.Inputs[1-j], p, true
					}
				}
				return ir.NoValue, -1, false
			}
			q, mq, ok1 := scaled(g.Nodes[mm].Inputs[0])
			kt, mk, ok2 := scaled(g.Nodes[mm].Inputs[1])
			if !ok1 || !ok2 {
				continue
			}
			tp := g.Values[kt].Producer
			if tp < 0 || g.Nodes[tp].OpType != "Transpose" {
				continue
			}
			k := g.Nodes[tp].Inputs[0]
			var drops []int
			if maskAdd >= 0 {
				drops = append(drops, int(maskAdd))
			}
			next, ok := only(n.Outputs[0])
			if nan, where, found := nanZeroed(g, n.Outputs[0]); found {
				// softmax(…).masked_fill(isnan, 0): the rows a mask
				// blanks entirely, zeroed.
				drops = append(drops, int(nan), int(where))
				next, ok = only(g.Nodes[where].Outputs[0])
			}
			if ok && g.Nodes[next].OpType == "Dropout" {
				drops = append(drops, int(next))
				next, ok = only(g.Nodes[next].Outputs[0])
			}
			if !ok || g.Nodes[next].OpType != "MatMul" {
				continue
			}
			pv := &g.Nodes[next]
			v := pv.Inputs[1]
			var attrs []ir.Attr
			var mask ir.ValueID = ir.NoValue
			if maskAdd >= 0 {
				attrs = append(attrs, ir.Attr{Name: "masked", Kind: ir.AttrInt, Int: 1})
				add := &g.Nodes[maskAdd]
				mask = other(add, g.Nodes[mm].Outputs[0])
			}
			// Grouped-query attention: k and v repeated to q's heads
			// (transformers' repeat_kv, or the exporter's enable_gqa),
			// which eager PyTorch leaves to the kernel.
			if k0, kn, ok := repeatKV(g, k); ok {
				if v0, vn, ok := repeatKV(g, v); ok {
					k, v = k0, v0
					drops = append(append(drops, kn...), vn...)
					attrs = append(attrs, ir.Attr{Name: "gqa", Kind: ir.AttrInt, Int: 1})
				}
			}
			for _, j := range append(drops, i, int(mm), int(mq), int(mk), int(tp)) {
				drop[j] = true
			}
			ins := []ir.ValueID{q, k, v}
			if mask != ir.NoValue {
				// The mask stays the kernel's attn_mask: a learned
				// bias gets its gradient through it.
				ins = append(ins, mask)
			}
			replace[int(next)] = ir.Node{Name: pv.Name, OpType: "ScaledDotProductAttention", Inputs: ins,
				Outputs: pv.Outputs, Layer: pv.Layer, Scopes: pv.Scopes, Attrs: attrs}
		case "Squeeze":
			if packedProjection(g, n) {
				contiguous(i)
			}
		case "Transpose":
			// Read by the conv itself: a Contiguous that an earlier
			// fuse put there is not put again.
			if c := g.Values[n.Outputs[0]].Consumers; len(c) == 1 && g.Nodes[c[0]].OpType == "Conv" {
				if _, ok := coatNoCLS(g, n); ok {
					contiguous(i)
				}
			}
		case "Mul":
			if len(n.Inputs) != 2 || n.Outputs[0] == ir.NoValue {
				continue
			}
			if n.Inputs[0] == n.Inputs[1] {
				// gelu(x, approximate="tanh"), as the exporter writes it
				// (symbolic_opset9's gelu): x·x, x·(x·x), κ·, x +, β·,
				// tanh, 1 +, x ·, 0.5 ·.
				x := n.Inputs[0]
				chain := []int{i}
				cur := n.Outputs[0]
				ok := true
				for _, want := range []struct {
					op  string
					arg string // the other operand: "x", "const", or "" for a unary op
				}{{"Mul", "x"}, {"Mul", "const"}, {"Add", "x"}, {"Mul", "const"}, {"Tanh", ""}, {"Add", "const"}, {"Mul", "x"}, {"Mul", "const"}} {
					c, one := only(cur)
					if !one || g.Nodes[c].OpType != want.op {
						ok = false
						break
					}
					m := &g.Nodes[c]
					switch want.arg {
					case "x":
						ok = len(m.Inputs) == 2 && other(m, cur) == x
					case "const":
						ok = len(m.Inputs) == 2 && isConst(other(m, cur))
					}
					if !ok {
						break
					}
					chain = append(chain, int(c))
					cur = m.Outputs[0]
				}
				if !ok {
					continue
				}
				last := &g.Nodes[chain[len(chain)-1]]
				for _, k := range chain[:len(chain)-1] {
					drop[k] = true
				}
				replace[chain[len(chain)-1]] = ir.Node{Name: last.Name, OpType: "Gelu", Inputs: []ir.ValueID{x}, Outputs: last.Outputs, Layer: last.Layer, Scopes: last.Scopes,
					Attrs: []ir.Attr{{Name: "approximate", Kind: ir.AttrString, Str: "tanh"}}}
				continue
			}
			// addcmul's Mul by its value of 1, between a Mul and an Add.
			one := -1
			for j, v := range n.Inputs {
				if c := &g.Values[v]; isConst(v) && len(c.Floats) == 1 && c.Floats[0] == 1 {
					one = j
				}
			}
			if one < 0 {
				continue
			}
			x := n.Inputs[1-one]
			p := g.Values[x].Producer
			if p < 0 || g.Nodes[p].OpType != "Mul" {
				continue
			}
			if r, ok := only(x); !ok || r != n.ID {
				continue
			}
			a, ok := only(n.Outputs[0])
			if _, taken := replace[int(a)]; !ok || taken || g.Nodes[a].OpType != "Add" {
				continue
			}
			// The product first: the Add runs into it in place.
			add := g.Nodes[a]
			add.Inputs = []ir.ValueID{x, other(&add, n.Outputs[0])}
			if _, taken := replace[int(p)]; taken {
				continue
			}
			mul := g.Nodes[p]
			mul.Attrs = append(append([]ir.Attr(nil), mul.Attrs...), ir.Attr{Name: "addcmul", Kind: ir.AttrInt, Int: 1})
			drop[i] = true
			replace[int(p)] = mul
			replace[int(a)] = add
		case "Div":
			// x / √2 → erf → + 1 → x · → · 0.5
			x := n.Inputs[0]
			if !isConst(n.Inputs[1]) {
				continue
			}
			e, ok := only(n.Outputs[0])
			if !ok || g.Nodes[e].OpType != "Erf" {
				continue
			}
			a, ok := only(g.Nodes[e].Outputs[0])
			if !ok || g.Nodes[a].OpType != "Add" || !isConst(other(&g.Nodes[a], g.Nodes[e].Outputs[0])) {
				continue
			}
			m, ok := only(g.Nodes[a].Outputs[0])
			if !ok || g.Nodes[m].OpType != "Mul" || other(&g.Nodes[m], g.Nodes[a].Outputs[0]) != x {
				continue
			}
			h, ok := only(g.Nodes[m].Outputs[0])
			if !ok || g.Nodes[h].OpType != "Mul" || !isConst(other(&g.Nodes[h], g.Nodes[m].Outputs[0])) {
				continue
			}
			last := &g.Nodes[h]
			for _, k := range []int{i, int(e), int(a), int(m)} {
				drop[k] = true
			}
			replace[int(h)] = ir.Node{Name: last.Name, OpType: "Gelu", Inputs: []ir.ValueID{x}, Outputs: last.Outputs, Layer: last.Layer, Scopes: last.Scopes}
		}
	}
	if len(replace) == 0 {
		return g, nil
	}
	ng := &ir.Graph{Name: g.Name, ProducerName: g.ProducerName, Opset: g.Opset,
		Values: append(append([]ir.Value(nil), g.Values...), values...), Inputs: g.Inputs, Outputs: g.Outputs}
	for i := range g.Nodes {
		if n, ok := replace[i]; ok {
			ng.Nodes = append(ng.Nodes, n)
		} else if !drop[i] {
			ng.Nodes = append(ng.Nodes, g.Nodes[i])
		}
		if n, ok := after[i]; ok {
			ng.Nodes = append(ng.Nodes, n)
		}
	}
	if err := ng.Reindex(); err != nil {
		return nil, err
	}
	return ng, nil
}

// repeatKV finds transformers' repeat_kv on x: x = Reshape(Expand(
// Unsqueeze(x0, 2), [B, Hkv, n, L, D]), [B, Hkv·n, L, D]), each node read
// only by the next. It returns x0 and the three nodes.
func repeatKV(g *ir.Graph, x ir.ValueID) (ir.ValueID, []int, bool) {
	r := g.Values[x].Producer
	if r < 0 || g.Nodes[r].OpType != "Reshape" || len(g.Values[x].Consumers) != 1 {
		return x, nil, false
	}
	e := g.Values[g.Nodes[r].Inputs[0]].Producer
	if e < 0 || g.Nodes[e].OpType != "Expand" || len(g.Values[g.Nodes[e].Outputs[0]].Consumers) != 1 {
		return x, nil, false
	}
	u := g.Values[g.Nodes[e].Inputs[0]].Producer
	if u < 0 || g.Nodes[u].OpType != "Unsqueeze" || len(g.Values[g.Nodes[u].Outputs[0]].Consumers) != 1 {
		return x, nil, false
	}
	return g.Nodes[u].Inputs[0], []int{int(u), int(e), int(r)}, true
}

// nanZeroed finds the exporter's softmax(…).masked_fill(isnan, 0) on
// scores p: an IsNaN of p whose only reader is a Where(isnan, c, p), p's
// only other reader. It returns the two nodes.
func nanZeroed(g *ir.Graph, p ir.ValueID) (nan, where int32, ok bool) {
	cons := g.Values[p].Consumers
	if len(cons) != 2 {
		return -1, -1, false
	}
	for j, c := range cons {
		n, w := &g.Nodes[c], &g.Nodes[cons[1-j]]
		if n.OpType != "IsNaN" || w.OpType != "Where" || len(w.Inputs) != 3 || w.Inputs[2] != p || w.Inputs[0] != n.Outputs[0] {
			continue
		}
		if r := g.Values[n.Outputs[0]].Consumers; len(r) == 1 && r[0] == w.ID {
			return c, cons[1-j], true
		}
	}
	return -1, -1, false
}

// packedProjection reports whether Squeeze node n ends MultiheadAttention's
// packed in-projection: a Squeeze of a Transpose of an Unsqueeze of a
// Reshape (unflatten), whose output only Gathers on axis 0 read (proj[0],
// proj[1], proj[2]).
func packedProjection(g *ir.Graph, n *ir.Node) bool {
	chain := []string{"Transpose", "Unsqueeze", "Reshape"}
	v := n.Inputs[0]
	for _, op := range chain {
		p := g.Values[v].Producer
		if p < 0 || g.Nodes[p].OpType != op {
			return false
		}
		v = g.Nodes[p].Inputs[0]
	}
	readers := g.Values[n.Outputs[0]].Consumers
	if len(readers) < 2 {
		return false
	}
	for _, c := range readers {
		if r := &g.Nodes[c]; r.OpType != "Gather" || r.IntAttr("axis", 0) != 0 {
			return false
		}
	}
	return true
}

// coatNoCLS reports whether Transpose node t is the permute of timm
// CoaT's forward_features that makes a serial stage's x_nocls
// (remove_cls(x).reshape(B, H, W, -1).permute(0, 3, 1, 2)): written in the
// model's own forward (the graph's root scope), reading a Reshape of a
// Slice of a serial block's output, and read by the next stage's patch
// embedding alone, or by the Contiguous node that fuse put after it. It
// returns the stage's output x, the Slice's input.
func coatNoCLS(g *ir.Graph, t *ir.Node) (ir.ValueID, bool) {
	if t.OpType != "Transpose" || len(t.Inputs) != 1 || len(t.Outputs) != 1 || strings.Count(t.Name, "/") != 1 {
		return ir.NoValue, false
	}
	c := g.Values[t.Outputs[0]].Consumers
	if len(c) == 1 && g.Nodes[c[0]].OpType == "Contiguous" {
		c = g.Values[g.Nodes[c[0]].Outputs[0]].Consumers
	}
	if len(c) != 1 || g.Nodes[c[0]].OpType != "Conv" || !strings.HasPrefix(g.Nodes[c[0]].Name, "/patch_embed") {
		return ir.NoValue, false
	}
	v := t.Inputs[0]
	for _, op := range []string{"Reshape", "Slice"} {
		p := g.Values[v].Producer
		if p < 0 || g.Nodes[p].OpType != op || strings.Count(g.Nodes[p].Name, "/") != 1 {
			return ir.NoValue, false
		}
		v = g.Nodes[p].Inputs[0]
	}
	if p := g.Values[v].Producer; p < 0 || !strings.HasPrefix(g.Nodes[p].Name, "/serial_blocks") {
		return ir.NoValue, false
	}
	return v, true
}
