package schedule

import (
	"fmt"
	"iter"
	"slices"

	"github.com/onnxmem/onnxmem/ir"
)

// A training step around the network's forward and backward, as a typical
// PyTorch training loop runs it:
//
//	imgs = imgs.to(device, non_blocking=True).float() / 255
//	with torch.autocast('cuda', enabled=amp):
//	    pred = model(imgs)
//	    loss = compute_loss(pred, targets.to(device))
//	scaler.scale(loss).backward()
//	scaler.unscale_(optimizer)
//	torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
//	scaler.step(optimizer); scaler.update()
//	optimizer.zero_grad()          # set_to_none: the .grad tensors go
//	ema.update(model)
//
// Which of these a family's script does, its parameter groups and its loss
// are the family's recipe (Train's fields). Worked example, a network of
// 9.8 M parameters (39 MiB) with SGD and EMA at batch 16, 640×640: resident
// are the model, its EMA copy and the momentum buffers (39 MiB each) and the
// 32 MiB cuBLAS workspace; the step adds the 19 MiB uint8 batch, its 75 MiB
// float copy and the 75 MiB normalized input, the forward's activations, the
// loss's tensors, the gradients, and in the optimizer step one
// weight-decayed copy of the gradients of the group with weight decay
// (foreach SGD allocates them, torch/optim/sgd.py).
//
// Sources: torch/optim/sgd.py, adam.py (the foreach implementations),
// torch/nn/utils/clip_grad.py and torch/amp/grad_scaler.py in PyTorch.

// Optimizer is how the optimizer step is run.
type Optimizer string

// The optimizers onnxmem models. Each keeps its state in buffers the size of
// the parameters: SGD with momentum one, Adam and AdamW two (three with
// amsgrad, Train.AMSGrad), Lion one; None takes no step.
const (
	SGD   Optimizer = "SGD"
	Adam  Optimizer = "Adam"
	AdamW Optimizer = "AdamW"
	Lion  Optimizer = "Lion"
	None  Optimizer = "none"
)

// stateBuffers returns how many parameter-sized buffers the optimizer keeps,
// with amsgrad's max_exp_avg_sq when amsgrad.
func (o Optimizer) stateBuffers(amsgrad bool) (int, error) {
	switch o {
	case SGD, Lion:
		return 1, nil
	case Adam, AdamW:
		if amsgrad {
			return 3, nil
		}
		return 2, nil
	case None, "":
		return 0, nil
	}
	return 0, fmt.Errorf("schedule: unknown optimizer %q: want SGD, Adam, AdamW, Lion or none", o)
}

// Train configures a full training step; nil in Config means a model step.
// A model family's recipe fills it.
type Train struct {
	// Loss models the training loss; nil means the model step's
	// sum(o.sum()).
	Loss Loss
	// Boxes is the number of ground-truth boxes in each image.
	Boxes int64
	// BoxCounts, when not nil, are the boxes of each image of the batch,
	// and Boxes is their largest.
	BoxCounts []int64
	// Optimizer is the optimizer; its state exists before the step.
	Optimizer Optimizer
	// AMSGrad says Adam and AdamW keep amsgrad's third state buffer,
	// max_exp_avg_sq (torch.optim's default is without).
	AMSGrad bool
	// EMA keeps an exponential moving average copy of the model, updated
	// after the optimizer step.
	EMA bool
	// Uint8Batch uploads the batch as uint8 and normalizes it on the
	// device (imgs.to(device).float() / 255); otherwise the float input is
	// resident before the step.
	Uint8Batch bool
	// LoopScalars is the number of 4-byte tensors that the training loop
	// keeps resident (GradScaler's scale and growth tracker, a running loss).
	LoopScalars int
	// GradScaler unscales the gradients before the step under AMP
	// (torch.amp.GradScaler.unscale_).
	GradScaler bool
	// ClipGradNorm runs torch.nn.utils.clip_grad_norm_ before the step.
	ClipGradNorm bool
	// Groups returns the optimizer's parameter groups in param_groups
	// order, given the trainable parameters in parameter order; nil means
	// one group of them all, without weight decay.
	Groups func(g *ir.Graph, params []ir.ValueID) []ParamGroup
	// PrevPredAlive keeps the previous step's outputs referenced until
	// this step's forward returns, as a loop that rebinds them does
	// (pred = model(imgs) drops the old pred only once the new one is
	// made): the step starts with Program.PrevPred alive, frees them after
	// the forward, and leaves its own outputs alive at its end.
	PrevPredAlive bool
	// CuBLASWorkspace, when above 0, is the cuBLAS workspace the training
	// script sets for its whole process (CUBLAS_WORKSPACE_CONFIG), on every
	// card, in place of the card's default (Config.CuBLASWorkspace).
	CuBLASWorkspace int64
	// FirstGemmWorkspace says that no matrix product runs before the
	// loop's first forward: the main thread's cuBLAS workspace is made by
	// the warm-up's first Gemm, as in a model step (Config.CuBLASWorkspace),
	// not found resident: a plain loop (load, optimizer, step) is so, a
	// script that runs a matrix product before its loop is not.
	FirstGemmWorkspace bool
}

