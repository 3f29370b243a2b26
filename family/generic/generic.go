// Package generic is the model family of any graph that no other family
// claims: its top-level layers come from the module paths in node names,
// its forward keeps what a plain PyTorch forward keeps, its activations run
// in place where torchvision's modules run them in place (InPlace), and
// its training loss is the sum of its outputs.
//
// Worked example: torchvision's resnet18, exported with torch.onnx, names
// its nodes "/conv1/Conv", "/bn1/BatchNormalization", "/relu/Relu",
// "/maxpool/MaxPool", "/layer1/layer1.0/conv1/Conv", …, "/fc/Gemm". The
// top-level layers are the modules conv1, bn1, relu, maxpool, layer1.0,
// layer1.1, layer2.0, … and fc, numbered 0, 1, 2, … in the order they first
// run: a container's numbered children ("layer1.0") are layers of their own,
// as checkpoint_sequential would split them. "/Flatten", an op of the root
// module, belongs to the layer of the node that produces its input.
package generic

import (
	"path"
	"slices"
	"strings"

	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// Family is the generic family. Its zero value is ready to use.
type Family struct{}

// Name returns "generic".
func (Family) Name() string { return "generic" }

// Detect reports true: the generic family takes any graph of supported ops.
func (Family) Detect(*ir.Graph) (bool, string) { return true, "" }

// Prepare puts back the ops that the exporter spelled out (fuse), assigns
// the top-level layers from the module paths, in the order they first
// appear, and returns the graph.
func (Family) Prepare(g *ir.Graph) (*ir.Graph, error) {
	g, err := fuse(g)
	if err != nil {
		return nil, err
	}
	index := map[string]int{}
	lists := blockLists(g)
	g.AssignLayers(func(s string) int {
		key := listKey(s, lists)
		if key == "" {
			key = moduleKey(s)
		}
		if key == "" {
			return -1
		}
		l, ok := index[key]
		if !ok {
			l = len(index)
			index[key] = l
		}
		return l
	})
	if len(lists) > 0 {
		// A node of a list's parent after the list began (GPT-2's
		// transformer-level ops around its blocks) runs in the layer
		// that ran last: layers stay in node order.
		hi := -1
		for i := range g.Nodes {
			n := &g.Nodes[i]
			if n.Layer >= 0 && n.Layer < hi {
				n.Layer = hi
			}
			hi = max(hi, n.Layer)
		}
	}
	return g, nil
}

// moduleKey returns the top-level module that a node, value or weight name
// lies in, or "": "/layer1/layer1.0/conv1/Conv" and "/layer1/0/conv1/Conv"
// give "layer1.0", "layer1.0.conv1.weight" gives "layer1.0",
// "/fc/Gemm" and "fc.bias" give "fc", and "/Flatten", "images" and
// "onnx::Conv_12" give "".
func moduleKey(s string) string {
	if k, ok := scopeKey(s); ok {
		return k
	}
	if strings.Contains(s, "::") || strings.ContainsAny(s, " :[]'\"") {
		return ""
	}
	var parts []string
	if strings.HasPrefix(s, "/") {
		parts = strings.Split(s[1:], "/")
		parts = parts[:len(parts)-1] // the op's own name
	} else {
		parts = strings.Split(s, ".")
		if len(parts) < 2 {
			return ""
		}
		parts = parts[:len(parts)-1] // the tensor's own name
	}
	if len(parts) == 0 || parts[0] == "" {
		return ""
	}
	top := parts[0]
	if len(parts) > 1 {
		child := strings.TrimPrefix(parts[1], top+".")
		if isIndex(child) {
			return top + "." + child
		}
	}
	return top
}

// blockLists finds, for each top-level module whose nodes reach a list of
// blocks deeper than its own children, the path to that list's parent: a
// Hugging Face model's decoder layers, "/transformer/h.0/attn/…" of GPT-2
// or "/bert/encoder/layer.0/…" of BERT, give transformer → [transformer]
// and bert → [bert encoder]. Such a model's layers are its blocks
// (transformer.h.0, …), as gradient checkpointing takes them, and the
// modules beside the path (transformer.wte, bert.embeddings, cls).
//
// Only a model of at most three top-level modules is taken so (a
// transformers model, or one wrapped in a module of its own): a vision
// backbone's top-level modules are its stages, each a layer.
func blockLists(g *ir.Graph) map[string][]string {
	lists := map[string][]string{}
	var tops []string
	for i := range g.Nodes {
		parts := nodePath(g.Nodes[i].Name)
		if len(parts) > 0 && !slices.Contains(tops, parts[0]) {
			if tops = append(tops, parts[0]); len(tops) > 3 {
				return nil
			}
		}
		for k := 1; k < len(parts) && k < 5; k++ {
			if !indexed(parts[k]) {
				continue
			}
			// A ModuleList's element is named after the list's
			// attribute ("encoder/layer.0"); a Sequential's child,
			// under the Sequential's own scope, after it
			// ("layer1/layer1.0", "mlp/mlp.0"): moduleKey's case.
			if name := parts[k][:strings.LastIndexByte(parts[k], '.')]; name != parts[k-1] {
				if old, ok := lists[parts[0]]; !ok || len(old) > k {
					lists[parts[0]] = parts[:k:k]
				}
			}
			break
		}
	}
	return lists
}

// listKey returns the layer of name s within a top-level module that
// blockLists found a list in, or "": the block it lies in, or the module
// where its path leaves the list's.
func listKey(s string, lists map[string][]string) string {
	parts := nodePath(s)
	if parts == nil {
		parts = weightPath(s)
	}
	if len(parts) == 0 {
		return ""
	}
	anc, ok := lists[parts[0]]
	if !ok {
		return ""
	}
	for i := 1; i <= len(anc); i++ {
		if i >= len(parts) || i < len(anc) && parts[i] != anc[i] || i == len(anc) && !indexed(parts[i]) {
			return strings.Join(parts[:min(i+1, len(parts))], ".")
		}
	}
	return strings.Join(parts[:len(anc)+1], ".")
}

// nodePath returns the module path of a TorchScript node name, its
// components as the exporter writes them ("/m/h.0/attn/Add" gives [m h.0
// attn]), or nil for another name.
func nodePath(s string) []string {
	if !strings.HasPrefix(s, "/") || strings.Contains(s, "::") {
		return nil
	}
	parts := strings.Split(s[1:], "/")
	return parts[:len(parts)-1]
}

// weightPath returns the module path of a weight's dotted name in
// nodePath's form, a list's index joined to its name ("m.h.0.attn.bias"
// gives [m h.0 attn]), or nil.
func weightPath(s string) []string {
	if strings.ContainsAny(s, "/: []'\"") {
		return nil
	}
	dots := strings.Split(s, ".")
	if len(dots) < 2 {
		return nil
	}
	var parts []string
	for _, d := range dots[:len(dots)-1] {
		if isIndex(d) && len(parts) > 0 {
			parts[len(parts)-1] += "." + d
			continue
		}
		parts = append(parts, d)
	}
	return parts
}

// indexed reports whether a path component is a list's element, "h.0".
func indexed(c string) bool {
	i := strings.LastIndexByte(c, '.')
	return i > 0 && isIndex(c[i+1:])
}

// scopeKey returns the top-level module of a dynamo export's module scope,
// the metadata that Node.Scopes keeps, and whether s is one:
// "[”, 'layer1.0', 'layer1.0.conv1']" and
// ": torchvision.models.resnet.ResNet/layer1.0: torchvision.models.resnet.BasicBlock/conv1"
// both give "layer1.0".
func scopeKey(s string) (string, bool) {
	var path string
	switch {
	case strings.HasPrefix(s, "["):
		for _, e := range strings.Split(strings.Trim(s, "[]"), ",") {
			if e = strings.Trim(strings.TrimSpace(e), "'\""); e != "" {
				path = e
				break
			}
		}
	case strings.HasPrefix(s, ": "):
		parts := strings.Split(s, ": ")
		if len(parts) < 3 {
			return "", true // the root module itself
		}
		path = parts[1][strings.LastIndexByte(parts[1], '/')+1:]
	default:
		return "", false
	}
	if path == "" {
		return "", true
	}
	parts := strings.Split(path, ".")
	if len(parts) > 1 && isIndex(parts[1]) {
		return parts[0] + "." + parts[1], true
	}
	return parts[0], true
}

// isIndex reports whether s is a decimal index.
func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Holds returns what a plain forward keeps alive: the layer loop's
// references (x = layer(x), with the outputs that later layers read kept),
// every module's arguments until it returns, the tensors a module passes
// to a child beside its own arguments (argumentLocals), a transformers
// body's embedding locals (embeddingLocals), GPT-2's block locals
// (gpt2Locals) and CoaT's (coatLocals); and which ops run in place
// (InPlace).
func (Family) Holds(f *schedule.Flow) *schedule.Holds {
	last := f.LastInScope()
	h := &schedule.Holds{Until: f.ArgumentHolds(last)}
	f.LayerLoop(h)
	embeddingLocals(f, h, last)
	gpt2Locals(f, h, last)
	coatLocals(f, h, last)
	argumentLocals(f, h, last)
	nfBlockLocals(f, h, last)
	attentionLocals(f, h, last)
	h.InPlace = InPlace(f)
	return h
}

// gpt2Locals holds what transformers' GPT2Block.forward keeps in its
// locals (models/gpt2/modeling_gpt2.py): it writes hidden_states =
// self.ln_1(hidden_states) and rebinds hidden_states only at
// hidden_states = attn_output + residual, so ln_1's output lives through
// the attention until that add has made its output (ln_2's likewise
// until the MLP's residual add); and attn_output = attn_outputs[0], never
// rebound, lives until the block returns. A block is GPT-2's when its
// children are ln_1, attn, ln_2 and mlp and its residual adds take their
// operands in GPT2Block's order (the residual second, then first); nanoGPT's
// and CLIP's blocks of the same names add x first and keep no locals. Under AMP the matmuls read
// float16 copies of the norms' float32 outputs, and only these locals keep
// them; in float32 the matmuls save them anyway. Other decoders (Llama's,
// OPT's) rebind hidden_states to the attention's output, which frees the
// norm's as the attention returns (ArgumentHolds), and add it at once.
//
// Worked example: GPT-2 at batch 8 and 512 tokens under AMP keeps ln_1's
// float32 output, 12 MiB, through the attention, so the residual add takes
// a new 12 MiB segment for its output, and the attention's 6 MiB output
// through the MLP, so c_fc's float16 weight takes a new 20 MiB one
// (calibration/results/hf_gpt2amp_warm_traces.jsonl.gz, segment by
// segment).
func gpt2Locals(f *schedule.Flow, h *schedule.Holds, last map[string]int32) {
	g := f.Graph()
	// The residual add that rebinds hidden_states after norm node i: the
	// first add of the block that reads the norm's input, as operand k
	// (attn_output + residual reads it second, residual + ff first); -1
	// when there is none.
	residual := func(i int, end int32, k int) int32 {
		x := g.Nodes[i].Inputs[0]
		for j := i + 1; j <= int(end); j++ {
			if m := &g.Nodes[j]; m.OpType == "Add" && f.Runs(int32(j)) && slices.Contains(m.Inputs, x) {
				if len(m.Inputs) == 2 && m.Inputs[k] == x {
					return int32(j)
				}
				return -1
			}
		}
		return -1
	}
	norm := map[string]int{} // "/transformer/h.0/ln_1/" → its LayerNormalization
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.OpType == "LayerNormalization" && len(n.Inputs) > 0 && len(n.Outputs) > 0 && f.Runs(int32(i)) {
			if _, ok := norm[schedule.ScopeOf(n.Name)]; !ok {
				norm[schedule.ScopeOf(n.Name)] = i
			}
		}
	}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		scope := schedule.ScopeOf(n.Name)
		parent, child := path.Split(strings.TrimSuffix(scope, "/"))
		if child != "ln_1" || norm[scope] != i || n.OpType != "LayerNormalization" {
			continue
		}
		end, okEnd := last[parent]
		a, okAttn := last[parent+"attn/"]
		_, okMLP := last[parent+"mlp/"]
		l2, okLn2 := norm[parent+"ln_2/"]
		if !okEnd || !okAttn || !okMLP || !okLn2 {
			continue
		}
		// GPT2Block's own order of operands, which nanoGPT's and CLIP's
		// blocks (x = x + self.attn(self.ln_1(x)), the same names, no
		// locals) do not share.
		r1, r2 := residual(i, end, 1), residual(l2, end, 0)
		if r1 < 0 || r2 < 0 {
			continue
		}
		h.Until[i] = append(h.Until[i], schedule.Hold{V: n.Outputs[0], End: r1})
		h.Until[l2] = append(h.Until[l2], schedule.Hold{V: g.Nodes[l2].Outputs[0], End: r2})
		// attn_output: the attention's output, which the first residual
		// add reads.
		if an := &g.Nodes[a]; len(an.Outputs) > 0 && end > a && slices.Contains(g.Nodes[r1].Inputs, an.Outputs[0]) {
			h.Until[a] = append(h.Until[a], schedule.Hold{V: an.Outputs[0], End: end})
		}
	}
}

