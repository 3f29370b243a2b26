package schedule

import (
	"fmt"

	"github.com/onnxmem/onnxmem/ir"
)

// The element-wise ops: what each saves for its backward
// (tools/autograd/derivatives.yaml), and their in-place forms, which the
// model's Python code chooses (nn.ReLU(inplace=True), out += identity) and
// a Holder reports (Holds.InPlace). An in-place op writes into its input's
// storage; autograd then keeps what its formula reads: relu_'s result (the
// overwritten input itself), a copy of the input made before the op for
// hardswish_ and silu_, whose formulas read self, dropout_'s float noise.
//
// Worked example, relu after a batch norm at [8 64 80 80] in float32
// (12.5 MiB a tensor): out of place, relu allocates its output and saves
// it (threshold_backward reads the result); the batch norm's output goes
// when nothing else reads it. In place, relu_ allocates nothing, and the
// saved result is the batch norm's storage. Either way the backward makes
// one gradient of the input, 12.5 MiB. hardswish_ instead allocates a 12.5
// MiB copy of its input before the op: hardswish_backward reads self,
// which the op overwrites.

// siluForward emits silu, the one kernel of a Sigmoid·Mul of one tensor,
// which saves its input; silu_ in place saves a copy of it.
func siluForward(o *fwdOp) {
	if o.ip {
		// silu_ overwrites its input, which its derivative
		// (silu_backward(grad, self)) needs: autograd saves a clone
		// of it made before the op, and the op's result is the
		// input's storage (calibration/silu_saved.py; the ground
		// truth's traces free the block batch norm allocated when a
		// Conv's output is dropped). Under no_grad, or on an input
		// that needs no gradient, there is no clone.
		if x := o.siluIn[o.i]; o.cfg.Eval == nil && o.rg[x] {
			o.own(o.alloc(o.bytes(x), Activation, x))
		}
		if o.stopped() {
			return
		}
		o.inPlace()
		return
	}
	o.save(o.siluIn[o.i])
	if o.stopped() {
		return
	}
	o.newOut(0, Activation)
}

// savesResultForward emits an op whose backward reads its result (sigmoid,
// relu, tanh, softmax); relu_ in place saves its result too, the input's
// storage overwritten. Autocast runs softmax in float32.
func savesResultForward(o *fwdOp) {
	if o.ip {
		o.inPlace()
		o.save(o.out(0))
		return
	}
	if o.fp32 {
		o.dt[o.out(0)] = ir.Float32
	}
	o.newOut(0, Activation)
	o.save(o.out(0))
}

// savesInputForward emits an op whose backward reads its input (hardswish,
// hardsigmoid, hardtanh, gelu, leaky_relu), or in place a copy of it, but
// for an op whose in-place form keeps its result (ir.Op.InPlaceSavesResult).
func savesInputForward(o *fwdOp) {
	x := o.n.Inputs[0]
	if r, _ := ir.OpOf(o.n); o.ip && r.InPlaceSavesResult {
		// leaky_relu_ keeps its result: the input's storage, no copy.
		o.inPlace()
		o.save(o.out(0))
		return
	}
	if o.ip {
		// hardswish_ needs the input it overwrites: autograd keeps a
		// copy of it, made before the op (no copy without autograd, in
		// the eval step's no_grad).
		if o.cfg.Eval == nil {
			o.own(o.alloc(o.bytes(x), Activation, x))
		}
		o.inPlace()
		return
	}
	if o.fp32 {
		// Autocast's fp32 list (pow): a float32 copy of a half input,
		// which the op saves, and a float32 output.
		if o.dt[x] != ir.Float32 {
			o.own(o.alloc(o.s.Elems(x)*4, Cast, x))
		} else {
			o.save(x)
		}
		o.dt[o.out(0)] = ir.Float32
		o.newOut(0, Activation)
		return
	}
	o.save(x)
	o.newOut(0, Activation)
}

