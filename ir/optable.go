// The op table: one row per ONNX op, every fact onnxmem knows of it. Package
// ir reads a row's shape rule; package schedule its eager kind, autocast
// class, FLOPs and saved tensors.
//
// Worked example, the row of Conv: its shape rule is opConv ([N C H W] *
// [M C/group kh kw] → [N M H' W'], ops.go); on tensor data it runs as
// conv2d (EagerConv), which autocast lowers to float16 (conv2d is in
// AT_FORALL_LOWER_PRECISION_FP of aten/src/ATen/autocast_mode.h); it
// counts 2·N·M·H'·W'·C/group·kh·kw FLOPs (convFLOPs); and autograd keeps
// its input and its weight for convolution_backward (derivatives.yaml's
// convolution entry). In float32 the weight is the resident parameter
// itself, so the step saves one buffer, the input; under autocast it saves
// the float16 input and the weight's cached float16 copy.
//
// Sources: tools/autograd/derivatives.yaml (what each op saves, by its
// entry's name in Source) and aten/src/ATen/autocast_mode.h (the autocast
// policies), PyTorch 2.x.

package ir

import (
	"slices"
	"strings"
)

// Op is one row of the op table: everything onnxmem knows of one ONNX op of
// the default domain.
type Op struct {
	// Type is the ONNX op type.
	Type string
	// shape is the kind of its shape rule (ops.go).
	shape opKind
	// Eager is the eager PyTorch op that it runs as on tensor data, whose
	// forward and backward package schedule simulates. EagerNone: onnxmem
	// simulates it only as shape arithmetic, and on tensor data it is an
	// error.
	Eager Eager
	// Autocast is how torch.autocast runs it. Ops without a memory rule
	// (EagerNone) have none.
	Autocast Autocast
	// FLOPs counts its forward FLOPs at shapes s, a multiply-add counting 2.
	FLOPs func(n *Node, s *Shapes) int64
	// Saves lists, in the order autograd packs them, the tensors it keeps
	// for the backward.
	Saves []Saved
	// Source names the derivatives.yaml entry that Saves follows, with what
	// it saves in its words and notes on the eager op.
	Source string
	// InPlaceSavesResult says that its in-place form, where a model's code
	// runs it in place, keeps its result (the overwritten input) for the
	// backward, as its own derivatives.yaml entry says (leaky_relu_), where
	// an op whose backward reads its input otherwise keeps a copy of the
	// input made before the op (hardswish_).
	InPlaceSavesResult bool
	// GradView says that its backward hands on a view of the incoming
	// gradient (a reshape, permute, squeeze or unsqueeze of it), whose
	// ViewInfo keeps the base alive: InputBuffer::accumulate then never
	// sums into it in place (can_accumulate_inplace).
	GradView bool
	// GradTemps counts the temporaries of its output's size that its
	// backward formula makes before the input's gradient and frees after it,
	// at the end of the C++ full expression: pow_backward's
	// grad * (exp * self.pow(exp - 1)) makes two (FunctionsManual.cpp).
	GradTemps int
}

// Eager is what a node is as an eager PyTorch op. A row's kind is its op's;
// a node's can differ, as package schedule decides it: EagerMeta for shape
// arithmetic, EagerSkip and EagerSiLU for the Sigmoid and Mul of a SiLU,
// EagerBatchNormEval for a batch norm on its running statistics.
type Eager uint8