// coatLocals holds what timm CoaT's forward_features keeps in its locals
// (timm/models/coat.py): each serial stage's output x1, x2, x3 and its NCHW
// copy x1_nocls, x2_nocls, x3_nocls (the Contiguous nodes that fuse put
// back, coatNoCLS) are never rebound, so they live until forward_features
// returns, after norm4 (with parallel blocks too: it returns [x2, x3, x4]
// normed, and forward_head aggregates them). With parallel blocks, x1 …
// x4 are rebound by the first parallel block (x1, x2, x3, x4 = blk(…)), so
// only the copies are held.
//
// Worked example: coat_lite_tiny at batch 32 under AMP keeps x1 (32 × 3137
// × 64 float32, 25.7 MB), x1_nocls (25.7 MB), x2 and x2_nocls (12.9 MB
// each), x3 and x3_nocls (8.1 MB each) to the end of the forward, where its
// peak falls: 93 MB that the measured step frees only when
// forward_features returns (calibration/results/timm_amp32_traces.jsonl.gz,
// events 787–791; calibration §26). The next patch embedding's conv saves
// its float16 cast of the copy under autocast, the copy itself in float32.
// (x4_nocls, made the same way but read by nothing, is not in the export.)
func coatLocals(f *schedule.Flow, h *schedule.Holds, last map[string]int32) {
	g := f.Graph()
	end, ok := last["/norm4/"]
	if !ok {
		return
	}
	_, parallel := last["/parallel_blocks/"]
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.OpType != "Contiguous" || !f.Runs(int32(i)) || int32(i) >= end {
			continue
		}
		p := g.Values[n.Inputs[0]].Producer
		if p < 0 {
			continue
		}
		x, ok := coatNoCLS(g, &g.Nodes[p])
		if !ok {
			continue
		}
		h.Until[i] = append(h.Until[i], schedule.Hold{V: n.Outputs[0], End: end})
		if !parallel {
			// Taken as remove_cls reads x, before its views let it go.
			s := g.Values[g.Nodes[p].Inputs[0]].Producer // the Reshape
			s = g.Values[g.Nodes[s].Inputs[0]].Producer  // the Slice
			h.Until[s] = append(h.Until[s], schedule.Hold{V: x, End: end})
		}
	}
}