// dropoutForward emits dropout: native_dropout's bool mask, which it
// saves, then the output; dropout_ in place makes float noise instead,
// which its mul_ saves. A dropout that does not drop is its input.
func dropoutForward(o *fwdOp) {
	n := o.n
	x := n.Inputs[0]
	if !o.dropoutTrains(n) {
		// Eval mode or p = 0: the input itself; no mask.
		o.alias(n.Outputs[:1], reshapeLayout)
		return
	}
	if o.ip {
		// dropout_: noise = empty_like(x).bernoulli_(1-p).div_(1-p),
		// then x.mul_(noise), whose backward keeps the noise.
		o.own(o.alloc(o.bytes(x), Mask, ir.NoValue))
		o.inPlace()
		return
	}
	// native_dropout (dropout_cuda): its bool mask, which it saves,
	// then the output.
	o.own(o.alloc(o.s.Elems(x), Mask, ir.NoValue))
	o.newOut(0, Activation)
}

// mulForward emits mul, which saves each operand whose partner needs a
// gradient.
func mulForward(o *fwdOp) {
	n, s := o.n, o.s
	a, c := n.Inputs[0], n.Inputs[1]
	// Stochastic depth's noise, torch.empty(B, 1, 1, 1) in the
	// input's type, bernoulli_ and div_ in place, is a tensor of its
	// own that the product saves (torchvision.ops.stochastic_depth).
	for _, v := range []ir.ValueID{a, c} {
		if !o.data[v] && o.Drawn(v) && (o.needsGrad(a) || o.needsGrad(c)) {
			o.own(o.alloc(s.Elems(v)*o.dt[o.out(0)].Size(), Stats, ir.NoValue))
		}
	}
	if o.needsGrad(a) {
		o.save(c)
	}
	if o.needsGrad(c) && a != c {
		o.save(a)
	}
	if o.stopped() {
		return
	}
	o.newOut(0, Activation)
}

// divForward emits div. DivBackward0 saves self when other needs a
// gradient, and other when either does (both formulas read it), never the
// result (derivatives.yaml: saving it would break an in-place use of it).
// F.normalize's x / denom saves both.
func divForward(o *fwdOp) {
	n := o.n
	if o.needsGrad(n.Inputs[1]) {
		o.save(n.Inputs[0])
	}
	if o.needsGrad(n.Inputs[0]) || o.needsGrad(n.Inputs[1]) {
		o.save(n.Inputs[1])
	}
	o.newOut(0, Activation)
}

// addForward emits add, sub and cat, which save nothing; x += y in place
// allocates nothing.
func addForward(o *fwdOp) {
	if o.ip {
		o.inPlace()
		return
	}
	o.newOut(0, Activation)
}

// siluBackward makes silu_backward's gradient of the SiLU's input.
func siluBackward(o *bwdOp) { o.fresh(o.siluIn[o.n.ID]) }

// dropoutBackward makes native_dropout_backward's new gradient; a dropout
// that does not drop passes the gradient on.
func dropoutBackward(o *bwdOp) {
	if o.fw.dropoutTrains(o.n) {
		freshBackward(o)
		return
	}
	passBackward(o)
}

// addcmulScaled allocates, for the product of an addcmul (fuse marks it),
// the scaled tensor2 that AddcmulBackward0 makes before tensor1's
// gradient, grad * (tensor2 * value) (derivatives.yaml), of the output's
// size, and returns it for the caller to free once that product is made;
// -1 for another product.
func (o *bwdOp) addcmulScaled() int32 {
	y := o.outs[0]
	return o.copyIf(o.n.IntAttr("addcmul", 0) != 0, o.s.Elems(y)*o.dt[y].Size())
}