// The eager kinds.
const (
	EagerNone          Eager = iota // no memory rule: shape arithmetic only, an error on tensor data
	EagerMeta                       // shape arithmetic whatever its inputs (Python ints in eager, no device memory)
	EagerSkip                       // absorbed into a neighbour (the Sigmoid of a SiLU)
	EagerConv                       // conv2d
	EagerBatchNorm                  // batch_norm on the batch's statistics
	EagerBatchNormEval              // batch_norm on the running statistics
	EagerSiLU                       // silu: a Sigmoid·Mul of one tensor, one kernel
	EagerSavesResult                // an element-wise op whose backward reads its result: sigmoid, relu, tanh
	EagerSavesInput                 // an element-wise op whose backward reads its input: hardswish, gelu, hardtanh
	EagerDropout                    // native_dropout in training, dropout_ in place
	EagerMean                       // mean over dims (adaptive_avg_pool2d to 1×1 is the mean over H and W)
	EagerLinear                     // addmm, or mm without a bias, of a linear layer
	EagerMul                        // mul
	EagerDiv                        // div
	EagerAdd                        // add
	EagerSub                        // sub: the second operand's gradient is negated
	EagerCat                        // cat and stack
	EagerMaxPool                    // max_pool2d_with_indices
	EagerAvgPool                    // avg_pool2d
	EagerUpsample                   // upsample_nearest2d, upsample_bilinear2d, upsample_bicubic2d
	EagerSum                        // sum over dims
	EagerSoftmax                    // softmax and log_softmax along a dim
	EagerView                       // a view in the same layout: the same tensor, squeeze, unsqueeze
	EagerReshape                    // view or reshape: a copy where no strides address the new dims
	EagerFlatten                    // flatten: a reshape whose gradient passes back as it comes
	EagerTranspose                  // permute: a strided view
	EagerExpand                     // expand: a view with stride 0 along the expanded dims
	EagerSlice                      // slice: the slices of one tensor along one axis are one chunk()
	EagerSplit                      // split: views
	EagerSelect                     // select (a Gather of one index): a view
	EagerLayerNorm                  // native_layer_norm
	EagerAttention                  // scaled_dot_product_attention, fused
	EagerContiguous                 // x.contiguous(): the tensor itself, or a contiguous copy of a strided one
	EagerEinsum                     // einsum and matmul of two activations: one bmm
	EagerPad                        // constant_pad_nd
	EagerNorm                       // linalg_vector_norm over dims
	EagerEmbedding                  // embedding: a Gather of token ids from a parameter's rows
	EagerCast                       // x.to(dtype): x itself in its own type, else a copy
	EagerUnary                      // an element-wise op whose backward reads neither input nor result: neg
	EagerWhere                      // where(condition, self, other)
)

// RunsOnData reports whether nodes of kind k run on tensor data as eager
// ops of their own: neither shape arithmetic nor absorbed into a neighbour.
func (k Eager) RunsOnData() bool { return k > EagerSkip }

// Autocast is how torch.autocast treats an op: the policy of the list that
// aten/src/ATen/autocast_mode.h puts it in.
type Autocast uint8

// The autocast policies.
const (
	// AutocastNone: the op runs in its inputs' type, the widest of them
	// (type promotion), autocast or not.
	AutocastNone Autocast = iota
	// AutocastLower (lower_precision_fp): autocast casts the float inputs
	// to float16 and the op returns float16 (conv2d, addmm, bmm,
	// scaled_dot_product_attention); the weights' casts are cached until
	// autocast exits.
	AutocastLower
	// AutocastFP32 (fp32): autocast casts the inputs to float32 and the op
	// returns float32 (layer_norm, upsample_nearest2d).
	AutocastFP32
	// AutocastFP32Dtype (fp32_set_opt_dtype): the op reads its inputs as
	// they are and returns float32, through its dtype argument (softmax,
	// log_softmax, sum, linalg_vector_norm).
	AutocastFP32Dtype
)

// Float32 reports whether autocast runs the op in float32 and it returns
// float32.
func (a Autocast) Float32() bool { return a == AutocastFP32 || a == AutocastFP32Dtype }

// Saved is one tensor that autograd keeps for an op's backward, as an op's
// derivatives.yaml formulas read it.
type Saved struct {
	// Of says what the tensor is.
	Of SavedOf
	// Index is the input (SavedInput, SavedWeight) or the output
	// (SavedResult) it is.
	Index int
	// DType is the element type of a tensor that the op makes for its
	// backward (SavedMask, SavedIndices, SavedStats, SavedSeed).
	DType DType
	// If says when autograd saves it.
	If SaveIf
}

