package generic

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

func TestModuleKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/layer1/layer1.0/conv1/Conv", "layer1.0"},
		{"/layer1/0/conv1/Conv", "layer1.0"},
		{"/features/features.4/block/block.2/avgpool/GlobalAveragePool", "features.4"},
		{"layer1.0.conv1.weight", "layer1.0"},
		{"features.12.0.weight", "features.12"},
		{"/conv1/Conv", "conv1"},
		{"/fc/Gemm", "fc"},
		{"fc.bias", "fc"},
		{"/encoder/layers/encoder_layer_3/mlp/Gelu", "encoder"},
		{"/Flatten", ""},
		{"images", ""},
		{"onnx::Conv_12", ""},
		{"['', 'layer1.0']", "layer1.0"},
		{"['', 'layer1.0', 'layer1.0.conv1']", "layer1.0"},
		{"['', 'fc']", "fc"},
		{"['']", ""},
		{": torchvision.models.resnet.ResNet/layer1.0: torchvision.models.resnet.BasicBlock/conv1", "layer1.0"},
		{": models.yolo.DetectionModel/model.38: models.yolo.DualDDetect/cat_61", "model.38"},
		{": torchvision.models.resnet.ResNet/flatten", ""},
		{"/", ""},
		{"", ""},
	} {
		if got := moduleKey(tc.in); got != tc.want {
			t.Errorf("moduleKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestResNet18Layers checks the layers of torchvision's resnet18 export:
// conv1, bn1, relu, maxpool, the eight blocks of layer1 to layer4, avgpool
// and fc, in order, with the root's Flatten in avgpool's layer.
func TestResNet18Layers(t *testing.T) {
	g, err := ir.LoadFile(onnxbuild.Shared(t, "torchvision/resnet18-train.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if g, err = (Family{}).Prepare(g); err != nil {
		t.Fatal(err)
	}
	first := map[int]string{}
	n := 0
	for _, node := range g.Nodes {
		if node.Layer < 0 {
			if node.OpType != "Constant" {
				t.Errorf("node %s (%s) has no layer", node.Name, node.OpType)
			}
			continue
		}
		if _, ok := first[node.Layer]; !ok {
			first[node.Layer] = node.Name
		}
		n = max(n, node.Layer+1)
		if node.Name == "/Flatten" && first[node.Layer] != "/avgpool/GlobalAveragePool" {
			t.Errorf("/Flatten is in layer %d, which starts at %s", node.Layer, first[node.Layer])
		}
	}
	if n != 14 {
		t.Errorf("%d layers, want 14: conv1, bn1, relu, maxpool, 8 blocks, avgpool, fc", n)
	}
	if first[4] != "/layer1/layer1.0/conv1/Conv" || first[13] != "/fc/Gemm" {
		t.Errorf("layer 4 starts at %s and layer 13 at %s", first[4], first[13])
	}
}

// TestBranch checks branch, the child module of an Add's module that its
// operand's node ran in.
func TestBranch(t *testing.T) {
	for _, c := range []struct{ name, inner, want string }{
		{"/layers/layers.8/layers.8.1/Add", "/layers/layers.8/layers.8.1/layers/layers.7/BatchNormalization", "layers"},
		{"/features/features.3/Add", "/features/features.3/block/block.3/block.3.1/BatchNormalization", "block"},
		{"/layer1/layer1.0/Add", "/layer1/layer1.0/bn3/BatchNormalization", "bn3"},
		{"/layer1/layer1.0/Add", "/layer1/layer1.0/Relu", ""},
		{"/layer1/layer1.0/Add", "/layer2/layer2.0/bn3/BatchNormalization", ""},
		{"Add_3", "bn/BatchNormalization", ""},
	} {
		if got := branch(c.name, c.inner); got != c.want {
			t.Errorf("branch(%q, %q) = %q, want %q", c.name, c.inner, got, c.want)
		}
	}
}

// TestInPlaceTorchvision checks which ops of torchvision's exports the
// family runs in place: in resnet18 every ReLU (the stem's, each block's
// two) and each block's out += identity; in mobilenet_v3_large every
// activation after a norm layer (11 ReLU, 20 Hardswish), the ten residual
// result += input and the classifier's Hardswish and Dropout, but not the
// eight squeeze-excitation blocks' ReLU, Hardsigmoid and scale * input.
func TestInPlaceTorchvision(t *testing.T) {
	for _, c := range []struct {
		file        string
		in, outside map[string]int
	}{
		{"resnet18", map[string]int{"Relu": 17, "Add": 8}, map[string]int{}},
		{"mobilenet_v3_large", map[string]int{"HardSwish": 21, "Relu": 11, "Add": 10, "Dropout": 1},
			map[string]int{"Relu": 8, "HardSigmoid": 8, "Mul": 8}},
		// The exports of calibration/results/tv: every conv's and Linear's
		// ReLU in place, Dropout out of place; MNASNet's and RegNet's sums
		// out of place (22 and 16 blocks: two ReLUs each, and the one after
		// RegNet's sum), RegNet Y's squeeze-excitation out of place;
		// EfficientNet V2's and ConvNeXt's result += input in place (34 and
		// 36 residual blocks) and its 72 SiLUs after norms; nothing in
		// MobileNetV2 (ReLU6, x + conv(x)).
		{"squeezenet1_1", map[string]int{"Relu": 26}, nil},
		{"alexnet", map[string]int{"Relu": 7}, nil},
		{"mnasnet1_0", map[string]int{"Relu": 35}, nil},
		{"regnet_x_400mf", map[string]int{"Relu": 67}, nil},
		{"regnet_y_400mf", map[string]int{"Relu": 49}, map[string]int{"Relu": 16, "Sigmoid": 16}},
		{"efficientnet_v2_s", map[string]int{"Add": 34, "Mul": 72}, map[string]int{"Mul": 60, "Sigmoid": 60}},
		{"convnext_small", map[string]int{"Add": 36}, nil},
		{"mobilenet_v2", nil, nil},
		// timm's Darknet: every LeakyReLU after its norm in place
		// (ConvNormAct's inplace=True).
		{"../timm/cspdarknet53", map[string]int{"LeakyRelu": 67}, nil},
		// timm's NFNet: each block's act1, an nn.ReLU() on the block's
		// argument, and its act3 out of place (32 of its 49 ReLUs); act2
		// and the final_act in place (nfAct3, calibration §34).
		{"../timm/nf_resnet50", map[string]int{"Relu": 17}, nil},
		// timm's ConvMixer: its ReLUs between conv and norm and its
		// Residual's fn(x) + x out of place, nothing in place.
		{"../timm/convmixer_768_32", nil, nil},
	} {
		path := measured.Path("tv/") + c.file + "-train.onnx"
		if c.file == "resnet18" || c.file == "mobilenet_v3_large" { // the ground truth's
			path = onnxbuild.Shared(t, "torchvision/"+c.file+"-train.onnx")
		}
		g, err := ir.LoadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if g, err = (Family{}).Prepare(g); err != nil {
			t.Fatal(err)
		}
		s, err := g.Infer(ir.Binding{Batch: 2, Height: 224, Width: 224})
		if err != nil {
			t.Fatal(err)
		}
		var ip []bool
		if _, err := schedule.Build(g, s, schedule.Config{Holder: holderFunc(func(f *schedule.Flow) *schedule.Holds {
			h := Family{}.Holds(f)
			ip = h.InPlace
			return h
		})}); err != nil {
			t.Fatal(err)
		}
		in, outside := map[string]int{}, map[string]int{}
		for i, n := range g.Nodes {
			switch {
			case ip[i]:
				in[n.OpType]++
			case strings.Contains(n.Name, "/activation/") || strings.Contains(n.Name, "/scale_activation/") || strings.HasSuffix(n.Name, "/block.2/Mul"):
				outside[n.OpType]++ // mobilenet's squeeze-excitation blocks
			}
		}
		if !maps.Equal(in, c.in) || !maps.Equal(outside, c.outside) {
			t.Errorf("%s: in place %v, want %v; squeeze-excitation ops out of place %v, want %v", c.file, in, c.in, outside, c.outside)
		}
	}
}

type holderFunc func(*schedule.Flow) *schedule.Holds

func (h holderFunc) Holds(f *schedule.Flow) *schedule.Holds { return h(f) }

// TestCrossEntropyRecipe checks the generic family's train step: the
// cross-entropy loss on logits ([batch, classes], [batch, sequence,
// vocabulary]) with dense gradients, a sum's expanded seed for any other
// output; in half precision a causal LM's logits upcast first, any
// other's log-softmax in their type (with nll_loss's float32 copy under
// autocast); and no named script.
func TestCrossEntropyRecipe(t *testing.T) {
	r := Family{}.Recipe(nil, schedule.AdamW, false, 0)
	if r.Optimizer != schedule.AdamW || r.EMA || !r.GradScaler || r.Loss != (crossEntropy{}) {
		t.Fatalf("recipe %+v, want AdamW, no EMA, GradScaler, cross-entropy without an upcast", r)
	}
	outs := []schedule.Output{
		{Dims: []int64{2, 8, 100}, DType: ir.Float16},  // logits
		{Dims: []int64{2, 3, 4, 4}, DType: ir.Float16}, // a feature map: summed
	}
	for _, c := range []struct {
		what     string
		loss     crossEntropy
		amp      bool
		fwd, bwd []int64
	}{
		// Upcast 2·8·100·4, log-softmax as much, 16 int64 targets, the
		// loss and its total weight; the upcast freed; the map's 4-byte
		// sum. Backward: nll_loss_backward's and log_softmax_backward's
		// float32 gradients, the frees, then the float16 gradient of the
		// logits.
		{"causal LM, amp", crossEntropy{upcast: true}, true,
			[]int64{6400, 6400, 128, 4, 4, -6400, 4},
			[]int64{6400, 6400, -6400, -6400, -128, -4, -4, 3200, -6400}},
		// The float16 log-softmax, nll_loss's float32 copy, targets, loss,
		// total weight, the sum. Backward: nll_loss_backward in float32,
		// the copy freed, cast back to float16, log_softmax_backward in
		// float16 (as hf_ce_traces.jsonl.gz's BERT).
		{"masked LM or classifier, amp", crossEntropy{}, true,
			[]int64{3200, 6400, 128, 4, 4, 4},
			[]int64{6400, -6400, 3200, -6400, 3200, -3200, -3200, -128, -4, -4}},
		// model.half(): all of it in float16.
		{"classifier, half", crossEntropy{}, false,
			[]int64{3200, 128, 4, 4, 4},
			[]int64{3200, 3200, -3200, -3200, -128, -4, -4}},
	} {
		in := schedule.LossInput{Batch: 2, AMP: c.amp, Outputs: outs}
		tp := &recTape{}
		saved := c.loss.Forward(tp, in)
		if !slices.Equal(tp.ev, c.fwd) || len(saved) != 6 {
			t.Errorf("%s: forward events %v, saved %d; want %v and 6", c.what, tp.ev, len(saved), c.fwd)
		}
		tp.ev = nil
		grads := c.loss.Backward(tp, in, saved)
		if !slices.Equal(tp.ev, c.bwd) || len(grads) != 2 || grads[1] != saved[5] {
			t.Errorf("%s: backward events %v, grads %v; want %v and the sum's seed", c.what, tp.ev, grads, c.bwd)
		}
	}
	in := schedule.LossInput{Outputs: outs}
	if !r.Loss.(crossEntropy).DenseGrad(in, 0) || r.Loss.(crossEntropy).DenseGrad(in, 1) {
		t.Errorf("dense gradients: logits %v, map %v; want true, false", crossEntropy{}.DenseGrad(in, 0), crossEntropy{}.DenseGrad(in, 1))
	}
	if err := (Family{}).CheckTrain(outs, "train"); err == nil {
		t.Errorf("a named script passes")
	}
}

// TestCausalLM checks which transformers exports are causal language
// models, whose loss upcasts the logits: the decoders, not the encoders of
// masked LMs.
func TestCausalLM(t *testing.T) {
	for _, tc := range []struct {
		file   string
		causal bool
	}{
		{"hf/gpt2-train.onnx", true}, {"hf/gpt2-eager-train.onnx", true}, {"hf/llama-train.onnx", true},
		{"hf/qwen2-train.onnx", true}, {"hf/opt-train.onnx", true},
		{"hf/bert-train.onnx", false}, {"hf/distilbert-train.onnx", false},
	} {
		g := preparedExport(t, tc.file)
		if got := causalLM(g); got != tc.causal {
			t.Errorf("%s: causal %v, want %v", tc.file, got, tc.causal)
		}
		if r := (Family{}).Recipe(g, schedule.AdamW, false, 0); r.Loss != (crossEntropy{upcast: tc.causal}) {
			t.Errorf("%s: loss %+v, want upcast %v", tc.file, r.Loss, tc.causal)
		}
	}
}

// preparedExport loads one of calibration/results' exports and prepares it
// as the generic family does.
func preparedExport(t *testing.T, file string) *ir.Graph {
	t.Helper()
	b, err := os.ReadFile(measured.Path(file))
	if err != nil {
		t.Fatal(err)
	}
	g, err := ir.Load(b)
	if err != nil {
		t.Fatal(err)
	}
	if g, err = (Family{}).Prepare(g); err != nil {
		t.Fatal(err)
	}
	return g
}

// recTape records a loss's allocations as their sizes and its frees as
// the freed sizes negated.
type recTape struct {
	ev   []int64
	size []int64
}

func (r *recTape) Alloc(bytes int64, what string) schedule.Buf {
	r.ev = append(r.ev, bytes)
	r.size = append(r.size, bytes)
	return schedule.Buf(len(r.size) - 1)
}

func (r *recTape) Free(b schedule.Buf) { r.ev = append(r.ev, -r.size[b]) }

// TestTransformerLayers checks that a transformers model's top-level
// layers are its blocks and the modules beside them, in node order:
// GPT-2's wte, wpe, their sum, drop, h.0 … h.11, ln_f and lm_head.
func TestTransformerLayers(t *testing.T) {
	for _, tc := range []struct {
		file   string
		layers int
	}{{"hf/gpt2-train.onnx", 18}, {"hf/bert-train.onnx", 15}, {"hf/llama-train.onnx", 11}} {
		g := preparedExport(t, tc.file)
		last := -1
		for _, n := range g.Nodes {
			if n.Layer >= 0 && n.Layer < last {
				t.Fatalf("%s: node %s in layer %d after layer %d", tc.file, n.Name, n.Layer, last)
			}
			last = max(last, n.Layer)
		}
		if last+1 != tc.layers {
			t.Errorf("%s: %d layers, want %d", tc.file, last+1, tc.layers)
		}
	}
}

// TestGPT2Locals checks gpt2Locals on the GPT-2 export of
// calibration/hf_models.py: in each of its twelve blocks ln_1's output held
// until the attention's residual add, ln_2's until the MLP's and the
// attention's output to the block's end (36 holds); and, with each
// block's first residual add taking x first, as nanoGPT's and CLIP's
// blocks of the same module names write x = x + self.attn(self.ln_1(x)),
// none: those blocks keep no locals.
func TestGPT2Locals(t *testing.T) {
	for _, nanoGPT := range []bool{false, true} {
		g, err := ir.LoadFile(measured.Path("hf/gpt2-train.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		if g, err = (Family{}).Prepare(g); err != nil {
			t.Fatal(err)
		}
		if nanoGPT {
			swapped := 0
			for i := range g.Nodes {
				n := &g.Nodes[i]
				if n.OpType != "LayerNormalization" || !strings.HasSuffix(schedule.ScopeOf(n.Name), "/ln_1/") {
					continue
				}
				for j := i + 1; j < len(g.Nodes); j++ {
					if m := &g.Nodes[j]; m.OpType == "Add" && slices.Contains(m.Inputs, n.Inputs[0]) {
						m.Inputs[0], m.Inputs[1] = m.Inputs[1], m.Inputs[0]
						swapped++
						break
					}
				}
			}
			if swapped != 12 {
				t.Fatalf("%d residual adds after ln_1, want 12", swapped)
			}
		}
		s, err := g.Infer(ir.Binding{Batch: 2, Seq: 16})
		if err != nil {
			t.Fatal(err)
		}
		holds := 0
		if _, err := schedule.Build(g, s, schedule.Config{Holder: holderFunc(func(f *schedule.Flow) *schedule.Holds {
			h := &schedule.Holds{Until: make([][]schedule.Hold, len(f.Graph().Nodes))}
			gpt2Locals(f, h, f.LastInScope())
			for _, hs := range h.Until {
				holds += len(hs)
			}
			return Family{}.Holds(f)
		})}); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{false: 36, true: 0}[nanoGPT]; holds != want {
			t.Errorf("nanoGPT's operand order %v: %d holds, want %d", nanoGPT, holds, want)
		}
	}
}

// TestCoatLocals checks CoaT's locals on timm's coat_lite_tiny export
// (calibration/timm_models.py): fuse puts .contiguous() back after each of
// the three permutes of forward_features that feed the next patch
// embedding (x1_nocls … x3_nocls), and coatLocals holds each copy and each
// serial stage's output x1 … x3 until norm4's last node: six holds. With
// parallel blocks (a node renamed into /parallel_blocks/), which rebind
// x1 … x4, only the three copies are held.
func TestCoatLocals(t *testing.T) {
	for _, parallel := range []bool{false, true} {
		g, err := ir.LoadFile(measured.Path("timm/coat_lite_tiny-train.onnx"))
		if err != nil {
			t.Fatal(err)
		}
		if g, err = (Family{}).Prepare(g); err != nil {
			t.Fatal(err)
		}
		copies := 0
		for _, n := range g.Nodes {
			if n.OpType == "Contiguous" {
				copies++
			}
		}
		if copies != 3 {
			t.Fatalf("%d Contiguous nodes after Prepare, want 3", copies)
		}
		// Fusing again puts no second copy after the first.
		again, err := fuse(g)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(again.Nodes) - len(g.Nodes); n != 0 {
			t.Errorf("fusing a fused graph added %d nodes", n)
		}
		if parallel {
			// The head's linear stands for a parallel block: only its
			// scope is asked.
			for i := range g.Nodes {
				if strings.HasPrefix(g.Nodes[i].Name, "/head/") {
					g.Nodes[i].Name = "/parallel_blocks/parallel_blocks.0" + g.Nodes[i].Name
				}
			}
		}
		s, err := g.Infer(ir.Binding{Batch: 2, Height: 224, Width: 224})
		if err != nil {
			t.Fatal(err)
		}
		var got []schedule.Hold
		var end int32
		if _, err := schedule.Build(g, s, schedule.Config{Holder: holderFunc(func(f *schedule.Flow) *schedule.Holds {
			h := &schedule.Holds{Until: make([][]schedule.Hold, len(f.Graph().Nodes))}
			last := f.LastInScope()
			end = last["/norm4/"]
			coatLocals(f, h, last)
			for _, hs := range h.Until {
				got = append(got, hs...)
			}
			return Family{}.Holds(f)
		})}); err != nil {
			t.Fatal(err)
		}
		want := map[bool]int{false: 6, true: 3}[parallel]
		if len(got) != want {
			t.Errorf("parallel blocks %v: %d holds, want %d", parallel, len(got), want)
		}
		for _, h := range got {
			if h.End != end {
				t.Errorf("parallel blocks %v: %s held until node %d, want norm4's last, %d", parallel, g.Values[h.V].Name, h.End, end)
			}
		}
	}
}

// TestArgumentLocals builds timm's DlaTree (shortcut = self.project(bottom);
// x1 = self.tree1(x, shortcut); x = self.root(self.tree2(x1), x1)): the
// project's output is a local of the tree's forward, held until the tree
// returns, not only until tree1 does; and a Sequential whose blocks pass two
// tensors along (DPN's (resid, dense)) holds nothing more.
func TestArgumentLocals(t *testing.T) {
	bd := onnxbuild.New("dla")
	x := bd.Input("images", 8)
	stem := bd.Module("stem").Conv(x, 16, 3, 1)
	lv := bd.Module("level2")
	bottom := lv.Sub("downsample").MaxPool(stem, 2, 2, 0)
	shortcut := lv.Sub("project").Conv(bottom, 32, 1, 1)
	tree1 := lv.Sub("tree1")
	x1 := tree1.Add(tree1.Sub("conv1").Conv(stem, 32, 3, 2), shortcut)
	x2 := lv.Sub("tree2").Conv(x1, 32, 3, 1)
	root := lv.Sub("root")
	out := root.Sub("conv").Conv(root.Concat(x2, x1), 32, 1, 1)
	// A Sequential of two blocks that take and return two tensors.
	seq := bd.Module("features")
	b0, b1 := seq.Sub("block0"), seq.Sub("block1")
	r0 := b0.Sub("c").Conv(out, 32, 1, 1)
	d0 := b0.Sub("d").Conv(out, 32, 1, 1)
	r1 := b1.Add(b1.Sub("c").Conv(r0, 32, 1, 1), d0)
	bd.Output(bd.Module("head").Conv(r1, 8, 1, 1))
	data, err := bd.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	g, err := ir.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	s, err := g.Infer(ir.Binding{Batch: 2, Height: 32, Width: 32})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if _, err := schedule.Build(g, s, schedule.Config{Holder: holderFunc(func(f *schedule.Flow) *schedule.Holds {
		h := &schedule.Holds{Until: make([][]schedule.Hold, len(g.Nodes))}
		last := f.LastInScope()
		argumentLocals(f, h, last)
		for i, hs := range h.Until {
			for _, x := range hs {
				got = append(got, g.Nodes[g.Values[x.V].Producer].Name+" read by "+g.Nodes[i].Name+" until "+g.Nodes[x.End].Name)
			}
		}
		return Family{}.Holds(f)
	})}); err != nil {
		t.Fatal(err)
	}
	want := []string{"/level2/project/Conv read by /level2/tree1/Add until /level2/root/conv/Conv"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("holds (-want +got):\n%s", diff)
	}
}

// TestNFBlockLocals checks timm's NormFreeBlock on nf_resnet50's export:
// act2 runs in place and act3 out of place, act3's input (conv2's
// output) is held until conv3's Conv and conv3's output until the
// block's residual sum, in each of the 16 blocks.
func TestNFBlockLocals(t *testing.T) {
	g, err := ir.LoadFile(measured.Path("timm/nf_resnet50-train.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if g, err = (Family{}).Prepare(g); err != nil {
		t.Fatal(err)
	}
	s, err := g.Infer(ir.Binding{Batch: 2, Height: 256, Width: 256})
	if err != nil {
		t.Fatal(err)
	}
	var holds []string
	inPlace := map[string]int{}
	if _, err := schedule.Build(g, s, schedule.Config{Holder: holderFunc(func(f *schedule.Flow) *schedule.Holds {
		h := &schedule.Holds{Until: make([][]schedule.Hold, len(g.Nodes))}
		nfBlockLocals(f, h, f.LastInScope())
		for i, hs := range h.Until {
			for _, x := range hs {
				holds = append(holds, g.Nodes[g.Values[x.V].Producer].OpType+" read by "+g.Nodes[i].OpType+" until "+g.Nodes[x.End].Name[strings.LastIndexByte(g.Nodes[x.End].Name[:strings.LastIndexByte(g.Nodes[x.End].Name, '/')], '/')+1:])
			}
		}
		for i, ip := range InPlace(f) {
			if name := g.Nodes[i].Name; ip && strings.HasSuffix(name, "/Relu") {
				inPlace[name[strings.LastIndexByte(name[:len(name)-len("/Relu")], '/')+1:]]++
			}
		}
		return Family{}.Holds(f)
	})}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"Conv read by Relu until conv3/Conv": 16, "Conv read by Mul until stages.0.0/Add": 1}
	got := map[string]int{}
	for _, h := range holds {
		got[h]++
	}
	if got["Conv read by Relu until conv3/Conv"] != 16 || got["Conv read by Mul until stages.0.0/Add"] != 1 || len(holds) != 32 {
		t.Errorf("holds %v, want 32 with %v among them", got, want)
	}
	// The network's final_act is built with inplace=True as well.
	if diff := cmp.Diff(map[string]int{"act2/Relu": 16, "final_act/Relu": 1}, inPlace); diff != "" {
		t.Errorf("in-place ReLUs (-want +got):\n%s", diff)
	}
}