// mulBackward emits MulBackward0 and DivBackward0: a gradient of each
// operand that needs one, and a parameter operand's .grad.
func mulBackward(o *bwdOp) {
	n, s, k := o.n, o.s, o.k
	y := o.outs[0]
	ins := n.Inputs[:2]
	// A broadcast operand's gradient (the squeeze-excitation scale of
	// scale * x) is first a product of the output's size, which
	// validate_outputs sums to the operand's shape once the node's
	// gradients are made; then the product goes. MulBackward0 computes
	// other's gradient before self's (calibration/torchvision_ops.py,
	// se_mul), which only a broadcast operand makes visible.
	broadcast := false
	for _, v := range ins {
		broadcast = broadcast || (k == ir.EagerMul && v != ir.NoValue && o.rg[v] && s.Elems(v) < s.Elems(y))
	}
	if broadcast {
		ins = []ir.ValueID{n.Inputs[1], n.Inputs[0]}
	}
	// addcmul's gradients come in derivatives.yaml's order: tensor1's
	// (the parameter's product) before tensor2's.
	// (fuse writes the product t1 * t2 with the parameter first, as
	// ResMLP's addcmul(beta, alpha, x) passes it).
	addcmul := n.IntAttr("addcmul", 0) != 0 && o.param[n.Inputs[0]]
	if !addcmul {
		mulDataGrads(o, ins, broadcast)
	}
	// A parameter operand (a layer scale) gets its .grad: for a
	// broadcast one, the product of the output's size first, reduced
	// to the parameter's shape, then the product goes.
	for _, v := range n.Inputs[:2] {
		if v == ir.NoValue || !o.param[v] || o.paramGrads[v] >= 0 || k != ir.EagerMul {
			continue
		}
		var tmp int32 = -1
		if s.Elems(v) < s.Elems(y) {
			scaled := o.addcmulScaled()
			tmp = o.scratch(s.Elems(y)*o.dt[y].Size(), Grad)
			o.freeScratch(scaled)
		}
		if addcmul {
			mulDataGrads(o, ins, broadcast)
			addcmul = false
		}
		o.paramGrad(v)
		if tmp >= 0 {
			// The product's sum to a per-channel parameter ([C, 1, 1],
			// ConvNeXt's layer scale) is the reduction of a conv bias's
			// gradient: over N·H·W rows of C columns when the product
			// is channels-last, as it follows the gradient's layout.
			if len(s.Dims[y]) == 4 && s.Elems(v) == s.Dims[y][1] {
				rows := s.Elems(y) / max(s.Elems(v), 1)
				if gradChannelsLast(o.gy, s.Dims[y]) {
					o.columnSum(rows, s.Elems(v))
				} else {
					o.channelSum(rows, s.Elems(v), false)
				}
			}
			o.freeScratch(tmp)
		}
	}
	if addcmul {
		mulDataGrads(o, ins, broadcast)
	}
}

// mulDataGrads makes the gradients of a product's operands in ins that
// are not parameters awaiting their .grad: a broadcast one's product of
// the output's size first, summed to its shape once the others are made.
func mulDataGrads(o *bwdOp, ins []ir.ValueID, broadcast bool) {
	s := o.s
	y := o.outs[0]
	var tmp []int32
	var small []ir.ValueID
	for j, v := range ins {
		if v == ir.NoValue || (j == 1 && v == ins[0]) {
			continue
		}
		if broadcast && o.rg[v] && s.Elems(v) < s.Elems(y) {
			scaled := o.addcmulScaled()
			tmp = append(tmp, o.scratch(s.Elems(y)*o.dt[y].Size(), Grad))
			o.freeScratch(scaled)
			small = append(small, v)
			continue
		}
		if o.data[v] && o.rg[v] && o.dt[v] != o.dt[y] {
			// A promoted product (ConvNeXt's float32 layer_scale * a
			// half x under autocast): x's gradient is computed in the
			// output's type, and the engine's validate_outputs turns it
			// to x's once the node's gradients are made.
			o.later(o.alloc(s.Elems(v)*o.dt[y].Size(), Grad, v), v, false)
			continue
		}
		if o.data[v] {
			o.fresh(v)
		}
	}
	for j, v := range small {
		o.fresh(v)
		o.freeScratch(tmp[j])
	}
}

// addBackward emits AddBackward0 and SubBackward0: the gradient passed on
// to each operand, a new one for a broadcast operand (reduced to its
// shape) and for sub's second (negated), and a parameter operand's .grad.
func addBackward(o *bwdOp) {
	n, s, k := o.n, o.s, o.k
	// A parameter operand (a position embedding) gets its .grad, the
	// output's gradient summed to its shape.
	for _, v := range n.Inputs[:2] {
		if v != ir.NoValue && o.param[v] && k == ir.EagerAdd {
			o.paramGrad(v)
		}
	}
	for j, v := range n.Inputs[:2] {
		if v == ir.NoValue || !o.data[v] || (j == 1 && v == n.Inputs[0]) {
			continue
		}
		if s.Elems(v) != s.Elems(o.outs[0]) || (k == ir.EagerSub && j == 1) {
			o.fresh(v) // a broadcast operand's gradient is reduced; sub negates
		} else {
			o.pass(v, true, true)
		}
	}
}