// SavedOf is what a saved tensor is.
type SavedOf uint8

// The saved tensors.
const (
	// SavedInput is an input as the op reads it: the activation, its
	// autocast copy (float16 for AutocastLower, float32 for AutocastFP32),
	// or the contiguous copy a kernel takes of a strided one. A model
	// parameter there is resident: it saves no step buffer, but for its
	// float16 copy under AutocastLower.
	SavedInput SavedOf = iota
	// SavedWeight is an input that is a model parameter: resident, it
	// saves no step buffer, but for its cached float16 copy under
	// AutocastLower.
	SavedWeight
	// SavedResult is an output.
	SavedResult
	// SavedMask is what dropout keeps to apply its mask again: one element
	// per element of the input.
	SavedMask
	// SavedIndices are a max pool's argmax: one element per element of the
	// output.
	SavedIndices
	// SavedStats are statistics a kernel makes for the backward: batch
	// norm's mean and inverse std (one per channel), layer norm's mean and
	// rstd (one per normalized row), attention's logsumexp (one per query
	// row).
	SavedStats
	// SavedSeed is a random generator's state that the backward replays:
	// the flash attention kernel's philox seed and offset.
	SavedSeed
)

// SaveIf is the condition under which autograd saves a tensor.
type SaveIf uint8

// The conditions.
const (
	// SaveAlways: whenever autograd records the op.
	SaveAlways SaveIf = iota
	// SaveInTraining: only in training mode (a dropout that drops, a
	// batch norm on the batch's statistics).
	SaveInTraining
	// SaveIfPartnerGrad: only when the other operand of a binary op (input
	// 1 for input 0, input 0 for input 1) needs a gradient, the one whose
	// formula reads this tensor.
	SaveIfPartnerGrad
	// SaveUnderAutocast: only under autocast, where the op runs another
	// kernel (the flash attention kernel).
	SaveUnderAutocast
)

// OpOf returns the row of node n's op, and false for an op the table does
// not have (or an op of another domain).
func OpOf(n *Node) (Op, bool) {
	if n.Domain != "" && n.Domain != "ai.onnx" {
		return Op{}, false
	}
	i, ok := slices.BinarySearchFunc(opTable, n.OpType, func(r Op, t string) int { return strings.Compare(r.Type, t) })
	if !ok {
		return Op{}, false
	}
	return opTable[i], true
}

// Ops returns the rows of the op table, sorted by op type.
func Ops() []Op {
	return slices.Clone(opTable)
}

// Constructors of the saved tensors, for the table.
func savedInput(k int) Saved        { return Saved{Of: SavedInput, Index: k} }
func savedWeight(k int) Saved       { return Saved{Of: SavedWeight, Index: k} }
func savedResult() Saved            { return Saved{Of: SavedResult} }
func savedStats(dt DType) Saved     { return Saved{Of: SavedStats, DType: dt} }
func (s Saved) when(c SaveIf) Saved { s.If = c; return s }

