package schedule

import (
	"fmt"
	"strings"
	"sync"

	"github.com/onnxmem/onnxmem/ir"
)

// Precision is how the step computes.
type Precision uint8

// The precisions.
const (
	// FP32 runs everything in the graph's types (float32 for YOLOv9).
	FP32 Precision = iota
	// AMP runs the forward under torch.autocast('cuda', torch.float16):
	// convolutions cast their weights (cached until autocast exits) and
	// inputs to float16 and return float16; other ops keep their input's
	// type; parameters and their gradients stay float32.
	AMP
	// AMPBF16 is autocast to bfloat16, which has the sizes of AMP.
	AMPBF16
	// Half is model.half() with a half input: parameters, activations and
	// gradients are all float16 (batch-norm statistics stay float32).
	Half
)

var precisionNames = [...]string{"fp32", "amp", "amp-bf16", "half"}

// String returns the precision's short name.
func (p Precision) String() string {
	if int(p) < len(precisionNames) {
		return precisionNames[p]
	}
	return "unknown"
}

// Range is a half-open range [From, To) of top-level layers.
type Range struct{ From, To int }

// Sequential returns the layer ranges that
// torch.utils.checkpoint.checkpoint_sequential checkpoints when it cuts n
// layers into k segments: size = n / k, and the first k-1 chunks of size
// layers each; the rest runs normally. k < 2 checkpoints nothing.
func Sequential(n, k int) []Range {
	if k < 2 || n < 1 {
		return nil
	}
	size := n / k
	var out []Range
	for c := 0; c < k-1; c++ {
		out = append(out, Range{From: c * size, To: (c + 1) * size})
	}
	return out
}

// EachLayer returns a plan that checkpoints every one of n top-level layers
// on its own, the most memory-frugal plan and the most recompute.
func EachLayer(n int) []Range {
	out := make([]Range, n)
	for i := range out {
		out[i] = Range{From: i, To: i + 1}
	}
	return out
}

// Config says how the step is run.
type Config struct {
	Precision Precision
	// Train, when not nil, runs a full training step of train_dual.py around
	// the network: the batch's upload, the loss, the optimizer step and the
	// EMA update, with the EMA copy, the optimizer's state and the cuBLAS
	// workspace resident.
	Train *Train
	// Eval runs validation as train_dual.py does: the forward of a half
	// copy of the model (copy.deepcopy(model).eval().half()) under
	// torch.no_grad(), batch norm on its running statistics, and the
	// detection head's decode, with the float32 training model and the cuBLAS
	// workspace resident. It implies Half and ignores Checkpoint.
	Eval bool
	// CuBLASWorkspace is the bytes of the cuBLAS workspace that an earlier
	// matrix product left allocated; the eval step keeps it resident.
	CuBLASWorkspace int64
	// Checkpoint lists layer ranges run under
	// torch.utils.checkpoint.checkpoint(use_reentrant=False): their forward
	// keeps no saved tensors, only their inputs; the backward recomputes a
	// range when it first needs one of its saved tensors, and stops the
	// recomputation once all are back.
	Checkpoint []Range
	// Workspace, when set, returns the cuDNN workspace bytes that a conv
	// allocates and frees around its kernel; nil means none.
	Workspace func(c ConvCall) int64
}

// ConvCall describes one cuDNN convolution call, for workspace policies.
type ConvCall struct {
	Phase Phase
	// Which is "fwd", "bwd-data" or "bwd-filter".
	Which                          string
	N, Cin, Cout, H, W, OutH, OutW int64
	KH, KW, StrideH, StrideW       int64
	Groups                         int64
	ElemSize                       int64
}

// storage is one buffer while the program is built, with its holders.
type storage struct {
	buf  int32
	refs int32
}

// gradT is a gradient tensor: a storage and whether the tensor is all of it
// and contiguous (a narrow of a concat's gradient is neither).
type gradT struct {
	st     int32
	whole  bool
	contig bool
	bytes  int64
}