// ParamGroup is one of the optimizer's parameter groups.
type ParamGroup struct {
	// Params are the group's parameters, in parameter order.
	Params []ir.ValueID
	// Decay says the group has weight decay, which SGD's foreach step
	// applies to a copy of the gradients.
	Decay bool
}

// trainable reports whether initializer v is a parameter that gets a
// gradient: a conv's or a linear's weight or bias, a norm's weight or bias
// (the running statistics are buffers), a scale (Mul), and a table whose
// rows a Gather reads (an embedding, Swin's relative position bias).
func (b *builder) trainable(v ir.ValueID) bool {
	if !b.param[v] {
		return false
	}
	for n, j := range b.uses(v) {
		if (n.OpType == "Conv" || n.OpType == "Gemm") && j >= 1 || (n.OpType == "BatchNormalization" || n.OpType == "LayerNormalization") && (j == 1 || j == 2) ||
			n.OpType == "Mul" && j <= 1 || n.OpType == "Gather" && j == 0 {
			return true
		}
	}
	return false
}

// uses yields each node that reads v, with the input position it reads v
// at, once per position.
func (b *builder) uses(v ir.ValueID) iter.Seq2[*ir.Node, int] {
	return func(yield func(*ir.Node, int) bool) {
		for _, c := range b.g.Values[v].Consumers {
			n := &b.g.Nodes[c]
			for j, in := range n.Inputs {
				if in == v && !yield(n, j) {
					return
				}
			}
		}
	}
}

// trainResident lists what a training step finds allocated: the EMA copy,
// the cuBLAS workspace, the loop's small tensors and the optimizer's state,
// in the order the loop creates them.
func (b *builder) trainResident(bnVar map[ir.ValueID]bool) error {
	t := b.cfg.Train
	if t.EMA {
		b.modelCopy(RoleCopy, b.s.Bytes, bnVar, 4)
	}
	if b.cfg.CuBLASWorkspace > 0 && !t.FirstGemmWorkspace {
		b.addResident(RoleWorkspace, b.newBuf(b.cfg.CuBLASWorkspace, Workspace, ir.NoValue))
		b.blasMade[blasMain] = true
	}
	for range t.LoopScalars {
		b.addResident(RoleScalar, b.newBuf(4, Scalar, ir.NoValue))
	}
	k, err := t.Optimizer.stateBuffers(t.AMSGrad)
	if err != nil {
		return err
	}
	b.state = make([][]int32, len(b.g.Values))
	for j := 0; j < k; j++ {
		for i := range b.g.Values {
			if v := ir.ValueID(i); b.trainable(v) {
				buf := b.newBuf(b.s.Bytes(v), Param, v)
				b.addResident(RoleState, buf)
				b.state[v] = append(b.state[v], buf)
			}
		}
	}
	return nil
}

