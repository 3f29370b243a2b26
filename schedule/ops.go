package schedule

import (
	"fmt"

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
	opSigmoid                     // sigmoid: saves its output
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
)

// viewOps are the ONNX ops that eager PyTorch runs as views of their input.
// Reshape is a view when its input is contiguous, which is the case for every
// activation onnxmem sees; Transpose is a view whose consumers see a
// non-contiguous tensor.
var viewOps = map[string]bool{
	"Slice": true, "Split": true, "Identity": true, "Reshape": true, "Unsqueeze": true,
	"Squeeze": true, "Flatten": true, "Transpose": true,
}

// classify decides the eager op of every node. data[v] reports whether value v
// holds device data (an activation or the input batch); param[v] whether it is
// a float initializer that the model owns.
func (b *builder) classify() error {
	g := b.g
	for i := range g.Nodes {
		n := &g.Nodes[i]
		hasData := false
		for _, v := range n.Inputs {
			if v != ir.NoValue && b.data[v] {
				hasData = true
			}
		}
		if !hasData || n.OpType == "Shape" || n.OpType == "Constant" || n.OpType == "ConstantOfShape" {
			b.kind[i] = opMeta
			continue
		}
		for _, v := range n.Outputs {
			if b.s.DTypes[v].Size() > 0 && isFloat(b.s.DTypes[v]) {
				b.data[v] = true
			}
		}
		k, err := b.opOf(n)
		if err != nil {
			return err
		}
		b.kind[i] = k
	}
	// A Sigmoid whose only reader is a Mul of its own input is SiLU: eager
	// PyTorch runs one kernel and never stores the sigmoid.
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.OpType != "Sigmoid" || b.kind[i] == opMeta {
			continue
		}
		s := n.Outputs[0]
		cons := g.Values[s].Consumers
		if len(cons) != 1 || g.Nodes[cons[0]].OpType != "Mul" {
			continue
		}
		m := &g.Nodes[cons[0]]
		x := n.Inputs[0]
		if (m.Inputs[0] == x && m.Inputs[1] == s) || (m.Inputs[1] == x && m.Inputs[0] == s) {
			b.kind[i] = opSkip
			b.kind[cons[0]] = opSiLU
			b.siluIn[cons[0]] = x
		}
	}
	return nil
}

func isFloat(d ir.DType) bool {
	return d == ir.Float32 || d == ir.Float16 || d == ir.BFloat16 || d == ir.Float64
}

// opOf maps one data-carrying node to its eager op.
func (b *builder) opOf(n *ir.Node) (opKind, error) {
	switch n.OpType {
	case "Conv":
		return opConv, nil
	case "BatchNormalization":
		if n.IntAttr("training_mode", 0) == 1 || len(n.Outputs) > 1 {
			return opBatchNorm, nil
		}
		return opBatchNormEval, nil
	case "Sigmoid":
		return opSigmoid, nil
	case "Mul":
		return opMul, nil
	case "Div":
		return opDiv, nil
	case "Add":
		return opAdd, nil
	case "Sub":
		return opSub, nil
	case "Concat":
		return opConcat, nil
	case "MaxPool":
		return opMaxPool, nil
	case "AveragePool":
		return opAvgPool, nil
	case "Resize":
		if a, ok := n.Attr("mode"); ok && a.Str != "nearest" {
			return 0, fmt.Errorf("schedule: node %s: Resize mode %q is not supported: only nearest upsampling has a memory rule; open an issue with the graph to add %s", n.Name, a.Str, a.Str)
		}
		return opResize, nil
	case "ReduceSum":
		return opReduceSum, nil
	case "Softmax":
		return opSoftmax, nil
	}
	if viewOps[n.OpType] {
		return opView, nil
	}
	return 0, fmt.Errorf("schedule: node %s: unsupported op %s on activations: onnxmem has no autograd memory rule for it; export the training graph unfused (opset 17), or open an issue naming %s so its saved tensors can be added", n.Name, n.OpType, n.OpType)
}
