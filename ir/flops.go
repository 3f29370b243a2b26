// The FLOP counts of the op table's rows: a multiply-add counts 2, as the
// usual FLOP counters count it (fvcore, ptflops). Worked example, a 3×3
// Conv of 4 to 6 channels with a bias on [2 4 8 8], stride 1, padding 1:
// the output [2 6 8 8] has 768 elements, each 4·3·3 = 36 multiply-adds, so
// 2·768·36 = 55,296 FLOPs, and one add per output for the bias, 56,064.

package ir

func free(*Node, *Shapes) int64 { return 0 }

func elementwise(n *Node, s *Shapes) int64 { return s.Elems(n.Outputs[0]) }

// einsumFLOPs is 2 per multiply-add of the one bmm of an Einsum or a
// MatMul: the product of every label's size, summed ones included
// (2·batch·n·k·m for a MatMul).
func einsumFLOPs(n *Node, s *Shapes) int64 {
	eq, err := EinsumEquation(n, s)
	if err != nil {
		return 0
	}
	ops, _, err := EinsumLabels(eq, len(n.Inputs))
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

func convFLOPs(n *Node, s *Shapes) int64 {
	out := s.Elems(n.Outputs[0])
	macs := out
	for _, d := range s.Dims[n.Inputs[1]][1:] { // [Cout, Cin/groups, KH, KW]
		macs *= d
	}
	f := 2 * macs
	if len(n.Inputs) > 2 && n.Inputs[2] != NoValue {
		f += out
	}
	return f
}

func batchNormFLOPs(n *Node, s *Shapes) int64 {
	if BatchNormTrains(n) {
		return 4 * s.Elems(n.Outputs[0])
	}
	return 2 * s.Elems(n.Outputs[0])
}

func poolFLOPs(n *Node, s *Shapes) int64 {
	k := s.Elems(n.Outputs[0])
	for _, d := range n.IntsAttr("kernel_shape") {
		k *= d
	}
	return k
}

// gemmFLOPs counts Gemm: 2·M·N·K, plus one add per output for C.
func gemmFLOPs(n *Node, s *Shapes) int64 {
	out := s.Elems(n.Outputs[0])
	k := int64(1)
	if d := s.Dims[n.Inputs[0]]; len(d) >= 2 {
		k = d[len(d)-1]
		if len(d) == 2 && n.IntAttr("transA", 0) != 0 {
			k = d[0]
		}
	}
	f := 2 * out * k
	if len(n.Inputs) > 2 && n.Inputs[2] != NoValue {
		f += out
	}
	return f
}

func reduceFLOPs(n *Node, s *Shapes) int64 { return s.Elems(n.Inputs[0]) }

func softmaxFLOPs(n *Node, s *Shapes) int64 { return 5 * s.Elems(n.Outputs[0]) }

func resizeFLOPs(n *Node, s *Shapes) int64 {
	if a, ok := n.Attr("mode"); ok && a.Str != "nearest" {
		return s.Elems(n.Outputs[0])
	}
	return 0
}

// attentionFLOPs counts q @ kᵀ and its product with v: 4·B·H·L·S·D, and
// the softmax's 5 per score.
func attentionFLOPs(n *Node, s *Shapes) int64 {
	q, k := s.Dims[n.Inputs[0]], s.Dims[n.Inputs[1]]
	if len(q) < 2 || len(k) < 2 {
		return 0
	}
	scores := s.Elems(n.Inputs[0]) / q[len(q)-1] * k[len(k)-2]
	return 4*scores*q[len(q)-1] + 5*scores
}

// BatchNormTrains reports whether a BatchNormalization node runs in
// training mode, on the batch's statistics.
func BatchNormTrains(n *Node) bool {
	return n.IntAttr("training_mode", 0) == 1 || len(n.Outputs) > 1
}