// loadBatch emits imgs.to(device).float() / 255 and gives the graph's input
// the result.
func (fp *forwardPass) loadBatch() {
	if !fp.cfg.Train.Uint8Batch {
		return
	}
	x := fp.g.Inputs[0]
	n := fp.s.Elems(x)
	u8 := fp.alloc(n, Input, ir.NoValue)
	f := fp.alloc(n*4, Input, ir.NoValue)
	fp.unref(u8)
	fp.vst[x] = fp.alloc(n*4, Input, x)
	fp.unref(f)
	fp.setLayout(x, nil)
}

// tape records a loss fragment into the program.
type tape struct{ b *builder }

var _ Tape = tape{}

func (t tape) Alloc(bytes int64, what string) Buf {
	return Buf(t.b.alloc(bytes, Activation, ir.NoValue))
}

func (t tape) Free(x Buf) { t.b.unref(int32(x)) }

var _ HeadTape = tape{}

// Conv records the workspace of a convolution call that no graph node
// makes, in the builder's phase.
func (t tape) Conv(c ConvCall) {
	c.Phase = t.b.phase
	t.b.workspace(c)
}

// lossInput describes the graph's outputs for the loss.
func (b *builder) lossInput() LossInput {
	var batch int64
	if d := b.s.Dims[b.g.Inputs[0]]; len(d) > 0 {
		batch = d[0]
	}
	return LossInput{Batch: batch, Outputs: b.outputs(), AMP: b.autocast(), Boxes: b.cfg.Train.Boxes, BoxCounts: b.cfg.Train.BoxCounts}
}

// seedFromLoss runs the loss's backward and hands each output a strided
// view of its gradient's buffer, which goes after the last output that
// shares it.
func (bp *backwardPass) seedFromLoss() error {
	t := bp.cfg.Train
	in := bp.lossInput()
	grads := t.Loss.Backward(tape{bp.builder}, in, bp.fw.lossSaved)
	outs := bp.g.Outputs
	if len(grads) != len(outs) {
		return fmt.Errorf("schedule: graph %q: the loss returned %d gradients for %d outputs", bp.g.Name, len(grads), len(outs))
	}
	dense, _ := t.Loss.(DenseLoss)
	for i, v := range outs {
		st := int32(grads[i])
		if bp.rg[v] {
			bp.ref(st)
			d := dense != nil && dense.DenseGrad(in, i)
			bp.accumulate(v, gradT{st: st, bytes: bp.bytes(v), whole: d, contig: d})
		}
		// The loss's own reference goes after the last output that shares
		// the buffer.
		if !slices.Contains(grads[i+1:], grads[i]) {
			bp.unref(st)
		}
	}
	return nil
}

// optimizerStep emits what follows the backward: GradScaler's unscale and
// clip_grad_norm_, the optimizer's step, zero_grad and the EMA update.
func (b *builder) optimizerStep() {
	b.node = -1
	o := &optimizer{emitter: b.emitter, g: b.g, s: b.s, t: b.cfg.Train, amp: b.autocast(), grads: b.bw.paramGrads, state: b.param, opt: b.state}
	for i := range b.g.Values {
		if v := ir.ValueID(i); b.trainable(v) && b.bw.paramGrads[v] >= 0 {
			o.params = append(o.params, v)
		}
	}
	o.step()
}

// optimizer is the part of a training step after the backward.
type optimizer struct {
	*emitter
	g      *ir.Graph
	s      *ir.Shapes
	t      *Train
	amp    bool         // the step ran under autocast
	params []ir.ValueID // the trainable parameters that got a .grad, in parameter order
	grads  []int32      // by value: the .grad buffer, or -1
	state  []bool       // by value: a parameter or buffer of the model, which EMA averages
	opt    [][]int32    // by value: the optimizer's state buffers of a parameter
}