type builder struct {
	g   *ir.Graph
	s   *ir.Shapes
	cfg Config
	p   *Program

	data   []bool       // by value: holds device data
	param  []bool       // by value: a float initializer owned by the model
	rg     []bool       // by value: requires grad
	kind   []opKind     // by node
	siluIn []ir.ValueID // by node: the input of a fused SiLU

	// Forward state.
	st      []storage
	vst     []int32 // by value: storage index, or -1
	contig  []bool  // by value: a contiguous tensor
	saved   [][]int32
	phase   Phase
	node    int32
	paramOf []int32 // by value: resident buffer of a parameter, or -1

	dt []ir.DType // by value: the type eager PyTorch gives it
	// cast[v] is the storage of parameter v's autocast copy, or -1; casts
	// lists them in the order autocast's cache filled.
	cast  []int32
	casts []ir.ValueID

	li        layerInfo
	hold      []int   // by value: holdEnd under the config's checkpoint ranges
	noSave    bool    // the op runs inside a checkpointed range's forward
	stopAt    int32   // the node whose packing ends a recomputation, or -1
	hadSave   []bool  // by node: it would have saved a tensor
	chunkOf   []int   // by node: its checkpointed range, or -1
	ck        []chunk // the checkpointed ranges
	deferred  []int32 // storages only a suppressed save held, freed when the op returns
	decoded   []int32 // the eval head's decoded outputs, alive to the end of the step
	lossSaved []Buf   // what the training loss keeps for its backward

	// Backward state.
	slot       []int32 // by value: index into grads, or -1
	grads      []gradT
	paramGrads []int32 // by value: .grad buffer, or -1
	unrun      []int32 // nodes the backward never reached
	lossSt     int32
}

// Build returns the program of one training step of g at shapes s: the
// forward in train mode, the loss (the sum of every graph output's sum) and
// the backward. It fails, with an error starting "schedule: ", on an op that
// has no memory rule.
func Build(g *ir.Graph, s *ir.Shapes, cfg Config) (*Program, error) {
	if cfg.Eval {
		cfg.Precision, cfg.Checkpoint = Half, nil
	}
	b := &builder{g: g, s: s, cfg: cfg, p: &Program{Graph: g, Shapes: s}}
	nv, nn := len(g.Values), len(g.Nodes)
	b.data = make([]bool, nv)
	b.param = make([]bool, nv)
	b.rg = make([]bool, nv)
	b.kind = make([]opKind, nn)
	b.siluIn = make([]ir.ValueID, nn)
	b.vst = make([]int32, nv)
	b.contig = make([]bool, nv)
	b.slot = make([]int32, nv)
	b.paramOf = make([]int32, nv)
	b.paramGrads = make([]int32, nv)
	b.saved = make([][]int32, nn)
	b.stopAt = -1
	b.dt = append([]ir.DType(nil), s.DTypes...)
	b.cast = make([]int32, nv)
	for i := range b.vst {
		b.vst[i], b.slot[i], b.paramOf[i], b.paramGrads[i], b.cast[i] = -1, -1, -1, -1, -1
		if cfg.Precision == Half && isFloat(b.dt[i]) {
			b.dt[i] = ir.Float16
		}
	}
	if len(g.Inputs) == 0 {
		return nil, fmt.Errorf("schedule: graph %q has no input", g.Name)
	}
	for _, v := range g.Inputs {
		b.data[v] = true
	}
	b.markParams()
	if err := b.classify(); err != nil {
		return nil, err
	}
	if err := b.resident(); err != nil {
		return nil, err
	}
	b.noSave = cfg.Eval
	b.forward()
	training := cfg.Train != nil && cfg.Train.Loss != nil
	if training {
		// The loss runs inside the forward's autocast region.
		b.phase = LossPhase
		b.lossSaved = cfg.Train.Loss.Forward(tape{b}, b.lossInput())
	}
	b.exitAutocast()
	b.p.ForwardEnd = len(b.p.Events)
	if cfg.Eval {
		b.p.BackwardStart, b.p.BackwardEnd = b.p.ForwardEnd, b.p.ForwardEnd
		b.cleanup()
		return b.p, nil
	}
	if !training {
		b.loss()
	}
	b.p.BackwardStart = len(b.p.Events)
	if err := b.backward(); err != nil {
		return nil, err
	}
	b.p.BackwardEnd = len(b.p.Events)
	if cfg.Train != nil {
		b.optimizerStep()
	}
	b.cleanup()
	if cfg.Train != nil {
		b.p.ParamGrads = nil // zero_grad freed them inside the step
	}
	return b.p, nil
}

// markParams marks the float initializers that data ops read: the model's
// parameters and buffers.
func (b *builder) markParams() {
	for i := range b.g.Values {
		v := &b.g.Values[i]
		if v.Kind == ir.Initializer && isFloat(v.DType) && v.Data == nil && v.Floats == nil {
			b.param[i] = true
		} else if v.Kind == ir.Initializer && isFloat(v.DType) && len(v.Dims) > 0 {
			// Small float initializers with data are still weights when they
			// feed a Conv or BatchNormalization.
			for _, c := range v.Consumers {
				switch b.g.Nodes[c].OpType {
				case "Conv", "BatchNormalization":
					b.param[i] = true
				}
			}
		}
	}
}