// argumentLocals holds the locals that a module passes to a child along
// with other tensors: when child C of module M reads tensors made outside
// C by more than one source (M's arguments or different children of M),
// M's forward names them (x1 = self.tree1(x, shortcut)), and each one made
// inside M that only C reads lives in M's locals until M returns (one
// that M reads again, a decoder layer's x in x + attn(x, memory), is
// rebound there). A child that reads only
// what one earlier child made (a tuple passed along a Sequential, x =
// block(x)) takes its arguments as the container rebinds them; so does one
// that reads no argument of M (DPN's blocks pass (resid, dense) along,
// PiT's stages (x, cls_tokens)).
//
// Worked example: timm's DlaTree.forward writes bottom =
// self.downsample(x), shortcut = self.project(bottom), x1 =
// self.tree1(x, shortcut): tree1 reads x, the tree's argument, and the
// project's output, made inside the tree, so shortcut stays until the
// tree's root has run. dla34 at batch 32 in float32 keeps level2's 25.7 MB
// shortcut through tree2 and the root, as the measured step frees it
// (calibration/results/timm_fp32_32_traces.jsonl.gz, event 60, at the
// root's batch norm); freed after tree1, it left a hole where the next
// tensors went, and the step's reserved peak in a fresh process read 4.1%
// low (calibration §34; now to the byte).
func argumentLocals(f *schedule.Flow, h *schedule.Holds, last map[string]int32) {
	g := f.Graph()
	type arg struct {
		v      ir.ValueID
		reader int32
	}
	args := map[string][]arg{}
	var order []string
	for i := range g.Nodes {
		if !f.Runs(int32(i)) {
			continue
		}
		sc := schedule.ScopeOf(g.Nodes[i].Name)
		for _, v := range f.Reads(int32(i)) {
			if !f.Data(v) {
				continue
			}
			from := ""
			if p := g.Values[v].Producer; p >= 0 {
				from = schedule.ScopeOf(g.Nodes[p].Name)
			}
			for j := 1; j < len(sc); j++ {
				if pre := sc[:j+1]; sc[j] != '/' || strings.HasPrefix(from, pre) {
					continue
				}
				// v is an argument of pre and of every module inside it
				// on the reader's path.
				pre := sc[:j+1]
				if _, ok := args[pre]; !ok {
					order = append(order, pre)
				}
				if !slices.ContainsFunc(args[pre], func(a arg) bool { return a.v == v }) {
					args[pre] = append(args[pre], arg{v, int32(i)})
				}
			}
		}
	}
	for _, c := range order {
		a := args[c]
		m, _ := path.Split(strings.TrimSuffix(c, "/"))
		end, ok := last[m]
		if len(a) < 2 || m == "/" || !ok {
			continue
		}
		// The sources: the child of m that made each argument, "" for
		// m's own arguments.
		var sources []string
		for _, x := range a {
			src := ""
			if p := g.Values[x.v].Producer; p >= 0 {
				if from := schedule.ScopeOf(g.Nodes[p].Name); strings.HasPrefix(from, m) {
					src = from[:len(m)+strings.IndexByte(from[len(m):], '/')+1]
				}
			}
			if !slices.Contains(sources, src) {
				sources = append(sources, src)
			}
		}
		if len(sources) < 2 || !slices.Contains(sources, "") {
			continue
		}
		for _, x := range a {
			p := g.Values[x.v].Producer
			if p < 0 || !strings.HasPrefix(schedule.ScopeOf(g.Nodes[p].Name), m) || end <= x.reader {
				continue
			}
			// A value that M itself reads again after the child (the
			// residual x + attn(x, memory) of a decoder layer, which
			// rebinds x) is not a local the child alone is given.
			if slices.ContainsFunc(g.Values[x.v].Consumers, func(r int32) bool {
				return f.Runs(r) && !strings.HasPrefix(g.Nodes[r].Name, c)
			}) {
				continue
			}
			h.Until[x.reader] = append(h.Until[x.reader], schedule.Hold{V: x.v, End: end})
		}
	}
}

