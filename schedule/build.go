package schedule

import (
	"fmt"
	"slices"

	"github.com/onnxmem/onnxmem/ir"
)

// Precision is how the step computes.
type Precision uint8

// The precisions.
const (
	// FP32 runs everything in the graph's types (usually float32).
	FP32 Precision = iota
	// AMP runs the forward under torch.autocast('cuda', torch.float16):
	// convolutions cast their weights (cached until autocast exits) and
	// inputs to float16 and return float16; other ops keep their input's
	// type; parameters and their gradients stay float32.
	AMP
	// Half is model.half() with a half input: parameters, activations and
	// gradients are all float16 (batch-norm statistics stay float32).
	Half
)

var precisionNames = [...]string{"fp32", "amp", "half"}

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
	// BF16 says that AMP autocasts to bfloat16, not float16: its tensors
	// are float16's in size, and the program is the same, but cuDNN
	// chooses its own algorithms for it, so its 2-byte ConvCalls say BF16.
	// It means nothing without AMP (Half is float16).
	BF16 bool
	// NoFlash says the card has no flash attention kernel (compute
	// capability below 8.0: sdp_utils.cpp's
	// check_flash_attention_hardware_support): fused attention in half
	// precision runs the memory-efficient kernel, as it does in float32.
	NoFlash bool
	// Train, when not nil, runs a full training step around the network, as
	// the family's training script does: the batch's upload, the loss, the
	// optimizer step and the EMA update, with the EMA copy, the optimizer's
	// state and the cuBLAS workspace resident.
	Train *Train
	// Eval, when not nil, runs a validation step: the forward of a half copy
	// of the model (copy.deepcopy(model).eval().half()) under
	// torch.no_grad(), batch norm on its running statistics, and the eval
	// head's decode, with the float32 training model and the cuBLAS
	// workspace resident. It implies Half (FP32 with Eval.Float) and ignores Checkpoint.
	Eval *Eval
	// Holder says what the model's Python forward keeps alive beyond each
	// op's reads; nil means LayerLoopOnly.
	Holder Holder
	// OffGraph are the float32 tensors that the model moves to the device
	// beyond the graph's (a family's frozen parameters and tensor
	// attributes): resident after the graph's in the model and in each
	// copy (Program.OffGraph).
	OffGraph []OffGraph
	// CuBLASWorkspace is the bytes of a cuBLAS workspace: one per handle
	// and stream (aten/src/ATen/cuda/CublasHandlePool.cpp), allocated by the
	// first matrix product a thread runs and kept until the process ends.
	// The train and eval steps start with the main thread's resident (an
	// earlier matrix product of the training loop made it; a train step
	// whose recipe says Train.FirstGemmWorkspace makes it as a model step
	// does); in a model step
	// the warm-up makes it, at the first Gemm of the forward, and the
	// autograd engine's device thread, which has a handle of its own, makes
	// another at the first Gemm of the backward (Program.Persistent).
	CuBLASWorkspace int64
	// CuBLASLtWorkspace is the bytes of a cuBLASLt workspace (default
	// CUBLASLT_WORKSPACE_SIZE, 1 MiB), also one per handle and stream: a
	// linear layer with a bias runs addmm through cuBLASLt (Blas.cpp,
	// isInputCompliesAddmmCudaLt), which allocates it after the handle's
	// cuBLAS workspace. 0 allocates none.
	CuBLASLtWorkspace int64
	// Checkpoint lists layer ranges run under
	// torch.utils.checkpoint.checkpoint(use_reentrant=False): their forward
	// keeps no saved tensors, only their inputs; the backward recomputes a
	// range when it first needs one of its saved tensors, and stops the
	// recomputation once all are back.
	Checkpoint []Range
	// Workspace, when set, returns the workspace bytes that a kernel call
	// allocates and frees around itself: a conv's cuDNN workspace, or a
	// reduction's staging (ReductionBytes); nil means none.
	Workspace func(c ConvCall) int64
}