// autocast reports whether the forward runs under autocast.
func (b *builder) autocast() bool {
	return b.cfg.Precision == AMP || b.cfg.Precision == AMPBF16
}

// low is the reduced type of the precision: float16 or bfloat16.
func (b *builder) low() ir.DType {
	if b.cfg.Precision == AMPBF16 {
		return ir.BFloat16
	}
	return ir.Float16
}

// bytes is the size of value v in the type eager PyTorch gives it.
func (b *builder) bytes(v ir.ValueID) int64 {
	return b.s.Elems(v) * b.dt[v].Size()
}

func (b *builder) newBuf(bytes int64, k Kind, v ir.ValueID) int32 {
	b.p.Buffers = append(b.p.Buffers, Buffer{Bytes: bytes, Kind: k, Value: v, Node: b.node})
	return int32(len(b.p.Buffers) - 1)
}

func (b *builder) emit(buf int32, free bool) {
	b.p.Events = append(b.p.Events, Event{Buf: buf, Free: free, Phase: b.phase, Node: b.node})
}

// resident lists the parameters and buffers in the order the model moves them
// to the device: initializer order, which the exporters take from the
// state_dict, with each training-mode batch norm's num_batches_tracked (an
// int64 scalar that the graph does not show) after its running variance.
func (b *builder) resident() error {
	b.node = -1
	bnVar := make(map[ir.ValueID]bool)
	for i := range b.g.Nodes {
		n := &b.g.Nodes[i]
		if b.kind[i] == opBatchNorm && len(n.Inputs) == 5 {
			bnVar[n.Inputs[4]] = true
		}
	}
	// The model, and for the eval step its half copy after it.
	copies := []func(ir.ValueID) int64{b.bytes}
	if b.cfg.Eval {
		copies = []func(ir.ValueID) int64{b.s.Bytes, b.bytes}
	}
	for _, size := range copies {
		for i := range b.g.Values {
			if !b.param[i] {
				continue
			}
			v := ir.ValueID(i)
			buf := b.newBuf(size(v), Param, v)
			b.paramOf[v] = buf
			b.p.Resident = append(b.p.Resident, buf)
			if bnVar[v] {
				b.p.Resident = append(b.p.Resident, b.newBuf(8, Param, ir.NoValue))
			}
		}
	}
	if b.cfg.Eval {
		if b.cfg.CuBLASWorkspace > 0 {
			b.p.Resident = append(b.p.Resident, b.newBuf(b.cfg.CuBLASWorkspace, Workspace, ir.NoValue))
		}
		// The head's anchor points and strides, made by the first eval
		// call at this image size (make_anchors) and kept in the module.
		if a, _ := HeadAnchors(b.g, b.s); a > 0 {
			es := ir.Float16.Size()
			b.p.Resident = append(b.p.Resident, b.newBuf(2*a*es, Param, ir.NoValue), b.newBuf(a*es, Param, ir.NoValue))
		}
	}
	if b.cfg.Train != nil {
		// The step uploads its own batch (loadBatch).
		b.p.Input = -1
		return b.trainResident(bnVar)
	}
	x := b.g.Inputs[0]
	b.p.Input = b.newBuf(b.bytes(x), Input, x)
	b.st = append(b.st, storage{buf: b.p.Input, refs: 1}) // held by the caller
	b.vst[x] = 0
	b.contig[x] = true
	return nil
}

// layerInfo is what _forward_once needs: for each layer the index of its last
// data node, and for each value the layer that keeps it.
type layerInfo struct {
	last    map[int]int32 // layer → last data node
	order   []int         // layers in order of their last node
	holdEnd []int         // by value: the layer after which the loop drops it; -2 = end of forward; -1 = no hold
	lastUse []int         // by value: the last layer that reads it, or -1
	scope   []int32       // by node: a Concat's inputs are held until this node has run, or -1
	// args[i] lists the values node i reads that a module's forward got as
	// an argument, with the last node of that module: Python keeps an
	// argument alive until the function returns.
	args [][]argHold
}

type argHold struct {
	v   ir.ValueID
	end int32
}

// scopeOf returns the module path of a node name: "/model.3/cv1/conv/Conv"
// → "/model.3/cv1/conv/".
func scopeOf(name string) string {
	return name[:strings.LastIndexByte(name, '/')+1]
}