// nfAct3 returns the last node of conv3 when node i is the activation of
// module act3 of timm's NormFreeBlock (timm/models/nfnet.py: children act1,
// conv1, act2, conv2, act3, conv3), and -1 otherwise. The block builds
// act2 = act_layer(inplace=True) and act3 = act_layer(), out of place, and
// writes out = self.conv3(self.act3(out)), so act3 makes a new tensor and
// the local out, conv2's output, lives until conv3 returns.
func nfAct3(f *schedule.Flow, i int32) int32 {
	g := f.Graph()
	scope := schedule.ScopeOf(g.Nodes[i].Name)
	block, child := path.Split(strings.TrimSuffix(scope, "/"))
	if child != "act3" {
		return -1
	}
	var seen [6]bool
	conv3 := int32(-1)
	for j := range g.Nodes {
		if !f.Runs(int32(j)) {
			continue
		}
		rest, ok := strings.CutPrefix(g.Nodes[j].Name, block)
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, "/")
		if k := slices.Index([]string{"act1", "conv1", "act2", "conv2", "act3", "conv3"}, name); k >= 0 {
			seen[k] = true
		}
		if name == "conv3" {
			conv3 = int32(j)
		}
	}
	if slices.Contains(seen[:], false) || conv3 < i {
		return -1
	}
	return conv3
}

