package schedule

import (
	"fmt"
	"slices"

	"github.com/onnxmem/onnxmem/ir"
)

// opKind is what a graph node is as an eager PyTorch op.
type opKind uint8

const (
	opMeta          opKind = iota // shape arithmetic: Python ints in eager, no device memory
	opSkip                        // absorbed into a neighbour (the Sigmoid of a SiLU)
	opConv                        // conv2d: saves input and weight
	opBatchNorm                   // batch_norm in training: saves input, weight, mean, invstd
	opBatchNormEval               // batch_norm with running statistics: saves input, weight
	opSiLU                        // Sigmoid·Mul of one tensor: saves its input
	opSigmoid                     // sigmoid and relu: save the output
	opSavesInput                  // hardswish, hardsigmoid: save the input
	opDropout                     // native_dropout in training: saves a bool mask; dropout_ a float noise
	opGlobalAvgPool               // mean over dims (adaptive_avg_pool2d to 1×1 is mean over H, W): saves only sizes
	opGemm                        // addmm or mm (linear): saves the input and the weight
	opMul                         // mul: saves each operand whose partner needs a gradient
	opDiv                         // div: saves the divisor (and the output when the divisor needs a gradient)
	opAdd                         // add and sub: save nothing
	opSub                         // sub: saves nothing; the second operand's gradient is negated
	opConcat                      // cat and stack: save nothing
	opMaxPool                     // max_pool2d_with_indices: saves input and int64 indices
	opAvgPool                     // avg_pool2d: saves input
	opResize                      // upsample_nearest2d: saves nothing
	opReduceSum                   // sum over dims: saves nothing
	opSoftmax                     // softmax: saves its output
	opView                        // slice, split, reshape, unsqueeze, …: no new storage
	opLayerNorm                   // native_layer_norm: saves input, weight, bias, mean, rstd
	opSelect                      // select (a Gather of one index): a view; its backward a gradient of the whole input
	opAttention                   // scaled_dot_product_attention, fused: saves q, k, v, the output and the logsumexp
	opContiguous                  // x.contiguous(): the same tensor, or a contiguous copy of a strided one
	opEinsum                      // einsum and matmul of two activations: one bmm, which saves its two matrices (einsum.go)
	opPad                         // constant_pad_nd: a new tensor (a clone when no pad is positive); saves only sizes
	opNorm                        // linalg_vector_norm over dims: saves its input and its result
)

// castClass is how torch.autocast treats an op (aten/src/ATen/autocast_mode.cpp
// lists the ops of each class).
type castClass uint8

const (
	// castNone: the op runs in its inputs' type, the widest of them (type
	// promotion), autocast or not.
	castNone castClass = iota
	// castLower: autocast casts its float inputs to float16 and it returns
	// float16 (conv2d; the weight casts are cached until autocast exits).
	castLower
	// castFP32: autocast runs it in float32 and it returns float32 (softmax,
	// sum, upsample_nearest2d).
	castFP32
)

// opRule is everything onnxmem knows of one ONNX op beyond its shape rule,
// which is ir's (ir.ShapeOps lists them): the eager op it runs as, whose forward
// (run.go) and backward (backward.go) rules say what it allocates, what
// autograd saves and what its backward allocates; its autocast class; and
// its FLOPs. saves documents what autograd keeps for the backward, from
// tools/autograd/derivatives.yaml; the rules implement it.
type opRule struct {
	kind     opKind
	autocast castClass
	flops    func(n *ir.Node, s *ir.Shapes) int64
	saves    string
}

// opOnlyShapes marks ops that onnxmem simulates only as shape arithmetic:
// on tensor data they are an error.
const opOnlyShapes = opMeta

