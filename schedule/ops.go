package schedule

import (
	"fmt"

	"github.com/onnxmem/onnxmem/ir"
)

// FLOPs returns the forward FLOPs of node n at shapes s (a multiply-add
// counts 2), from its op's row in ir's op table:
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
	r, ok := ir.OpOf(n)
	if !ok {
		return 0, fmt.Errorf("schedule: node %s: no FLOP rule for op %s", n.Name, n.OpType)
	}
	return r.FLOPs(n, s), nil
}

func isFloat(d ir.DType) bool { return d.IsFloat() }