// nfBlockLocals holds the locals of timm's NormFreeBlock that its
// statements keep past their last read: act3's input, conv2's output,
// until conv3 returns (nfAct3), and conv3's output, the local out that
// out = out * self.alpha + shortcut rebinds only once the sum is made,
// until the block's last op (when nothing but that product reads it: no
// attn_last in between).
//
// Worked example: nf_resnet50 at batch 32 under AMP keeps conv2's 16 MiB
// output through conv3 in each block of its first stage, act3 makes a
// 16 MiB output of its own, and conv3's 64 MiB output lives until the
// residual sum is made: the measured step frees conv2's output only after
// conv3's, and conv3's after the sum's (calibration/results/
// timm_fresh32_traces.jsonl.gz, events 44, 50, 57, 64, 65, 66 and 70).
func nfBlockLocals(f *schedule.Flow, h *schedule.Holds, last map[string]int32) {
	g := f.Graph()
	for i := range g.Nodes {
		if !f.Runs(int32(i)) || len(g.Nodes[i].Inputs) == 0 {
			continue
		}
		conv3 := nfAct3(f, int32(i))
		if conv3 <= int32(i) {
			continue
		}
		// act3's input comes from outside it (GammaAct's mul_ after its
		// GELU reads the GELU's output).
		x := g.Nodes[i].Inputs[0]
		if p := g.Values[x].Producer; p >= 0 && schedule.ScopeOf(g.Nodes[p].Name) == schedule.ScopeOf(g.Nodes[i].Name) {
			continue
		}
		h.Until[i] = append(h.Until[i], schedule.Hold{V: x, End: conv3})
		block, _ := path.Split(strings.TrimSuffix(schedule.ScopeOf(g.Nodes[i].Name), "/"))
		out := g.Nodes[conv3].Outputs[0]
		end, ok := last[block]
		var readers []int32
		for _, c := range g.Values[out].Consumers {
			if f.Runs(c) {
				readers = append(readers, c)
			}
		}
		if ok && len(readers) == 1 && g.Nodes[readers[0]].OpType == "Mul" &&
			schedule.ScopeOf(g.Nodes[readers[0]].Name) == block && end > readers[0] {
			h.Until[readers[0]] = append(h.Until[readers[0]], schedule.Hold{V: out, End: end})
		}
	}
}

