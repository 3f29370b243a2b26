package schedule

import "github.com/onnxmem/onnxmem/ir"

// What package schedule runs for each eager kind (ir.Eager), the kind that
// an op's row in ir's op table names: its forward and its backward, the
// check of the nodes it accepts, and the flags that tell the engine what
// to do around them. An op runs as its row's kind; Flow turns a
// Sigmoid·Mul into one SiLU and a batch norm on running statistics into
// EagerBatchNormEval.
//
// Worked example, Relu's row names EagerSavesResult: forwardPass.run (fwdop.go) marks
// the output as needing a gradient when an input does and types it as
// its input, then savesResultForward allocates it and saves it, as
// derivatives.yaml's relu entry (threshold_backward(grad, result, 0))
// needs; relu is element-wise, so run lays the new output out in its
// input's order. A Holder may run it in place (relu_): savesResultForward
// then gives the output the input's storage and saves that.

// kindRule is how package schedule runs one eager kind.
type kindRule struct {
	// forward emits the op's own allocations, frees and saves (run does
	// what every op does around them).
	forward func(o *fwdOp)
	// backward emits the op's autograd node: its inputs' gradients (back
	// releases what the node held and hands the gradients on).
	backward func(o *bwdOp)
	// check, when set, refuses a node of the kind that onnxmem does not
	// simulate, with an error that names the node and what to do, and
	// returns the node's kind: the row's, or another (a batch norm on
	// running statistics runs as EagerBatchNormEval).
	check func(f *Flow, n *ir.Node) (ir.Eager, error)
	// elementwise: TensorIterator lays the op's new output out in its
	// operand's order (fwdOp.followLayout), and the input's gradient in
	// the incoming gradient's.
	elementwise bool
	// promotes: a parameter operand takes part in type promotion, as an
	// activation does.
	promotes bool
	// inPlace: the op has an in-place form that a Holder may choose (relu_,
	// hardswish_, dropout_, silu_, x += y).
	inPlace bool
	// stopsEarly: the last tensor the op saves is an input, so a
	// recomputation that ends at it stops before its kernel runs
	// (checkpoints.recompute).
	stopsEarly bool
	// list: the op reads a list of tensors (cat's), which dies last item
	// first.
	list bool
}

// kindRules are the rules of the eager kinds that run on tensor data
// (ir.Eager.RunsOnData).
var kindRules = [...]kindRule{
	ir.EagerConv:          {forward: convForward, backward: convBackward, stopsEarly: true},
	ir.EagerBatchNorm:     {forward: batchNormForward, backward: batchNormBackward, check: batchNormCheck},
	ir.EagerBatchNormEval: {forward: batchNormForward, backward: batchNormBackward},
	ir.EagerSiLU:          {forward: siluForward, backward: siluBackward, elementwise: true, inPlace: true, stopsEarly: true},
	ir.EagerSavesResult:   {forward: savesResultForward, backward: freshBackward, elementwise: true, inPlace: true},
	ir.EagerSavesInput:    {forward: savesInputForward, backward: freshBackward, elementwise: true, inPlace: true},
	ir.EagerDropout:       {forward: dropoutForward, backward: dropoutBackward, elementwise: true, inPlace: true},
	ir.EagerMean:          {forward: newOutput, backward: freshBackward},
	ir.EagerLinear:        {forward: linearForward, backward: linearBackward, check: linearCheck},
	ir.EagerMul:           {forward: mulForward, backward: mulBackward, elementwise: true, promotes: true, stopsEarly: true},
	ir.EagerDiv:           {forward: divForward, backward: mulBackward, elementwise: true, promotes: true},
	ir.EagerAdd:           {forward: addForward, backward: addBackward, elementwise: true, promotes: true, inPlace: true},
	ir.EagerSub:           {forward: addForward, backward: addBackward, elementwise: true, promotes: true},
	ir.EagerCat:           {forward: addForward, backward: catBackward, promotes: true, list: true},
	ir.EagerMaxPool:       {forward: maxPoolForward, backward: maxPoolBackward},
	ir.EagerAvgPool:       {forward: avgPoolForward, backward: avgPoolBackward, stopsEarly: true},
	ir.EagerUpsample:      {forward: upsampleForward, backward: upsampleBackward, check: upsampleCheck},
	ir.EagerSum:           {forward: sumForward, backward: sumBackward},
	ir.EagerSoftmax:       {forward: savesResultForward, backward: freshBackward},
	ir.EagerView:          {forward: viewForward, backward: passBackward},
	ir.EagerReshape:       {forward: reshapeForward, backward: reshapeBackward},
	ir.EagerFlatten:       {forward: reshapeForward, backward: passBackward},
	ir.EagerTranspose:     {forward: transposeForward, backward: transposeBackward},
	ir.EagerExpand:        {forward: expandForward, backward: expandBackward},
	ir.EagerSlice:         {forward: sliceForward, backward: splitBackward},
	ir.EagerSplit:         {forward: sliceForward, backward: splitBackward},
	ir.EagerSelect:        {forward: selectForward, backward: freshBackward, check: selectCheck},
	ir.EagerLayerNorm:     {forward: layerNormForward, backward: layerNormBackward},
	ir.EagerAttention:     {forward: attentionForward, backward: attentionBackward},
	ir.EagerContiguous:    {forward: contiguousForward, backward: passBackward},
	ir.EagerEinsum:        {forward: einsumForward, backward: einsumBackward, check: einsumCheck},
	ir.EagerPad:           {forward: newOutput, backward: freshBackward},
	ir.EagerNorm:          {forward: normForward, backward: freshBackward},
	ir.EagerEmbedding:     {forward: embeddingForward, backward: embeddingBackward},
	ir.EagerCast:          {forward: castForward, backward: castBackward, check: castCheck},
	ir.EagerUnary:         {forward: newOutput, backward: freshBackward, elementwise: true},
	ir.EagerWhere:         {forward: whereForward, backward: whereBackward, elementwise: true, promotes: true, stopsEarly: true},
}
