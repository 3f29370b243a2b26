package ir

import (
	"fmt"
	"slices"
	"strings"
)

// Einsum's equation, as ONNX and torch.einsum write it.
//
// Worked example, MaxViT's attention scores: "B G H I D, B G H J D -> B G
// H I J" on q of dims [2, 64, 2, 49, 32] and k of the same dims labels
// them B=2, G=64, H=2, I=49, D=32 and J=49; the output is [2, 64, 2, 49,
// 49], and D, which the output lacks, is summed. Without "->" the output
// is the labels that appear once, in the order of their letters, upper
// case first ("ij,jk" is "ik"), as numpy and torch.einsum order them.

// EinsumLabels parses an Einsum equation for n operands: the labels of each
// operand's dims and of the output's, one letter a dim. Spaces are
// ignored. An ellipsis ("...") is an error: onnxmem does not follow the
// dims it stands for.
func EinsumLabels(equation string, n int) (operands [][]byte, out []byte, err error) {
	eq := strings.ReplaceAll(equation, " ", "")
	if strings.Contains(eq, ".") {
		return nil, nil, fmt.Errorf("equation %q: an ellipsis (...) is not supported; write a letter for each dim", equation)
	}
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	if len(terms) != n {
		return nil, nil, fmt.Errorf("equation %q: %d operands for %d inputs", equation, len(terms), n)
	}
	var count [128]int
	for _, t := range terms {
		for i := 0; i < len(t); i++ {
			if !isLabel(t[i]) {
				return nil, nil, fmt.Errorf("equation %q: %q is not a label (a letter)", equation, t[i])
			}
			count[t[i]]++
		}
		operands = append(operands, []byte(t))
	}
	if !explicit {
		for l := range count {
			if count[l] == 1 {
				out = append(out, byte(l))
			}
		}
		return operands, out, nil
	}
	for i := 0; i < len(rhs); i++ {
		l := rhs[i]
		switch {
		case !isLabel(l):
			return nil, nil, fmt.Errorf("equation %q: %q is not a label (a letter)", equation, l)
		case count[l] == 0:
			return nil, nil, fmt.Errorf("equation %q: output label %c is no operand's", equation, l)
		case slices.Contains(out, l):
			return nil, nil, fmt.Errorf("equation %q: output label %c appears twice", equation, l)
		}
		out = append(out, l)
	}
	return operands, out, nil
}

// EinsumEquation returns the einsum equation that node n runs: an Einsum's
// own, or a MatMul's as torch.matmul runs two operands of three or more
// dims (expand to the batch dims, reshape, bmm): "ABxy,AByz->ABxz" for
// two of four dims. A MatMul of vectors or matrices, or whose batch dims
// differ (an expand copies the smaller one), is an error.
func EinsumEquation(n *Node, s *Shapes) (string, error) {
	if n.OpType != "MatMul" {
		a, _ := n.Attr("equation")
		return a.Str, nil
	}
	da, db := s.Dims[n.Inputs[0]], s.Dims[n.Inputs[1]]
	r := len(da)
	if r < 3 || len(db) != r || !slices.Equal(da[:r-2], db[:r-2]) || r-2 > 20 {
		return "", fmt.Errorf("MatMul of dims %v and %v: onnxmem simulates a batched matmul of operands with the same batch dims (a matrix product of two activations of 3 dims or more)", da, db)
	}
	batch := "ABCDEFGHIJKLMNOPQRSTUVW"[:r-2]
	return batch + "xy," + batch + "yz->" + batch + "xz", nil
}

func isLabel(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// inferEinsum infers Einsum's output: each output label's size, the largest
// of its operands' (a dim of size 1 broadcasts), in the input's type.
func inferEinsum(c *inferer) {
	a, _ := c.n.Attr("equation")
	ops, out, err := EinsumLabels(a.Str, len(c.n.Inputs))
	if err != nil {
		c.fail("%v", err)
		return
	}
	var size [128]int64
	var seen [128]bool
	for k, labels := range ops {
		d := c.dims(k)
		if len(d) != len(labels) {
			c.fail("operand %d has %d dims and %d labels in %q", k, len(d), len(labels), a.Str)
			return
		}
		for j, l := range labels {
			switch s := size[l]; {
			case !seen[l] || s == 1:
				size[l], seen[l] = d[j], true
			case d[j] != 1 && d[j] != s:
				c.fail("label %c is %d in one operand and %d in another", l, s, d[j])
				return
			}
		}
	}
	d := c.alloc(len(out))
	for i, l := range out {
		d[i] = size[l]
	}
	c.set(0, c.dtype(0), d)
}