// attentionLocals holds q, k and v of each fused attention until the
// module that calls it returns: timm's Attention writes q, k, v =
// qkv.unbind(0), transformers' attentions query_states, key_states and
// value_states, torchvision's multi_head_attention_forward q, k, v, all
// locals until the output projection has run. Where the kernel saves them
// this changes nothing; where it saves copies instead (flash attention's
// padded head dims, the math kernel's float32 copies), the projection
// that q, k and v are views of stays until the module returns.
//
// Worked example: mobilevit_s at batch 32 under AMP pads its first
// transformer's head dim of 36 for flash attention; the qkv projection's
// 28.3 MB output, which q, k and v view, is freed after the output
// projection has made its output (calibration/results/
// timm_fresh32_traces.jsonl.gz, mobilevit_s's first attention), not as
// the kernel returns.
func attentionLocals(f *schedule.Flow, h *schedule.Holds, last map[string]int32) {
	g := f.Graph()
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.OpType != "ScaledDotProductAttention" || !f.Runs(int32(i)) || len(n.Inputs) < 3 {
			continue
		}
		end, ok := last[schedule.ScopeOf(n.Name)]
		if !ok || end <= int32(i) {
			continue
		}
		for _, v := range n.Inputs[:3] {
			if f.Data(v) {
				h.Until[i] = append(h.Until[i], schedule.Hold{V: v, End: end})
			}
		}
	}
}

// embeddingLocals holds the output of an embedding that the module running
// a model's blocks calls itself until that module's last op: transformers'
// GPT2Model, LlamaModel, Qwen2Model and OPTDecoder write inputs_embeds =
// self.wte(input_ids) (self.embed_tokens) into a local of their forward
// that they never rebind, so the lookup lives until that forward returns,
// after the last block and the final norm; BERT's and DistilBERT's lookups
// run inside their embeddings module, whose forward returns their sum.
// (position_embeds, a lookup of positions made from shapes alone, is not
// materialized by the replay at all, like other values computed from
// parameters alone.)
//
// Worked example: GPT-2 at batch 4 and 512 tokens keeps wte's 6 MiB
// lookup through all twelve blocks. Freed after the sum, it left a hole
// that the next dropout filled, where PyTorch takes a new 20 MiB segment
// (calibration/results/hf_gpt2_warm_traces.jsonl.gz); the segments that
// followed differed, and the lm_head's backward found no free 393 MiB
// block for its second clone of the loss's gradient.
func embeddingLocals(f *schedule.Flow, h *schedule.Holds, last map[string]int32) {
	g := f.Graph()
	lists := blockLists(g)
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.OpType != "Gather" || len(n.Inputs) < 2 || !f.Runs(int32(i)) {
			continue
		}
		w := &g.Values[n.Inputs[0]]
		if w.Kind != ir.Initializer || len(w.Dims) != 2 || !w.DType.IsFloat() {
			continue
		}
		parts := nodePath(n.Name)
		if len(parts) < 2 || !slices.Equal(lists[parts[0]], parts[:len(parts)-1]) {
			continue
		}
		end, ok := last["/"+strings.Join(parts[:len(parts)-1], "/")+"/"]
		if ok && end > int32(i) {
			h.Until[i] = append(h.Until[i], schedule.Hold{V: n.Outputs[0], End: end})
		}
	}
}

// tokenModel reports whether g takes token ids: an integer graph input, a
// text model's input_ids.
func tokenModel(g *ir.Graph) bool {
	for _, v := range g.Inputs {
		switch g.Values[v].DType {
		case ir.Int64, ir.Int32:
			return true
		}
	}
	return false
}