// opTable is the op table, sorted by op type. Adding an op is a row here,
// with an eager kind that package schedule runs (a new one only where no
// kind fits), and its graph in schedule's TestSavedTensors, which checks
// Saves against what the program saves.
var opTable = []Op{
	{Type: "Abs", shape: opSameShape, FLOPs: elementwise},
	{Type: "Add", shape: opBinary, Eager: EagerAdd, FLOPs: elementwise, Source: "add.Tensor: nothing"},
	{Type: "And", shape: opCompare, FLOPs: free},
	{Type: "AveragePool", shape: opPool, Eager: EagerAvgPool, FLOPs: poolFLOPs, Saves: []Saved{savedInput(0)},
		Source: "avg_pool2d: self (avg_pool2d_backward)"},
	{Type: "BatchNormalization", shape: opBatchNorm, Eager: EagerBatchNorm, FLOPs: batchNormFLOPs,
		Saves:  []Saved{savedInput(0), savedWeight(1), savedStats(Float32).when(SaveInTraining), savedStats(Float32).when(SaveInTraining)},
		Source: "native_batch_norm: input, weight, save_mean, save_invstd (float32 whatever the input) in training; input, weight and the running statistics on running statistics"},
	{Type: "Cast", shape: opCast, Eager: EagerCast, FLOPs: free,
		Source: "_to_copy: nothing (ToCopyBackward casts the gradient back); x.to(dtype) returns x itself when it already has that type"},
	{Type: "Clip", shape: opSameShape, Eager: EagerSavesInput, FLOPs: elementwise, Saves: []Saved{savedInput(0)},
		Source: "hardtanh: self (hardtanh_backward), as ReLU6 and clamp export; MobileNetV2's ReLU6(inplace=True) measured as much as out of place"},
	{Type: "Concat", shape: opConcat, Eager: EagerCat, FLOPs: free, Source: "cat: nothing (the pieces' sizes)"},
	{Type: "Constant", shape: opConstant, Eager: EagerMeta, FLOPs: free},
	{Type: "ConstantOfShape", shape: opConstantOfShape, Eager: EagerMeta, FLOPs: free},
	{Type: "Contiguous", shape: opSameShape, Eager: EagerContiguous, FLOPs: free,
		Source: "clone: nothing; x.contiguous(), a copy of a strided x (the generic family's fusion of MultiheadAttention's packed projection)"},
	{Type: "Conv", shape: opConv, Eager: EagerConv, Autocast: AutocastLower, FLOPs: convFLOPs, Saves: []Saved{savedInput(0), savedWeight(1)},
		Source: "convolution: input, weight (convolution_backward)"},
	{Type: "Cos", shape: opSameShape, FLOPs: elementwise},
	{Type: "CumSum", shape: opSameShape, FLOPs: elementwise},
	{Type: "Div", shape: opBinary, Eager: EagerDiv, FLOPs: elementwise, Saves: []Saved{savedInput(0).when(SaveIfPartnerGrad), savedInput(1)},
		Source: "div.Tensor: self when other needs a gradient (div_tensor_other_backward), other for both; never the result, which an in-place use could change"},
	{Type: "Dropout", shape: opDropout, Eager: EagerDropout, FLOPs: elementwise, Saves: []Saved{{Of: SavedMask, DType: Bool, If: SaveInTraining}},
		Source: "native_dropout: result1, the bool mask (native_dropout_backward); dropout_ in place: the float noise it multiplies by"},
	{Type: "Einsum", shape: opEinsum, Eager: EagerEinsum, Autocast: AutocastLower, FLOPs: einsumFLOPs,
		Saves:  []Saved{savedInput(0).when(SaveIfPartnerGrad), savedInput(1).when(SaveIfPartnerGrad)},
		Source: "bmm: self when mat2 needs a gradient, mat2 when self does: each operand permuted and reshaped to bmm's matrices, a copy where no view has those dims (einsum's sumproduct_pair)"},
	{Type: "Equal", shape: opCompare, FLOPs: free},
	{Type: "Erf", shape: opSameShape, FLOPs: elementwise},
	{Type: "Exp", shape: opSameShape, FLOPs: elementwise},
	{Type: "Expand", shape: opExpand, Eager: EagerExpand, FLOPs: free,
		Source: "expand: nothing; a view with stride 0 along the expanded dims (F.normalize's expand_as of the norm), whose backward sums the gradient back to the input's sizes"},
	{Type: "Flatten", shape: opFlatten, Eager: EagerFlatten, FLOPs: free, Source: "view: nothing; a view of a contiguous tensor", GradView: true},
	{Type: "Gather", shape: opGather, Eager: EagerSelect, FLOPs: free,
		Source: "select.int: nothing; a view, whose backward is a gradient of the whole input (a Gather of one index); embedding: indices (embedding_dense_backward), a Gather of integer indices from a [num_embeddings, dim] parameter (schedule's embeddingCheck); other Gathers are shape arithmetic only"},
	{Type: "GatherElements", shape: opGatherElements, FLOPs: free},
	{Type: "Gelu", shape: opSameShape, Eager: EagerSavesInput, FLOPs: elementwise, Saves: []Saved{savedInput(0)},
		Source: "gelu: self (gelu_backward); the generic family fuses the exporter's erf pattern into it"},
	{Type: "Gemm", shape: opGemm, Eager: EagerLinear, Autocast: AutocastLower, FLOPs: gemmFLOPs,
		Saves:  []Saved{savedInput(0).when(SaveIfPartnerGrad), savedWeight(1).when(SaveIfPartnerGrad)},
		Source: "addmm: mat1 when mat2 (the weight's transposed view) needs a gradient, mat2 when mat1 does"},
	{Type: "GlobalAveragePool", shape: opGlobalPool, Eager: EagerMean, FLOPs: reduceFLOPs, Source: "mean.dim: nothing (the input's sizes), the mean over H and W"},
	{Type: "Greater", shape: opCompare, FLOPs: free},
	{Type: "GreaterOrEqual", shape: opCompare, FLOPs: free},
	{Type: "HardSigmoid", shape: opSameShape, Eager: EagerSavesInput, FLOPs: elementwise, Saves: []Saved{savedInput(0)},
		Source: "hardsigmoid: self (hardsigmoid_backward); hardsigmoid_ in place: a copy of self made before the op"},
	{Type: "HardSwish", shape: opSameShape, Eager: EagerSavesInput, FLOPs: elementwise, Saves: []Saved{savedInput(0)},
		Source: "hardswish: self (hardswish_backward); hardswish_ in place: a copy of self made before the op"},
	{Type: "Identity", shape: opSameShape, Eager: EagerView, FLOPs: free, Source: "nothing: the same tensor"},
	{Type: "InstanceNormalization", shape: opSameShape, Eager: EagerLayerNorm, Autocast: AutocastFP32, FLOPs: batchNormFLOPs, Saves: []Saved{savedInput(0), savedWeight(1), savedWeight(2), savedStats(Float32), savedStats(Float32)}, Source: "native_group_norm: input, weight, mean, rstd (native_group_norm_backward): torch.onnx exports GroupNorm as Reshape to [N, G, -1], InstanceNormalization, Reshape back, and the affine Mul and Add, which the kernel does in place of its output"},
	{Type: "IsInf", shape: opPredicate, FLOPs: free},
	{Type: "IsNaN", shape: opPredicate, FLOPs: free},
	{Type: "LayerNormalization", shape: opLayerNorm, Eager: EagerLayerNorm, Autocast: AutocastFP32, FLOPs: batchNormFLOPs,
		Saves:  []Saved{savedInput(0), savedWeight(1), savedWeight(2), savedStats(Float32), savedStats(Float32)},
		Source: "native_layer_norm: input, weight, bias, mean, rstd (native_layer_norm_backward)"},
	{Type: "LeakyRelu", shape: opSameShape, Eager: EagerSavesInput, FLOPs: elementwise, Saves: []Saved{savedInput(0)}, InPlaceSavesResult: true,
		Source: "leaky_relu: self (leaky_relu_backward(grad, self, negative_slope, false)); leaky_relu_ in place: result (leaky_relu_backward(grad, result, negative_slope, true)); Darknet's activation"},
	{Type: "Less", shape: opCompare, FLOPs: free},
	{Type: "LessOrEqual", shape: opCompare, FLOPs: free},
	{Type: "Log", shape: opSameShape, FLOPs: elementwise},
	{Type: "LogSoftmax", shape: opSameShape, Eager: EagerSoftmax, Autocast: AutocastFP32Dtype, FLOPs: softmaxFLOPs, Saves: []Saved{savedResult()},
		Source: "_log_softmax: result (_log_softmax_backward_data); log_softmax is in AT_FORALL_FP32_SET_OPT_DTYPE, as softmax"},
	{Type: "MatMul", shape: opMatMul, Eager: EagerEinsum, Autocast: AutocastLower, FLOPs: einsumFLOPs,
		Saves:  []Saved{savedInput(0).when(SaveIfPartnerGrad), savedInput(1).when(SaveIfPartnerGrad)},
		Source: "bmm of matmul of two activations: self when mat2 needs a gradient, mat2 when self does, each operand expanded and reshaped, a copy where no view has those dims (a linear's MatMul is a Gemm)"},
	{Type: "MaxPool", shape: opPool, Eager: EagerMaxPool, FLOPs: poolFLOPs, Saves: []Saved{savedInput(0), {Of: SavedIndices, DType: Int64}},
		Source: "max_pool2d_with_indices: self, result1 (the int64 indices)"},
	{Type: "Mish", shape: opSameShape, Eager: EagerSavesInput, FLOPs: elementwise, Saves: []Saved{savedInput(0)},
		Source: "mish: self (mish_backward; infinitely_differentiable_mish_backward only with create_graph); ONNX's Mish from opset 18, as timm's nn.Mish exports"},
	{Type: "Mod", shape: opBinary, FLOPs: free},
	{Type: "Mul", shape: opBinary, Eager: EagerMul, FLOPs: elementwise, Saves: []Saved{savedInput(1).when(SaveIfPartnerGrad), savedInput(0).when(SaveIfPartnerGrad)},
		Source: "mul.Tensor: other when self needs a gradient, self when other does; stochastic depth's noise, drawn from shapes alone, is a tensor of its own"},
	{Type: "Neg", shape: opSameShape, Eager: EagerUnary, FLOPs: elementwise, Source: "neg: nothing (rotary embeddings' rotate_half)"},
	{Type: "Not", shape: opSameShape, FLOPs: elementwise},
	{Type: "Or", shape: opCompare, FLOPs: free},
	{Type: "Pad", shape: opPad, Eager: EagerPad, FLOPs: free,
		Source: "constant_pad_nd: nothing (the pads); a new tensor, whose backward pads the gradient back"},
	{Type: "Pow", shape: opBinary, Eager: EagerSavesInput, Autocast: AutocastFP32, FLOPs: elementwise, Saves: []Saved{savedInput(0)}, GradTemps: 2,
		Source: "pow.Tensor_Scalar: self, exponent (RMSNorm's hidden_states.pow(2), GPT-2's gelu_new); autocast's fp32 list casts a float16 self to float32, and the cast is what it saves"},
	{Type: "RandomNormalLike", shape: opRandomLike, FLOPs: free},
	{Type: "RandomUniformLike", shape: opRandomLike, FLOPs: free},
	{Type: "Range", shape: opRange, FLOPs: free},
	{Type: "Reciprocal", shape: opSameShape, Eager: EagerSavesResult, Autocast: AutocastFP32, FLOPs: elementwise, Saves: []Saved{savedResult()}, Source: "reciprocal: result; in autocast's fp32 list"},
	{Type: "ReduceL2", shape: opReduceSum, Eager: EagerNorm, Autocast: AutocastFP32Dtype, FLOPs: reduceFLOPs, Saves: []Saved{savedInput(0), savedResult()},
		Source: "linalg_vector_norm: self, result (norm_backward), as F.normalize's x.norm(2, dim, keepdim=True) runs"},
	{Type: "ReduceMean", shape: opReduceSum, Eager: EagerMean, FLOPs: reduceFLOPs, Source: "mean.dim: nothing (the input's sizes), as shufflenet and mnasnet pool"},
	{Type: "ReduceSum", shape: opReduceSum, Eager: EagerSum, Autocast: AutocastFP32Dtype, FLOPs: reduceFLOPs, Source: "sum.dim_IntList: nothing (the input's sizes)"},
	{Type: "Relu", shape: opSameShape, Eager: EagerSavesResult, FLOPs: elementwise, Saves: []Saved{savedResult()},
		Source: "relu: result (threshold_backward); relu_ in place: the modified input, the same storage"},
	{Type: "Reshape", shape: opReshape, Eager: EagerReshape, FLOPs: free, Source: "view: nothing; a view of a contiguous tensor, else reshape's copy", GradView: true},
	{Type: "Resize", shape: opResize, Eager: EagerUpsample, Autocast: AutocastFP32, FLOPs: resizeFLOPs, Source: "upsample_nearest2d, upsample_bilinear2d, upsample_bicubic2d: nothing (the sizes)"},
	{Type: "ScaledDotProductAttention", shape: opAttention, Eager: EagerAttention, Autocast: AutocastLower, FLOPs: attentionFLOPs,
		Saves: []Saved{savedInput(0), savedInput(1), savedInput(2),
			{Of: SavedSeed, DType: Int64, If: SaveUnderAutocast}, {Of: SavedSeed, DType: Int64, If: SaveUnderAutocast},
			savedResult(), savedStats(Float32)},
		Source: "_scaled_dot_product_flash_attention (under autocast), _scaled_dot_product_efficient_attention (float32): query, key, value, output, logsumexp, and the flash kernel's philox seed and offset"},
	{Type: "ScatterND", shape: opSameShape, FLOPs: free},
	{Type: "Shape", shape: opShape, Eager: EagerMeta, FLOPs: free},
	{Type: "Sigmoid", shape: opSameShape, Eager: EagerSavesResult, FLOPs: elementwise, Saves: []Saved{savedResult()},
		Source: "sigmoid: result (sigmoid_backward)"},
	{Type: "Sin", shape: opSameShape, FLOPs: elementwise},
	{Type: "Slice", shape: opSlice, Eager: EagerSlice, FLOPs: free, Source: "slice.Tensor: nothing; a view"},
	{Type: "Softmax", shape: opSameShape, Eager: EagerSoftmax, Autocast: AutocastFP32Dtype, FLOPs: softmaxFLOPs, Saves: []Saved{savedResult()},
		Source: "_softmax: result (_softmax_backward_data)"},
	{Type: "Split", shape: opSplit, Eager: EagerSplit, FLOPs: free, Source: "split.Tensor: nothing; views"},
	{Type: "Sqrt", shape: opSameShape, Eager: EagerSavesResult, FLOPs: elementwise, Saves: []Saved{savedResult()},
		Source: "sqrt: result; the exporter writes rsqrt as Sqrt then Reciprocal"},
	{Type: "Squeeze", shape: opSqueeze, Eager: EagerView, FLOPs: free, Source: "squeeze.dim: nothing; a view", GradView: true},
	{Type: "Sub", shape: opBinary, Eager: EagerSub, FLOPs: elementwise, Source: "sub.Tensor: nothing"},
	{Type: "Tanh", shape: opSameShape, Eager: EagerSavesResult, FLOPs: elementwise, Saves: []Saved{savedResult()},
		Source: "tanh: result (tanh_backward), as MaxViT's classifier runs it"},
	{Type: "Tile", shape: opTile, FLOPs: free},
	{Type: "Transpose", shape: opTranspose, Eager: EagerTranspose, FLOPs: free, Source: "permute: nothing; a strided view", GradView: true},
	{Type: "Unsqueeze", shape: opUnsqueeze, Eager: EagerView, FLOPs: free, Source: "unsqueeze: nothing; a view", GradView: true},
	{Type: "Where", shape: opWhere, Eager: EagerWhere, FLOPs: elementwise, Saves: []Saved{savedInput(0)},
		Source: "where.self: condition (self's gradient where(condition, grad, 0), other's where(condition, 0, grad)); GPT-Neo's causal masking of its scores"},
	{Type: "Xor", shape: opCompare, FLOPs: free},
}