// ConvCall describes one cuDNN convolution call, or one column sum, for
// workspace policies.
type ConvCall struct {
	Phase Phase
	// Which is "fwd", "bwd-data" or "bwd-filter" for a convolution, or
	// ColumnSum for the sum over the N rows of an [N, Cout] tensor (a
	// Linear's bias gradient), or ChannelSum or ExpandedChannelSum for a
	// conv bias's gradient (N rows of Cout columns); a reduction's other
	// fields are zero.
	Which                          string
	N, Cin, Cout, H, W, OutH, OutW int64
	KH, KW, StrideH, StrideW       int64
	// PadH and PadW are the zero padding before the first row and column
	// (PyTorch pads both sides alike); DilationH and DilationW the
	// kernel's dilation, 1 for a dense kernel.
	PadH, PadW           int64
	DilationH, DilationW int64
	Groups               int64
	ElemSize             int64
	// BF16 says that a 2-byte call computes in bfloat16 (Config.BF16).
	BF16 bool
	// ChannelsLast says that the input is channels-last, so cuDNN runs the
	// call in that memory format.
	ChannelsLast bool
}

// gradT is a gradient tensor: a storage and whether the tensor is all of it
// and contiguous (a narrow of a concat's gradient is neither).
type gradT struct {
	st     int32
	whole  bool
	contig bool
	str    []int64 // the strides of a dense gradient that is not contiguous (layout.go)
	bytes  int64
	// view reports whether the gradient is a view that a view op's
	// backward made of another (reshape, transpose, flatten, squeeze,
	// unsqueeze). Its ViewInfo keeps its base alive, so its storage has
	// two users and InputBuffer::accumulate never sums into it in place
	// (can_accumulate_inplace; calibration §35).
	view bool
}

// builder is one Build: the graph, its config, the program being written,
// and what every part of the step reads of each value; the forward, the
// backward and the checkpoints keep the rest in parts of their own.
type builder struct {
	*emitter
	g   *ir.Graph
	s   *ir.Shapes
	cfg Config

	*Flow        // the graph's dataflow, which the family's holds read
	rg    []bool // by value: requires grad
	// derived[v] reports that value v is computed from parameters alone
	// (Swin V2's logit_scale.clamp(max).exp() and its relative position
	// bias MLP): a tensor that needs a gradient and takes part in type
	// promotion, too small for onnxmem to count its bytes.
	derived []bool
	// trained[v]: v is derived from a parameter that training updates
	// (not only from model buffers or batch norm statistics), so an op
	// that reads it needs a gradient.
	trained []bool

	vst    []int32 // by value: storage index, or -1
	contig []bool  // by value: a contiguous tensor
	// str[v]: the strides of a v that is not contiguous, where they are
	// known (a transpose of a dense tensor, an element-wise op's output
	// that follows such an input's layout as TensorIterator's does, a
	// channels-last convolution's output, a select; not always dense);
	// nil for a contiguous v, or a strided one whose strides onnxmem does
	// not follow (a slice). A kernel that needs v contiguous copies it.
	str   [][]int64
	dt    []ir.DType // by value: the type eager PyTorch gives it
	saved [][]int32  // by node: the storages autograd saved for its backward
	// bnStat[v]: v is a batch norm's running mean or variance, a buffer.
	bnStat map[ir.ValueID]bool

	state    [][]int32 // by value: the optimizer state buffers of a trainable parameter
	blasMade [4]bool   // the cuBLAS workspaces made: by blasHandle

	fw *forwardPass
	bw *backwardPass
	cp *checkpoints
}

// forwardPass is the state of the forward: what the Python code keeps
// alive, autocast's cache, and what a checkpointed range's ops would have
// saved.
type forwardPass struct {
	*builder
	holds    *Holds        // what the forward's Python code keeps alive
	last     map[int]int32 // top-level layer → its last node (shape arithmetic aside)
	hold     []int         // by value: Holds.LayerEnd under the config's checkpoint ranges
	inplace  []bool        // by node: it runs in place on its first data input (Holds.InPlace)
	noSave   bool          // the op runs inside a checkpointed range's forward, or under no_grad
	stopAt   int32         // the node whose packing ends a recomputation, or -1
	deferred []int32       // storages only a suppressed save held, freed when the op returns
	// cast[v] is the storage of parameter v's autocast copy, or -1; casts
	// lists them in the order autocast's cache filled.
	cast      []int32
	casts     []ir.ValueID
	decoded   []int32 // the eval head's decoded outputs, alive to the end of the step
	lossSaved []Buf   // what the training loss keeps for its backward
	op        fwdOp   // the node that run runs
	// off[i] says that matmul node i ran in float32 under autocast, its
	// operands the code's own float32 casts (float32Region).
	off []bool
}