// InPlace says, by node, which ops of the forward run in place, which the
// graph cannot say: torch.onnx exports relu_ and relu alike. A
// transformers text model (one that takes token ids, tokenModel) runs
// none in place: its activations are ACT2FN's modules, nn.ReLU()
// among them, and its sums residual + hidden_states (OPT's ReLU in place
// put its float32 reserved peak 24% high). Otherwise the rule is the
// convention of torchvision's CNN modules, the common source of these
// graphs, read from their source:
//
//   - a Relu or HardSwish runs in place when its input is the output of a
//     BatchNormalization, a Gemm, an Add, a Conv or an op that ran in
//     place, and no other op reads that input: Conv2dNormActivation and
//     ResNet's blocks build nn.ReLU(inplace=True) and
//     nn.Hardswish(inplace=True) after their norm layers (and resnet's
//     relu after out += identity, RegNet's after its sum), AlexNet's,
//     SqueezeNet's and VGG's plain convolutions and Linears are followed by
//     nn.ReLU(inplace=True). The exceptions are the squeeze-excitation
//     block's ReLU, after a Conv of a globally pooled value (pooledInput):
//     torchvision.ops.SqueezeExcitation builds it out of place; and a ReLU
//     between a Conv and a BatchNormalization (normed), as timm's
//     ConvMixer builds nn.ReLU() out of place; and an activation of its
//     module's argument (argument), which no torchvision module runs in
//     place: timm's NormFreeBlock applies act1 = nn.ReLU() to its input
//     x out of place (traced: calibration/results/timm_nf_traces.jsonl.gz),
//     and its act3 too (nfAct3), where act2 runs in place;
//   - a LeakyRelu runs in place when its input is a BatchNormalization
//     output that nothing else reads: timm's ConvNormAct and
//     BatchNormAct2d (Darknet's and CSPNet's layers) build it with
//     inplace=True; CSPNet's activation after a block's sum is built out
//     of place (calibration/timm_models.py: cspdarknet53's and
//     darknet53's peaks read 28% and 22% high with them out of place);
//   - a training Dropout runs in place after an in-place HardSwish
//     (MobileNetV3's classifier, Dropout(inplace=True)); AlexNet's, VGG's,
//     SqueezeNet's and MobileNetV2's nn.Dropout are out of place;
//   - a SiLU runs in place when its input is a BatchNormalization output
//     that nothing else reads: Conv2dNormActivation builds its activation
//     with inplace=True (EfficientNet's nn.SiLU); autograd keeps a clone
//     of the input, as for hardswish_;
//   - an Add runs in place into its first operand (x += y) when that
//     operand is a BatchNormalization output that no other op reads, or
//     the product of one tensor by a parameter or by stochastic depth's
//     random noise: ResNet's out += identity, MobileNetV3's
//     result += input after the block's last norm, EfficientNet's and
//     ConvNeXt's result += input after stochastic depth (or ConvNeXt's
//     layer scale, where stochastic depth is off) (scaled). Three sums of
//     the same shape are written out of place and stay so: MobileNetV2's
//     x + conv(x), whose first operand is the block's input, read by its
//     first conv too; RegNet's
//     proj(x) + f(x), whose first operand normalizes a Conv of the block's
//     input, which the other branch reads too (projection); and MNASNet's
//     self.layers(input) + input and timm's Residual (ConvMixer's
//     self.fn(x) + x, traced: calibration/results/timm_b1amp_traces.jsonl.gz),
//     told by the scope of the norm, its branch module named layers or fn
//     (branch);
//   - everything else is out of place: MobileNetV2's ReLU6(inplace=True)
//     (Clip) keeps, measured, as much as out of place; the
//     squeeze-excitation block's Hardsigmoid and Sigmoid.
//
// A module that differs is simulated the way of its torchvision
// counterpart. Running an op out of place costs one more activation-sized
// output while it runs, freed with its input right after, and moves where
// later blocks fit: SqueezeNet's conv-ReLUs in place put its reserved peaks
// at the measured ones (they read 8.5% low out of place), and MNASNet's and
// RegNet's out-of-place sums, EfficientNet V2's in-place ones, did the same
// for theirs (TestInPlaceTorchvision names the exports; docs/accuracy.md
// holds the measured errors). No op whose input anything else still reads
// runs in place, so the rule changes what autograd saves only for a SiLU
// (a clone of its input, of the same bytes, instead of the input) and for
// an in-place Dropout (float noise instead of a bool mask).
func InPlace(f *schedule.Flow) []bool {
	g := f.Graph()
	ip := make([]bool, len(g.Nodes))
	if tokenModel(g) {
		return ip
	}
	scopes := make(map[string]int) // running nodes per scope
	for i := range g.Nodes {
		if f.Runs(int32(i)) {
			scopes[schedule.ScopeOf(g.Nodes[i].Name)]++
		}
	}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if !f.Runs(int32(i)) {
			continue
		}
		x, free := f.Overwritable(int32(i))
		if !free {
			continue
		}
		p := g.Values[x].Producer
		from := g.Nodes[p].OpType
		if _, silu := f.SiLU(int32(i)); silu {
			// Conv2dNormActivation's nn.SiLU(inplace=True) after its norm
			// (EfficientNet's blocks); the squeeze-excitation's SiLU,
			// after a Conv, is built out of place.
			ip[i] = from == "BatchNormalization"
			continue
		}
		switch n.OpType {
		case "Relu", "HardSwish":
			ip[i] = (from == "BatchNormalization" || from == "Gemm" || from == "Add" || ip[p] ||
				(n.OpType == "Relu" && from == "Conv" && !pooledInput(g, p) && !normed(g, n))) &&
				!argument(f, scopes, int32(i), p) && nfAct3(f, int32(i)) < 0
		case "LeakyRelu":
			// timm's ConvNormAct and BatchNormAct2d build their
			// activation with inplace=True; a block's activation after
			// its sum (create_act_layer's default) is out of place.
			ip[i] = from == "BatchNormalization"
		case "Dropout":
			ip[i] = from == "HardSwish" && ip[p]
		case "Add":
			into := from == "BatchNormalization" && !projection(f, p, n.Inputs[1]) && !slices.Contains([]string{"layers", "fn"}, branch(n.Name, g.Nodes[p].Name)) ||
				from == "Mul" && scaled(f, p)
			// addcmul's sum (fuse) is its one kernel's output: the
			// product's, whatever the other operand.
			addcmul := from == "Mul" && g.Nodes[p].IntAttr("addcmul", 0) != 0
			ip[i] = (into || addcmul) && len(n.Inputs) == 2 && (f.Data(n.Inputs[1]) || addcmul) &&
				slices.Equal(f.Shapes().Dims[x], f.Shapes().Dims[n.Outputs[0]])
		}
	}
	return ip
}