// argHolds finds, for each read of each data node, the outermost module on
// the reader's call stack that does not contain the producer: the value is
// that module's argument, and lives until the module's last op.
func (b *builder) argHolds(li *layerInfo) {
	g := b.g
	last := make(map[string]int32)
	for i := range g.Nodes {
		if b.kind[i] == opMeta || b.kind[i] == opSkip {
			continue
		}
		sc := scopeOf(g.Nodes[i].Name)
		for j := 1; j < len(sc); j++ {
			if sc[j] == '/' {
				last[sc[:j+1]] = int32(i)
			}
		}
	}
	li.args = make([][]argHold, len(g.Nodes))
	for i := range g.Nodes {
		if b.kind[i] == opMeta || b.kind[i] == opSkip {
			continue
		}
		sc := scopeOf(g.Nodes[i].Name)
		// A tensor that a forward makes itself and then chunks is a local
		// variable: ADown's x = avg_pool2d(x, ...); x1, x2 = x.chunk(2, 1)
		// keeps the pooled map until ADown returns, after its convs and cat,
		// which shows where nothing saves it (checkpointed ranges, no_grad).
		if n := &g.Nodes[i]; b.kind[i] == opView && (n.OpType == "Slice" || n.OpType == "Split") {
			for _, v := range b.readsOf(int32(i)) {
				if p := g.Values[v].Producer; p >= 0 && scopeOf(g.Nodes[p].Name) == sc && sc != "" {
					if end := last[sc]; end > int32(i) {
						li.args[i] = append(li.args[i], argHold{v, end})
					}
				}
			}
		}
		for _, v := range b.readsOf(int32(i)) {
			from := ""
			if p := g.Values[v].Producer; p >= 0 {
				from = scopeOf(g.Nodes[p].Name)
			}
			for j := 1; j < len(sc); j++ {
				if sc[j] != '/' {
					continue
				}
				if pre := sc[:j+1]; !strings.HasPrefix(from, pre) {
					if end := last[pre]; end > int32(i) {
						li.args[i] = append(li.args[i], argHold{v, end})
					}
					break
				}
			}
		}
	}
}

// infos caches layerInfo by graph: it depends on the graph alone (and on
// its element types, which no binding changes), and a sweep builds the same
// graph's program many times. Graphs are never modified once loaded; the
// cache keeps each graph it has seen alive.
var infos sync.Map // *ir.Graph → *layerInfo

// layerInfo returns the graph's layerInfo, from the cache when it can.
func (b *builder) layerInfo() layerInfo {
	if li, ok := infos.Load(b.g); ok {
		return *li.(*layerInfo)
	}
	li := b.layers()
	infos.Store(b.g, &li)
	return li
}

func (b *builder) layers() layerInfo {
	g := b.g
	li := layerInfo{last: map[int]int32{}, holdEnd: make([]int, len(g.Values)), lastUse: make([]int, len(g.Values)), scope: make([]int32, len(g.Nodes))}
	b.argHolds(&li)
	for i := range li.holdEnd {
		li.holdEnd[i], li.lastUse[i] = -1, -1
	}
	for i := range g.Nodes {
		li.scope[i] = -1
		if b.kind[i] == opMeta {
			continue
		}
		l := g.Nodes[i].Layer
		if _, ok := li.last[l]; !ok {
			li.order = append(li.order, l)
		}
		li.last[l] = int32(i)
	}
	// A layer's output is a data value read by another layer. The loop keeps
	// it in x until the next layer has run, and in y to the end of the
	// forward when a later layer reads it. The measurements show the same
	// with checkpoint segments for what a later range or the rest of the
	// loop reads; a checkpointed range returns nothing else (chunkHolds).
	for v := range g.Values {
		if !b.data[v] || g.Values[v].Producer < 0 {
			continue
		}
		l := g.Nodes[g.Values[v].Producer].Layer
		if l < 0 {
			continue
		}
		for _, c := range g.Values[v].Consumers {
			cl := g.Nodes[c].Layer
			if cl == l || b.kind[c] == opMeta {
				continue
			}
			li.lastUse[v] = max(li.lastUse[v], cl)
			end := l + 1
			if cl > end {
				end = -2
			}
			if li.holdEnd[v] != -2 && (end == -2 || end > li.holdEnd[v]) {
				li.holdEnd[v] = end
			}
		}
	}
	// The ELAN idiom: y = [...]; y.extend(m(y[-1]) for m in ...); return
	// cv(torch.cat(y, 1)). The list y keeps every part of a concat of three or
	// more tensors until the module returns, past the convs that follow.
	//
	// CBFuse does the same with torch.stack(res + xs[-1:]): res, the list of
	// upsampled maps, lives until the module returns, past the sum.
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if b.kind[i] != opConcat || (b.dataInputs(n) < 3 && !b.isStack(n)) {
			continue
		}
		scope := n.Name[:strings.LastIndexByte(n.Name, '/')+1]
		if scope == "" {
			continue
		}
		end := int32(-1)
		for j := i + 1; j < len(g.Nodes); j++ {
			if b.kind[j] != opMeta && strings.HasPrefix(g.Nodes[j].Name, scope) {
				end = int32(j)
			}
		}
		if end > int32(i) {
			li.scope[i] = end
		}
	}
	return li
}