// created notes that a first step would create the optimizer state of
// the parameters vs before the next event, in their order.
func (o *optimizer) created(vs []ir.ValueID) {
	for _, v := range vs {
		if o.grads[v] < 0 {
			continue
		}
		for _, buf := range o.opt[v] {
			o.p.StateOrder = append(o.p.StateOrder, buf)
			o.p.StateAt = append(o.p.StateAt, len(o.p.Events))
		}
	}
}

// step emits GradScaler's unscale, clip_grad_norm_, the optimizer's step
// group by group, zero_grad and the EMA update.
func (o *optimizer) step() {
	t, params := o.t, o.params
	// GradScaler.unscale_ (with AMP): the inverse scale, computed in double
	// and cast to float, and the found_inf flag; the non-finite check and
	// the unscaling work in place. scaler.update drops them after the step.
	var scaler []int32
	if o.amp && t.GradScaler {
		inv64 := o.alloc(8, Scalar, ir.NoValue)
		inv := o.alloc(4, Scalar, ir.NoValue)
		o.unref(inv64)
		scaler = append(scaler, inv, o.alloc(4, Scalar, ir.NoValue))
	}
	// clip_grad_norm_: torch._foreach_norm makes a 0-dim float32 norm per
	// gradient, torch.stack gathers them, and the norms go when the
	// function returns.
	if t.ClipGradNorm {
		var norms []int32
		for range params {
			norms = append(norms, o.alloc(4, Scalar, ir.NoValue))
		}
		stack := o.alloc(4*int64(len(params)), Scalar, ir.NoValue)
		total := o.alloc(4, Scalar, ir.NoValue)
		o.unref(stack)
		for _, st := range norms {
			o.unref(st)
		}
		o.unref(total)
	}
	// The step, group by group in param_groups order.
	o.p.OptStep = len(o.p.Events)
	groups := []ParamGroup{{Params: params}}
	if t.Groups != nil {
		groups = t.Groups(o.g, params)
	}
	for _, g := range groups {
		// Adam and Lion make their state in _init_group, before the step's
		// arithmetic; SGD clones its momentum from the (decayed) gradients.
		if t.Optimizer != SGD {
			o.created(g.Params)
		}
		var temps []int32
		for _, v := range g.Params {
			if o.grads[v] < 0 {
				continue
			}
			switch t.Optimizer {
			case SGD:
				// torch._foreach_add(grads, params, alpha=weight_decay)
				// allocates the decayed gradients of a group with decay.
				if g.Decay {
					temps = append(temps, o.alloc(o.s.Bytes(v), Grad, v))
				}
			case Adam, AdamW:
				// torch._foreach_sqrt of the second moments.
				temps = append(temps, o.alloc(o.s.Bytes(v), Grad, v))
			case Lion:
				// update = exp_avg * beta1 + grad * (1 - beta1), then
				// torch.sign(update): one parameter at a time.
				a := o.alloc(o.s.Bytes(v), Grad, v)
				c := o.alloc(o.s.Bytes(v), Grad, v)
				u := o.alloc(o.s.Bytes(v), Grad, v)
				o.unref(a)
				o.unref(c)
				sgn := o.alloc(o.s.Bytes(v), Grad, v)
				o.unref(sgn)
				o.unref(u)
			}
		}
		if t.Optimizer == SGD {
			o.created(g.Params)
		}
		for _, st := range temps {
			o.unref(st)
		}
	}
	o.p.OptStepEnd = len(o.p.Events)
	for _, st := range scaler {
		o.unref(st)
	}
	// zero_grad(set_to_none=True).
	for _, v := range params {
		o.emit(o.grads[v], true)
	}
	// ema.update: v += (1 - d) * msd[k] for every float tensor of the state
	// dict, one temporary at a time.
	if t.EMA {
		for v, ok := range o.state {
			if ok {
				o.unref(o.alloc(o.s.Bytes(ir.ValueID(v)), Activation, ir.NoValue))
			}
		}
	}
}