// opRules is the one table of ONNX ops: adding an op is an entry here (with
// a new opKind and its forward and backward rules when no existing kind
// fits), a shape rule in ir, and their tests. Ops whose kind is
// opOnlyShapes have FLOPs and shapes but no memory rule on tensor data yet.
var opRules = map[string]opRule{
	"Conv":                      {kind: opConv, autocast: castLower, flops: convFLOPs, saves: "input, weight (convolution_backward)"},
	"BatchNormalization":        {kind: opBatchNorm, flops: batchNormFLOPs, saves: "input, weight, save_mean, save_invstd in training; input, weight on running statistics"},
	"Sigmoid":                   {kind: opSigmoid, flops: elementwise, saves: "result"},
	"ScaledDotProductAttention": {kind: opAttention, autocast: castLower, flops: attentionFLOPs, saves: "query, key, value, output, logsumexp (the flash kernel under autocast, memory-efficient attention in float32)"},
	"Einsum":                    {kind: opEinsum, autocast: castLower, flops: einsumFLOPs, saves: "the two matrices bmm multiplies: each operand permuted and reshaped, a copy where no view has those dims (sumproduct_pair)"},
	"MatMul":                    {kind: opEinsum, autocast: castLower, flops: einsumFLOPs, saves: "the two matrices bmm multiplies: each operand expanded and reshaped, a copy where no view has those dims (matmul of two activations; a linear's MatMul is a Gemm)"},
	"Pad":                       {kind: opPad, flops: free, saves: "nothing (the pads): F.pad, constant_pad_nd, whose backward pads the gradient back (a new tensor)"},
	"Gelu":                      {kind: opSavesInput, flops: elementwise, saves: "self (gelu; the generic family fuses the exporter's erf pattern into it)"},
	"LayerNormalization":        {kind: opLayerNorm, autocast: castFP32, flops: batchNormFLOPs, saves: "input, weight, bias, mean, rstd (native_layer_norm; float32 under autocast)"},
	"Tanh":                      {kind: opSigmoid, flops: elementwise, saves: "result (MaxViT's classifier)"},
	"Relu":                      {kind: opSigmoid, flops: elementwise, saves: "result (relu_ in place: the modified input, the same storage)"},
	"HardSwish":                 {kind: opSavesInput, flops: elementwise, saves: "self (hardswish_ in place: a copy of self made before the op)"},
	"Clip":                      {kind: opSavesInput, flops: elementwise, saves: "self (hardtanh, as ReLU6 and clamp export; MobileNetV2's ReLU6(inplace=True) measured as much as out of place)"},
	"HardSigmoid":               {kind: opSavesInput, flops: elementwise, saves: "self (hardsigmoid_ in place: a copy of self made before the op)"},
	"Dropout":                   {kind: opDropout, flops: elementwise, saves: "the bool mask (native_dropout); dropout_ in place: the float noise it multiplies by"},
	"GlobalAveragePool":         {kind: opGlobalAvgPool, flops: reduceFLOPs, saves: "nothing (the input's sizes: mean over H and W)"},
	"Gemm":                      {kind: opGemm, autocast: castLower, flops: gemmFLOPs, saves: "mat1 when the weight needs a gradient, the weight (a transposed view) when mat1 does (addmm)"},
	"Flatten":                   {kind: opView, flops: free, saves: "nothing: a view of a contiguous tensor"},
	"Mul":                       {kind: opMul, flops: elementwise, saves: "each operand whose partner needs a gradient"},
	"Div":                       {kind: opDiv, flops: elementwise, saves: "other, and result when other needs a gradient"},
	"Add":                       {kind: opAdd, flops: elementwise, saves: "nothing"},
	"Sub":                       {kind: opSub, flops: elementwise, saves: "nothing"},
	"Concat":                    {kind: opConcat, flops: free, saves: "nothing (the pieces' sizes)"},
	"MaxPool":                   {kind: opMaxPool, flops: poolFLOPs, saves: "input, indices (int64)"},
	"AveragePool":               {kind: opAvgPool, flops: poolFLOPs, saves: "input"},
	"Resize":                    {kind: opResize, autocast: castFP32, flops: resizeFLOPs, saves: "nothing (nearest)"},
	"ReduceSum":                 {kind: opReduceSum, autocast: castFP32, flops: reduceFLOPs, saves: "nothing (the input's sizes)"},
	"ReduceMean":                {kind: opGlobalAvgPool, flops: reduceFLOPs, saves: "nothing (the input's sizes): x.mean(dims), as shufflenet and mnasnet pool"},
	"ReduceL2":                  {kind: opNorm, autocast: castFP32, flops: reduceFLOPs, saves: "self and result (linalg_vector_norm, as F.normalize's x.norm(2, dim, keepdim=True) runs; float32 under autocast)"},
	"Softmax":                   {kind: opSoftmax, autocast: castFP32, flops: softmaxFLOPs, saves: "result"},
	"Slice":                     {kind: opView, flops: free, saves: "nothing: a view"},
	"Split":                     {kind: opView, flops: free, saves: "nothing: views"},
	"Identity":                  {kind: opView, flops: free, saves: "nothing: the same tensor"},
	"Contiguous":                {kind: opContiguous, flops: free, saves: "nothing: x.contiguous(), a copy of a strided x (the generic family's fusion of MultiheadAttention's packed projection)"},
	"Reshape":                   {kind: opView, flops: free, saves: "nothing: a view of a contiguous tensor"},
	"Unsqueeze":                 {kind: opView, flops: free, saves: "nothing: a view"},
	"Squeeze":                   {kind: opView, flops: free, saves: "nothing: a view"},
	"Transpose":                 {kind: opView, flops: free, saves: "nothing: a strided view"},
	"Shape":                     {kind: opOnlyShapes, flops: free},
	"Constant":                  {kind: opOnlyShapes, flops: free},
	"ConstantOfShape":           {kind: opOnlyShapes, flops: free},
	"Gather":                    {kind: opOnlyShapes, flops: free},
	"Expand":                    {kind: opView, flops: free, saves: "nothing: a view with stride 0 along the expanded dims (F.normalize's expand_as of the norm); its backward sums the gradient back to the input's sizes"},
	"Cast":                      {kind: opOnlyShapes, flops: free},
	// Comparisons and random tensors: torchvision's stochastic depth draws
	// its noise from shapes alone (RandomUniformLike of a ConstantOfShape,
	// Less, Cast): the Mul that applies it allocates its B elements, which
	// eager PyTorch draws in place into one tensor (run.go, opMul).
	"Less":              {kind: opOnlyShapes, flops: free},
	"Mod":               {kind: opOnlyShapes, flops: free},
	"Not":               {kind: opOnlyShapes, flops: elementwise},
	"ScatterND":         {kind: opOnlyShapes, flops: free},
	"Where":             {kind: opOnlyShapes, flops: free},
	"Greater":           {kind: opOnlyShapes, flops: free},
	"Equal":             {kind: opOnlyShapes, flops: free},
	"RandomUniformLike": {kind: opOnlyShapes, flops: free},
	"RandomNormalLike":  {kind: opOnlyShapes, flops: free},
	"Range":             {kind: opOnlyShapes, flops: free},
	"Pow":               {kind: opOnlyShapes, flops: elementwise},
	"LeakyRelu":         {kind: opOnlyShapes, flops: elementwise},
	"Mish":              {kind: opOnlyShapes, flops: elementwise},
	"Neg":               {kind: opOnlyShapes, flops: elementwise},
	"Exp":               {kind: opOnlyShapes, flops: elementwise},
	"Log":               {kind: opOnlyShapes, flops: elementwise},
	"Sqrt":              {kind: opOnlyShapes, flops: elementwise},
	"Abs":               {kind: opOnlyShapes, flops: elementwise},
	"Erf":               {kind: opOnlyShapes, flops: elementwise},
	"LogSoftmax":        {kind: opOnlyShapes, flops: softmaxFLOPs},
}