// catBackward emits CatBackward0: each piece's gradient, a narrow of the
// incoming one, contiguous when cut along the first dim of size above 1.
// A parameter concatenated through an expand (ViT's class token) gets the
// sum of its slice, ExpandBackward's, as its .grad.
func catBackward(o *bwdOp) {
	n := o.n
	axis := o.axisOf(n)
	for _, v := range n.Inputs {
		if v != ir.NoValue && o.data[v] {
			o.pass(v, sliceContiguous(o.s.Dims[o.outs[0]], axis), false)
		}
	}
	for _, v := range n.Inputs {
		if p := o.paramBehind(v); p != ir.NoValue && !o.data[v] {
			o.paramGrad(p)
		}
	}
}

// castForward emits x.to(dtype), the exporter's Cast of a float tensor: x
// itself when eager PyTorch already holds it in that type (RMSNorm's
// hidden_states.to(torch.float32) of a float32 residual stream), else a
// copy in the new type.
func castForward(o *fwdOp) {
	x, y := o.n.Inputs[0], o.n.Outputs[0]
	to := ir.DType(o.n.IntAttr("to", 0))
	if to == o.dt[x] {
		o.alias(o.n.Outputs, reshapeLayout)
		return
	}
	o.dt[y] = to
	o.newOut(0, Activation)
}

// castBackward emits ToCopyBackward: nothing for a cast that changed no
// type, else the input's gradient in its own type.
func castBackward(o *bwdOp) {
	if x := o.n.Inputs[0]; o.dt[x] == o.dt[o.outs[0]] {
		passBackward(o)
		return
	}
	freshBackward(o)
}

// castCheck accepts a Cast of a float tensor to a float type; a cast of
// token ids or of a mask is shape arithmetic (Flow.classify), and other
// casts on tensor data have no rule.
func castCheck(f *Flow, n *ir.Node) (ir.Eager, error) {
	if _, ok := n.Attr("to"); !ok {
		return 0, fmt.Errorf("schedule: node %s: Cast has no \"to\" attribute, which ONNX requires: export the model again", n.Name)
	}
	to := ir.DType(n.IntAttr("to", 0))
	if !isFloat(f.shapes.DTypes[n.Inputs[0]]) || !isFloat(to) {
		return 0, unsupported(n)
	}
	return ir.EagerCast, nil
}

// whereForward emits where(condition, self, other): a new tensor of the
// operands' promoted type; WhereBackward0 keeps the condition when self or
// other needs a gradient (a slice of a registered mask buffer, GPT-Neo's
// causal bias, is resident and costs nothing).
func whereForward(o *fwdOp) {
	n := o.n
	if o.needsGrad(n.Inputs[1]) || o.needsGrad(n.Inputs[2]) {
		o.save(n.Inputs[0])
	}
	if o.stopped() {
		return
	}
	o.newOut(0, Activation)
}

// whereBackward emits WhereBackward0: self's gradient, where(condition,
// grad, 0), then other's, where(condition, 0, grad), each a new tensor of
// the output's size, reduced to the operand's shape where it was
// broadcast; a parameter operand's goes into its .grad.
func whereBackward(o *bwdOp) {
	n, s := o.n, o.s
	y := o.outs[0]
	for j, v := range n.Inputs[1:3] {
		if v == ir.NoValue || (j == 1 && v == n.Inputs[1]) {
			continue
		}
		small := s.Elems(v) < s.Elems(y)
		if o.param[v] {
			tmp := int32(-1)
			if small {
				tmp = o.scratch(s.Elems(y)*o.dt[y].Size(), Grad)
			}
			o.paramGradAdd(v, false)
			o.freeScratch(tmp)
			continue
		}
		mulDataGrads(o, []ir.ValueID{v}, small && o.rg[v])
	}
}