// argument reports whether activation node i reads the output of node p
// as an argument of the module whose forward applies it: p ran outside the
// module that holds node i's own scope (its activation module's parent,
// when node i is the only op of its scope that runs, scopes counting them). torchvision's
// in-place activations read what their own block computed; timm's
// NormFreeBlock applies act1 = nn.ReLU() to its argument x out of place,
// and the caller's reference keeps x alive besides (ArgumentHolds).
func argument(f *schedule.Flow, scopes map[string]int, i, p int32) bool {
	g := f.Graph()
	scope := schedule.ScopeOf(g.Nodes[i].Name)
	if scopes[scope] == 1 {
		if j := strings.LastIndexByte(strings.TrimSuffix(scope, "/"), '/'); j >= 0 {
			scope = scope[:j+1]
		}
	}
	return scope != "/" && !strings.HasPrefix(g.Nodes[p].Name, scope)
}

// projection reports whether batch norm node p, whose output is added to
// other, normalizes a Conv of a value that other running nodes read too,
// other than other itself: a shortcut's projection of a block's input
// (RegNet's proj(x) + f(x)), not the last norm of a block's own path.
func projection(f *schedule.Flow, p int32, other ir.ValueID) bool {
	g := f.Graph()
	c := g.Values[g.Nodes[p].Inputs[0]].Producer
	if c < 0 || g.Nodes[c].OpType != "Conv" || g.Nodes[c].Inputs[0] == other {
		return false
	}
	readers := 0
	for _, r := range g.Values[g.Nodes[c].Inputs[0]].Consumers {
		if f.Runs(r) {
			readers++
		}
	}
	return readers > 1
}

// branch returns the child module, of the module that ran node name, in
// which node inner ran, by the scope names torch.onnx gives nodes
// ("/layers/layers.8/layers.8.1/Add" and
// "/layers/layers.8/layers.8.1/layers/layers.7/BatchNormalization" give
// "layers"); "" when inner ran elsewhere.
func branch(name, inner string) string {
	slash := strings.LastIndexByte(name, '/')
	if slash < 0 {
		return "" // a name without a scope
	}
	rest, ok := strings.CutPrefix(inner, name[:slash+1])
	if !ok {
		return ""
	}
	child, _, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	return child
}

// normed reports whether a BatchNormalization reads node n's output: an
// activation between a convolution and its norm, as timm's ConvMixer
// builds nn.ReLU() (out of place: calibration §29's trace of its AMP step
// makes the activation's output and then frees the convolution's).
func normed(g *ir.Graph, n *ir.Node) bool {
	for _, c := range g.Values[n.Outputs[0]].Consumers {
		if g.Nodes[c].OpType == "BatchNormalization" {
			return true
		}
	}
	return false
}

// pooledInput reports whether node p reads a globally pooled value.
func pooledInput(g *ir.Graph, p int32) bool {
	x := g.Nodes[p].Inputs[0]
	q := g.Values[x].Producer
	if q < 0 {
		return false
	}
	switch g.Nodes[q].OpType {
	case "GlobalAveragePool", "ReduceMean":
		return true
	}
	return false
}

// scaled reports whether Mul node p multiplies one activation by a
// parameter (ConvNeXt's layer scale) or by stochastic depth's noise, drawn
// by a RandomUniformLike or RandomNormalLike a few nodes up: the products
// that torchvision's blocks then add their input to in place.
func scaled(f *schedule.Flow, p int32) bool {
	g := f.Graph()
	if f.DataInputs(p) != 1 {
		return false
	}
	for _, v := range g.Nodes[p].Inputs {
		if f.Data(v) {
			continue
		}
		if g.Values[v].Kind == ir.Initializer || f.Drawn(v) {
			return true
		}
	}
	return false
}