// isStack reports whether n is torch.stack as exported: a Concat of
// Unsqueeze outputs along the new axis.
func (b *builder) isStack(n *ir.Node) bool {
	for _, v := range n.Inputs {
		p := b.g.Values[v].Producer
		if v == ir.NoValue || p < 0 || b.g.Nodes[p].OpType != "Unsqueeze" {
			return false
		}
	}
	return len(n.Inputs) > 0
}

func (b *builder) dataInputs(n *ir.Node) int {
	k := 0
	for _, v := range n.Inputs {
		if v != ir.NoValue && b.data[v] {
			k++
		}
	}
	return k
}

// ref and unref count holders of a storage; the last unref frees it.
func (b *builder) ref(st int32) { b.st[st].refs++ }

func (b *builder) unref(st int32) {
	b.st[st].refs--
	if b.st[st].refs < 0 {
		panic("schedule: storage released twice")
	}
	if b.st[st].refs == 0 {
		b.emit(b.st[st].buf, true)
	}
}

// alloc creates a storage for value v (or a scratch buffer when v is NoValue)
// with one holder.
func (b *builder) alloc(bytes int64, k Kind, v ir.ValueID) int32 {
	buf := b.newBuf(bytes, k, v)
	b.emit(buf, false)
	b.st = append(b.st, storage{buf: buf, refs: 1})
	return int32(len(b.st) - 1)
}

// scratch allocates and frees nothing yet: it returns a buffer to free later.
func (b *builder) scratch(bytes int64, k Kind) int32 {
	buf := b.newBuf(bytes, k, ir.NoValue)
	b.emit(buf, false)
	return buf
}

func (b *builder) workspace(c ConvCall) {
	if b.cfg.Workspace == nil {
		return
	}
	if ws := b.cfg.Workspace(c); ws > 0 {
		buf := b.scratch(ws, Workspace)
		b.emit(buf, true)
	}
}

func (b *builder) convCall(n *ir.Node, phase Phase, which string) ConvCall {
	x, w, y := n.Inputs[0], n.Inputs[1], n.Outputs[0]
	xd, wd, yd := b.s.Dims[x], b.s.Dims[w], b.s.Dims[y]
	c := ConvCall{Phase: phase, Which: which, Groups: n.IntAttr("group", 1), ElemSize: b.dt[y].Size()}
	if len(xd) == 4 && len(wd) == 4 && len(yd) == 4 {
		c.N, c.Cin, c.H, c.W = xd[0], xd[1], xd[2], xd[3]
		c.Cout, c.KH, c.KW = wd[0], wd[2], wd[3]
		c.OutH, c.OutW = yd[2], yd[3]
	}
	if st := n.IntsAttr("strides"); len(st) == 2 {
		c.StrideH, c.StrideW = st[0], st[1]
	} else {
		c.StrideH, c.StrideW = 1, 1
	}
	return c
}

// isContiguousView reports whether slicing dims d along axis, keeping part of
// it, gives a contiguous tensor: only when every dim before the axis is 1.
func sliceContiguous(d []int64, axis int) bool {
	for i := 0; i < axis && i < len(d); i++ {
		if d[i] != 1 {
			return false
		}
	}
	return true
}

func (b *builder) axisOf(n *ir.Node) int {
	if n.OpType == "Slice" && len(n.Inputs) > 3 && n.Inputs[3] != ir.NoValue {
		if d := b.s.Data[n.Inputs[3]]; len(d) == 1 {
			r := len(b.s.Dims[n.Inputs[0]])
			a := int(d[0])
			if a < 0 {
				a += r
			}
			return a
		}
	}
	a := int(n.IntAttr("axis", 0))
	if a < 0 {
		a += len(b.s.Dims[n.Inputs[0]])
	}
	return a
}
