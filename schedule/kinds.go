package schedule

import "github.com/onnxmem/onnxmem/ir"

// What package schedule runs for each eager kind (ir.Eager), the kind that
// an op's row in ir's op table names: its forward, and what the engine
// does around it. An op runs as its row's kind; Flow turns a Sigmoid·Mul
// into one SiLU and a batch norm on running statistics into
// EagerBatchNormEval.
//
// Worked example, Relu's row names EagerSavesResult: run (run.go) marks
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
	// elementwise: TensorIterator lays the op's new output out in its
	// operand's order (fwdOp.followLayout).
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
	ir.EagerConv:          {forward: convForward, stopsEarly: true},
	ir.EagerBatchNorm:     {forward: batchNormForward},
	ir.EagerBatchNormEval: {forward: batchNormForward},
	ir.EagerSiLU:          {forward: siluForward, elementwise: true, inPlace: true, stopsEarly: true},
	ir.EagerSavesResult:   {forward: savesResultForward, elementwise: true, inPlace: true},
	ir.EagerSavesInput:    {forward: savesInputForward, elementwise: true, inPlace: true},
	ir.EagerDropout:       {forward: dropoutForward, elementwise: true, inPlace: true},
	ir.EagerMean:          {forward: newOutput},
	ir.EagerLinear:        {forward: linearForward},
	ir.EagerMul:           {forward: mulForward, elementwise: true, promotes: true, stopsEarly: true},
	ir.EagerDiv:           {forward: divForward, elementwise: true, promotes: true},
	ir.EagerAdd:           {forward: addForward, elementwise: true, promotes: true, inPlace: true},
	ir.EagerSub:           {forward: addForward, elementwise: true, promotes: true},
	ir.EagerCat:           {forward: addForward, promotes: true, list: true},
	ir.EagerMaxPool:       {forward: maxPoolForward},
	ir.EagerAvgPool:       {forward: avgPoolForward, stopsEarly: true},
	ir.EagerUpsample:      {forward: upsampleForward},
	ir.EagerSum:           {forward: sumForward},
	ir.EagerSoftmax:       {forward: savesResultForward},
	ir.EagerView:          {forward: viewForward},
	ir.EagerReshape:       {forward: reshapeForward},
	ir.EagerFlatten:       {forward: reshapeForward},
	ir.EagerTranspose:     {forward: transposeForward},
	ir.EagerExpand:        {forward: expandForward},
	ir.EagerSlice:         {forward: sliceForward},
	ir.EagerSplit:         {forward: sliceForward},
	ir.EagerSelect:        {forward: selectForward},
	ir.EagerLayerNorm:     {forward: layerNormForward},
	ir.EagerAttention:     {forward: attentionForward},
	ir.EagerContiguous:    {forward: contiguousForward},
	ir.EagerEinsum:        {forward: einsumForward},
	ir.EagerPad:           {forward: newOutput},
	ir.EagerNorm:          {forward: normForward},
}