// FLOPs returns the forward FLOPs of node n at shapes s (a multiply-add
// counts 2), from its op's rule:
//
//	Conv                     2 · N·Cout·Hout·Wout · Cin/groups·KH·KW, plus one add per output for a bias
//	Gemm                     2 · M·N·K, plus one add per output for C
//	BatchNormalization       4 per element in training, 2 on running statistics
//	MaxPool, AveragePool     one per window element per output
//	ReduceSum, GlobalAveragePool  one per input element
//	Softmax, LogSoftmax      5 per element (max, subtract, exp, sum, divide)
//	Resize                   0 in nearest mode (a copy), 1 per output element otherwise
//	Concat, Split, Slice, Reshape, Flatten, Cast and other views and copies: 0
//	element-wise ops         1 per output element (Sigmoid, Mul, Add, Relu, Dropout, …)
//
// These are the estimates of the usual FLOP counters: a Sigmoid's exp costs
// more cycles than an add but counts one. An op outside the table is an
// error.
func FLOPs(n *ir.Node, s *ir.Shapes) (int64, error) {
	r, ok := ruleOf(n)
	if !ok {
		return 0, fmt.Errorf("schedule: node %s: no FLOP rule for op %s", n.Name, n.OpType)
	}
	return r.flops(n, s), nil
}