// backwardPass is the state of the autograd engine: the gradients each
// value has received, and the parameters' .grad buffers.
type backwardPass struct {
	*builder
	freshStr   []int64 // the strides of the node's fresh gradients (freshLayout)
	freshDims  []int64
	give       []delivery // back's gradients to hand on, reused node after node
	slot       []int32    // by value: index into grads, or -1
	grads      []gradT
	paramGrads []int32 // by value: .grad buffer, or -1
	viewGrad   []bool  // by value: the .grad is a view that keeps its base (paramGradAdd)
	// castLeft counts, by parameter, the lowered ops whose gradients for
	// its autocast copy have yet to come, castSum their float16 sum so
	// far (toCopy); nil outside autocast or when no op casts a parameter.
	castLeft []int32
	castSum  []gradT
	unrun    []int32 // nodes the backward never reached
	op       bwdOp   // the node that back runs
	lossSt   int32
	seed     int32 // the storage of loss = Σ o.sum()'s expanded seed gradient, or -1
	// untilDerived are the node's gradients of values computed from
	// parameters alone (a standardised weight's), freed once
	// derivedGrads has made the parameters' own.
	untilDerived []int32
}

// checkpoints are the checkpointed ranges of the forward (checkpoint.go).
type checkpoints struct {
	*builder
	chunkOf []int   // by node: its checkpointed range, or -1
	chunks  []chunk // the checkpointed ranges
	hadSave []bool  // by node: it would have saved a tensor
}

// Build returns the program of one training step of g at shapes s: the
// forward in train mode, the loss (cfg.Train's, or the sum of every graph
// output's sum) and
// the backward. It fails, with an error starting "schedule: ", on an op that
// has no memory rule.
func Build(g *ir.Graph, s *ir.Shapes, cfg Config) (*Program, error) {
	b, err := newBuilder(g, s, cfg)
	if err != nil {
		return nil, err
	}
	cfg = b.cfg
	if err := b.fw.forward(); err != nil {
		return nil, err
	}
	if cfg.Train != nil && cfg.Train.PrevPredAlive {
		b.carry()
	}
	training := cfg.Train != nil && cfg.Train.Loss != nil
	if training {
		// The loss runs inside the forward's autocast region.
		b.phase = LossPhase
		b.fw.lossSaved = cfg.Train.Loss.Forward(tape{b}, b.lossInput())
	}
	b.fw.exitAutocast()
	b.p.ForwardEnd = len(b.p.Events)
	b.p.Outputs = b.outputs()
	if cfg.Eval != nil {
		b.p.BackwardStart, b.p.BackwardEnd = b.p.ForwardEnd, b.p.ForwardEnd
		b.cleanup()
		return b.p, nil
	}
	if !training {
		b.bw.loss()
	}
	b.p.BackwardStart = len(b.p.Events)
	if err := b.bw.backward(); err != nil {
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

// newBuilder sets up the step of g at shapes s under cfg, up to its
// forward: the config's defaults, each value's role and each node's eager
// op, and the residents.
func newBuilder(g *ir.Graph, s *ir.Shapes, cfg Config) (*builder, error) {
	if cfg.Eval != nil {
		cfg.Precision, cfg.Checkpoint = Half, nil
		if cfg.Eval.Float {
			cfg.Precision = FP32
		}
	}
	if cfg.Holder == nil {
		cfg.Holder = LayerLoopOnly
	}
	b := &builder{emitter: &emitter{p: &Program{Graph: g, Shapes: s, OffGraph: cfg.OffGraph}}, Flow: &Flow{graph: g, shapes: s}, g: g, s: s, cfg: cfg}
	b.fw, b.bw, b.cp = &forwardPass{builder: b}, &backwardPass{builder: b}, &checkpoints{builder: b}
	nv, nn := len(g.Values), len(g.Nodes)
	b.data = make([]bool, nv)
	b.param = make([]bool, nv)
	b.buffer = make([]bool, nv)
	b.rg = make([]bool, nv)
	b.kind = make([]ir.Eager, nn)
	b.siluIn = make([]ir.ValueID, nn)
	b.class = make([]ir.Autocast, nn)
	// A step has about 5 events and 4 buffers a node; sizing the slices
	// once saves their growth.
	b.p.Events = make([]Event, 0, 8*nn+64)
	b.p.Buffers = make([]Buffer, 0, 6*nn+64)
	b.st = make([]storage, 0, 6*nn+64)
	b.vst = make([]int32, nv)
	b.contig = make([]bool, nv)
	b.str = make([][]int64, nv)
	b.bw.slot = make([]int32, nv)
	b.bw.paramGrads = make([]int32, nv)
	b.saved = make([][]int32, nn)
	b.fw.stopAt = -1
	b.dt = append([]ir.DType(nil), s.DTypes...)
	b.fw.cast = make([]int32, nv)
	for i := range b.vst {
		b.vst[i], b.bw.slot[i], b.bw.paramGrads[i], b.fw.cast[i] = -1, -1, -1, -1
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
	b.p.ModelBuffers = b.buffer
	if err := b.classify(); err != nil {
		return nil, err
	}
	b.markDerived()
	if err := b.resident(); err != nil {
		return nil, err
	}
	b.halvedLoad()
	b.fw.noSave = cfg.Eval != nil
	return b, nil
}

// carry frees the previous step's outputs, now that the forward has made
// this step's: one buffer for each distinct storage of the outputs, the
// size of this step's.
func (b *builder) carry() {
	b.node = -1
	for j, o := range b.g.Outputs {
		st := b.vst[o]
		if st < 0 || slices.ContainsFunc(b.g.Outputs[:j], func(p ir.ValueID) bool { return b.vst[p] == st }) {
			continue
		}
		buf := b.st[st].buf
		c := b.newBuf(b.p.Buffers[buf].Bytes, Activation, o)
		b.p.PrevPred = append(b.p.PrevPred, c)
		b.p.PrevPredFrom = append(b.p.PrevPredFrom, buf)
		b.emit(c, true)
	}
}

// autocast reports whether the forward runs under autocast.
func (b *builder) autocast() bool {
	return b.cfg.Precision == AMP
}

// markDerived marks the values computed from parameters alone, in node
// order, and gives each the type eager PyTorch gives it: under autocast,
// float16 out of an op that autocast lowers (the bias MLP's linears),
// float32 out of one it runs in float32 (exp), else the widest floating
// input's (clamp, gather, reshape); without autocast, the export's.
func (b *builder) markDerived() {
	b.derived = make([]bool, len(b.g.Values))
	b.trained = make([]bool, len(b.g.Values))
	stat := make(map[ir.ValueID]bool) // batch norms' running statistics
	for i := range b.g.Nodes {
		if n := &b.g.Nodes[i]; n.OpType == "BatchNormalization" && len(n.Inputs) == 5 {
			stat[n.Inputs[3]], stat[n.Inputs[4]] = true, true
		}
	}
	for i := range b.g.Nodes {
		n := &b.g.Nodes[i]
		if b.kind[i] != ir.EagerMeta {
			continue
		}
		trained := false
		for _, v := range n.Inputs {
			if v != ir.NoValue && (b.param[v] && !b.buffer[v] && !stat[v] || b.trained[v]) {
				trained = true
			}
		}
		wide := ir.Undefined
		for _, v := range n.Inputs {
			if v != ir.NoValue && (b.param[v] || b.derived[v]) && isFloat(b.dt[v]) && (wide == ir.Undefined || b.dt[v].Size() > wide.Size()) {
				wide = b.dt[v]
			}
		}
		if wide == ir.Undefined {
			continue
		}
		if b.autocast() {
			switch r, _ := ir.OpOf(n); {
			case r.Autocast == ir.AutocastLower:
				wide = b.low()
			case r.Autocast.Float32():
				wide = ir.Float32
			}
		}
		for _, v := range n.Outputs {
			if v != ir.NoValue && isFloat(b.dt[v]) {
				b.derived[v] = true
				b.trained[v] = trained
				// A Cast keeps the type it casts to.
				if b.autocast() && n.OpType != "Cast" {
					b.dt[v] = wide
				}
			}
		}
	}
}

// low is autocast's reduced type, float16.
func (b *builder) low() ir.DType {
	return ir.Float16
}

// bytes is the size of value v in the type eager PyTorch gives it.
func (b *builder) bytes(v ir.ValueID) int64 {
	return b.s.Elems(v) * b.dt[v].Size()
}

// resident lists the parameters and buffers in the order the model moves them
// to the device: initializer order, which the exporters take from the
// state_dict, with each training-mode batch norm's num_batches_tracked (an
// int64 scalar that the graph does not show) after its running variance.
func (b *builder) resident() error {
	b.node = -1
	bnVar := make(map[ir.ValueID]bool)
	b.bnStat = make(map[ir.ValueID]bool)
	for i := range b.g.Nodes {
		n := &b.g.Nodes[i]
		if n.OpType == "BatchNormalization" && len(n.Inputs) == 5 {
			b.bnStat[n.Inputs[3]], b.bnStat[n.Inputs[4]] = true, true
		}
		if b.kind[i] == ir.EagerBatchNorm && len(n.Inputs) == 5 {
			bnVar[n.Inputs[4]] = true
		}
	}
	// The model, and for the eval step its half copy after it.
	copies := []func(ir.ValueID) int64{b.bytes}
	if b.cfg.Eval != nil {
		copies = []func(ir.ValueID) int64{b.s.Bytes, b.bytes}
	}
	for c, size := range copies {
		role, elem := RoleModel, int64(4)
		switch {
		case c > 0 && !b.cfg.Eval.Float, c == 0 && b.cfg.Precision == Half && b.cfg.Eval == nil && b.cfg.Train == nil:
			elem = 2 // the eval copy's .half(), a half model step's model.half()
		}
		if c > 0 {
			role = RoleCopy
		}
		b.modelCopy(role, size, bnVar, elem)
	}
	if b.cfg.Eval != nil {
		if b.cfg.CuBLASWorkspace > 0 {
			b.addResident(RoleWorkspace, b.newBuf(b.cfg.CuBLASWorkspace, Workspace, ir.NoValue))
			b.blasMade[blasMain] = true
		}
		// What the eval head keeps in its module.
		if h := b.cfg.Eval.Head; h != nil {
			for _, n := range h.Resident(b.outputs()) {
				b.addResident(RoleHead, b.newBuf(n, Param, ir.NoValue))
			}
		}
	}
	if b.cfg.Train != nil {
		if err := b.trainResident(bnVar); err != nil {
			return err
		}
		if b.cfg.Train.Uint8Batch {
			// The step uploads its own batch (loadBatch).
			b.p.Input = -1
			return nil
		}
	}
	x := b.g.Inputs[0]
	b.p.Input = b.newBuf(b.bytes(x), Input, x)
	b.st = append(b.st, storage{buf: b.p.Input, refs: 1}) // held by the caller
	b.vst[x] = 0
	b.setLayout(x, nil)
	for _, v := range b.g.Inputs[1:] {
		buf := b.newBuf(b.bytes(v), Input, v)
		b.addResident(RoleInput, buf)
		b.st = append(b.st, storage{buf: buf, refs: 1}) // held by the caller
		b.vst[v] = int32(len(b.st) - 1)
		b.setLayout(v, nil)
	}
	return nil
}

// halvedLoad sets Program.ResidentLoad for a model step in half precision:
// the model's tensors at their exported (float32) bytes. A train step's
// other residents (EMA, optimizer state) are made after model.half() and
// stay as they are; so do integer buffers.
func (b *builder) halvedLoad() {
	if b.cfg.Precision != Half || b.cfg.Eval != nil || b.cfg.Train != nil {
		return
	}
	load := make([]int64, len(b.p.Resident))
	for i, buf := range b.p.Resident {
		load[i] = b.p.Buffers[buf].Bytes
		if v := b.p.Buffers[buf].Value; b.p.ResidentRoles[i] == RoleModel && v >= 0 {
			load[i] = b.s.Bytes(v)
		}
		if k := b.p.ResidentOff[i]; b.p.ResidentRoles[i] == RoleModel && k > 0 {
			load[i] = b.cfg.OffGraph[k-1].Bytes
		}
	}
	b.p.ResidentLoad = load
}

// addResident appends a resident buffer with its role.
func (b *builder) addResident(r Role, buf int32) {
	b.p.Resident = append(b.p.Resident, buf)
	b.p.ResidentRoles = append(b.p.ResidentRoles, r)
	b.p.ResidentBuffer = append(b.p.ResidentBuffer, false)
	b.p.ResidentOff = append(b.p.ResidentOff, 0)
}

// modelCopy appends the model's parameters and buffers as resident
// buffers of a role, each size(v) bytes, in the order the model moves them
// to the device, with each training-mode batch norm's num_batches_tracked
// after its running variance.
func (b *builder) modelCopy(r Role, size func(ir.ValueID) int64, bnVar map[ir.ValueID]bool, elem int64) {
	for i := range b.g.Values {
		if !b.param[i] && !b.buffer[i] {
			continue
		}
		v := ir.ValueID(i)
		b.addResident(r, b.newBuf(size(v), Param, v))
		b.p.ResidentBuffer[len(b.p.ResidentBuffer)-1] = b.buffer[i] || b.bnStat[v]
		if b.copies != nil {
			// The other modules' copies of an inlined buffer (maskBuffer),
			// of its value's type and size.
			for range b.copies[i] - 1 {
				b.addResident(r, b.newBuf(size(v), Param, v))
				b.p.ResidentBuffer[len(b.p.ResidentBuffer)-1] = true
			}
		}
		if bnVar[v] {
			b.addResident(r, b.newBuf(8, Param, ir.NoValue))
			b.p.ResidentBuffer[len(b.p.ResidentBuffer)-1] = true
		}
	}
	// What the model moves beyond the graph's tensors, after them (its
	// float32 tensors in elem bytes an element); a plain tensor is not a
	// Parameter, so deepcopy copies it as it copies a buffer.
	for k, o := range b.cfg.OffGraph {
		b.addResident(r, b.newBuf(o.Elems*elem, Param, ir.NoValue))
		b.p.ResidentBuffer[len(b.p.ResidentBuffer)-1] = !o.Param
		b.p.ResidentOff[len(b.p.ResidentOff)-1] = k + 1
	}
}

// blasHandle names a cuBLAS workspace: the main thread's or the autograd
// device thread's, cuBLAS's or cuBLASLt's.
type blasHandle uint8

const (
	blasMain blasHandle = iota
	blasMainLt
	blasAutograd
	blasAutogradLt
)

// blasWorkspaces makes the workspaces that a matrix product of the current
// phase needs and that its thread does not have yet: the handle's cuBLAS
// workspace, then, through cuBLASLt, its cuBLASLt one. The backward and
// the recomputations inside it run on the autograd engine's device thread.
func (b *builder) blasWorkspaces(lt bool) {
	h := blasMain
	if b.phase == Backward || b.phase == Recompute {
		h = blasAutograd
	}
	b.once(h, b.cfg.CuBLASWorkspace)
	if lt {
		b.once(h+1, b.cfg.CuBLASLtWorkspace)
	}
}

// once allocates workspace h, of the given size, the first time it is asked
// for (Program.Persistent).
func (b *builder) once(h blasHandle, size int64) {
	if b.blasMade[h] || size <= 0 {
		return
	}
	b.blasMade[h] = true
	b.p.Persistent = append(b.p.Persistent, b.newBuf(size, Workspace, ir.NoValue))
	b.p.PersistentAt = append(b.p.PersistentAt, len(b.p.Events))
}

func (b *builder) workspace(c ConvCall) {
	if b.cfg.Workspace == nil {
		return
	}
	ws := b.cfg.Workspace(c)
	conv := !IsReduction(c.Which)
	if conv {
		b.p.Calls = append(b.p.Calls, c)
	}
	if ws > 0 {
		buf := b.scratch(ws, Workspace)
		if conv {
			b.p.Buffers[buf].Call = int32(len(b.p.Calls))
		}
		b.emit(buf, true)
	}
}

func (b *builder) convCall(n *ir.Node, phase Phase, which string) ConvCall {
	x, w, y := n.Inputs[0], n.Inputs[1], n.Outputs[0]
	xd, wd, yd := b.s.Dims[x], b.s.Dims[w], b.s.Dims[y]
	c := ConvCall{Phase: phase, Which: which, Groups: n.IntAttr("group", 1), ElemSize: b.dt[y].Size()}
	c.BF16 = b.cfg.BF16 && b.autocast() && c.ElemSize == 2
	c.ChannelsLast = b.channelsLast(x)
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
	c.DilationH, c.DilationW = 1, 1
	if d := n.IntsAttr("dilations"); len(d) == 2 {
		c.DilationH, c.DilationW = d[0], d[1]
	}
	if p := n.IntsAttr("pads"); len(p) == 4 {
		c.PadH, c.PadW = p[0], p[1]
	}
	if a, ok := n.Attr("auto_pad"); ok && a.Kind == ir.AttrString && (a.Str == "SAME_UPPER" || a.Str == "SAME_LOWER") {
		// The total padding that keeps ceil(in / stride) outputs, split
		// as PyTorch's padding="same" splits it (the smaller half first).
		total := func(in, out, k, s, d int64) int64 { return max((out-1)*s+d*(k-1)+1-in, 0) }
		c.PadH = total(c.H, c.OutH, c.KH, c.StrideH, c.DilationH) / 2
		c.PadW = total(c.W, c.OutW, c.KW, c.StrideW, c.DilationW) / 2
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