// ruleOf returns the rule of node n's op, if the table has one.
func ruleOf(n *ir.Node) (opRule, bool) {
	if n.Domain != "" && n.Domain != "ai.onnx" {
		return opRule{}, false
	}
	r, ok := opRules[n.OpType]
	return r, ok
}

// Ops lists the ONNX ops of the table, sorted.
func Ops() []string {
	out := make([]string, 0, len(opRules))
	for op := range opRules {
		out = append(out, op)
	}
	slices.Sort(out)
	return out
}

func free(*ir.Node, *ir.Shapes) int64 { return 0 }

// einsumFLOPs is 2 per multiply-add of the one bmm of an Einsum or a
// MatMul: the product of every label's size, summed ones included
// (2·batch·n·k·m for a MatMul).
func einsumFLOPs(n *ir.Node, s *ir.Shapes) int64 {
	eq, err := equationOf(n, s)
	if err != nil {
		return 0
	}
	ops, _, err := ir.EinsumLabels(eq, len(n.Inputs))
	if err != nil {
		return 0
	}
	var size [128]int64
	for k, labels := range ops {
		for j, l := range labels {
			if d := s.Dims[n.Inputs[k]]; j < len(d) {
				size[l] = max(size[l], d[j])
			}
		}
	}
	f := int64(2)
	for _, v := range size {
		if v > 0 {
			f *= v
		}
	}
	return f
}

func elementwise(n *ir.Node, s *ir.Shapes) int64 { return s.Elems(n.Outputs[0]) }

func convFLOPs(n *ir.Node, s *ir.Shapes) int64 {
	out := s.Elems(n.Outputs[0])
	macs := out
	for _, d := range s.Dims[n.Inputs[1]][1:] { // [Cout, Cin/groups, KH, KW]
		macs *= d
	}
	f := 2 * macs
	if len(n.Inputs) > 2 && n.Inputs[2] != ir.NoValue {
		f += out
	}
	return f
}

func batchNormFLOPs(n *ir.Node, s *ir.Shapes) int64 {
	if isTrainingBN(n) {
		return 4 * s.Elems(n.Outputs[0])
	}
	return 2 * s.Elems(n.Outputs[0])
}

func poolFLOPs(n *ir.Node, s *ir.Shapes) int64 {
	k := s.Elems(n.Outputs[0])
	for _, d := range n.IntsAttr("kernel_shape") {
		k *= d
	}
	return k
}

// gemmFLOPs counts Gemm: 2·M·N·K, plus one add per output for C.
func gemmFLOPs(n *ir.Node, s *ir.Shapes) int64 {
	out := s.Elems(n.Outputs[0])
	k := int64(1)
	if d := s.Dims[n.Inputs[0]]; len(d) >= 2 {
		k = d[len(d)-1]
		if len(d) == 2 && n.IntAttr("transA", 0) != 0 {
			k = d[0]
		}
	}
	f := 2 * out * k
	if len(n.Inputs) > 2 && n.Inputs[2] != ir.NoValue {
		f += out
	}
	return f
}

func reduceFLOPs(n *ir.Node, s *ir.Shapes) int64 { return s.Elems(n.Inputs[0]) }

func softmaxFLOPs(n *ir.Node, s *ir.Shapes) int64 { return 5 * s.Elems(n.Outputs[0]) }

func resizeFLOPs(n *ir.Node, s *ir.Shapes) int64 {
	if a, ok := n.Attr("mode"); ok && a.Str != "nearest" {
		return s.Elems(n.Outputs[0])
	}
	return 0
}

// isTrainingBN reports whether a BatchNormalization runs in training mode,
// on the batch's statistics.
func isTrainingBN(n *ir.Node) bool {
	return n.IntAttr("training_mode", 0) == 1 || len(n.Outputs) > 1
}

func isFloat(d ir.DType) bool { return d.IsFloat() }

// attentionFLOPs counts q @ kᵀ and its product with v: 4·B·H·L·S·D, and
// the softmax's 5 per score.
func attentionFLOPs(n *ir.Node, s *ir.Shapes) int64 {
	q, k := s.Dims[n.Inputs[0]], s.Dims[n.Inputs[1]]
	if len(q) < 2 || len(k) < 2 {
		return 0
	}
	scores := s.Elems(n.Inputs[0]) / q[len(q)-1] * k[len(k)-2]
	return 4*scores*q[len(q)-1] + 5*scores
}
