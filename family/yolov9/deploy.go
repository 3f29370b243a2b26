package yolov9

import (
	"slices"
	"strings"

	"github.com/onnxmem/onnxmem/ir"
)

// An inference export (export.py, or torch.onnx.export of model.eval()) has
// no training graph: every batch norm is folded into its convolution, and
// export.py's model.fuse() adds each RepConvN's 1×1 branch into its 3×3
// one. What it keeps is the convolutions, in the order the forward runs
// them, with their weights' dims. So it names its training graph through
// them: the training graph of the same model has the same convolutions
// (weights' dims, strides and groups),
// once its RepConvN 1×1 branches are dropped (or kept, for an export that
// did not fuse), and the inference export's own additions dropped, the
// fixed convolution of each DFL decode.
//
// Worked example: yolov9-c-infer.onnx has 231 convolutions; without its
// two DFLs' ([1 16 1 1], "/model.38/dfl/conv/Conv" and ".../dfl2/...") it
// has 229, which are those of yolov9-c's training graph without the 24
// "…/conv1/conv2/conv/Conv" 1×1 branches of its RepConvNs, dims for dims.
// Its last, [80 256 1 1], is the class branch: 80 classes. A dynamo export
// of the same model that did not fuse keeps the 24 branches, and matches
// the unfused list.

// Deployment reads g as an inference export of the family: the number of
// classes its head predicts and a function that reports whether a training
// graph of the family is the same model, convolution for convolution. ok
// is false when g has no convolutions to read.
func (Family) Deployment(g *ir.Graph) (classes int64, same func(train *ir.Graph) bool, ok bool) {
	infer := convDims(g, func(n *ir.Node) bool { return isDFL(n) })
	if len(infer) == 0 || len(infer[len(infer)-1]) < 4 {
		return 0, nil, false
	}
	same = func(train *ir.Graph) bool {
		unfused := convDims(train, func(*ir.Node) bool { return false })
		fused := convDims(train, isRepBranch)
		eq := func(a, b [][]int64) bool { return slices.EqualFunc(a, b, slices.Equal[[]int64]) }
		return eq(infer, fused) || eq(infer, unfused)
	}
	return infer[len(infer)-1][0], same, true
}

// convDims returns the dims of the weight of each of g's convolutions in
// node order, then its strides and groups, but those that skip reports.
func convDims(g *ir.Graph, skip func(*ir.Node) bool) [][]int64 {
	var out [][]int64
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.OpType != "Conv" || len(n.Inputs) < 2 || skip(n) {
			continue
		}
		var dims []int64
		for _, d := range g.Values[n.Inputs[1]].Dims {
			if d.Param != "" || d.Value < 0 {
				dims = nil
				break
			}
			dims = append(dims, d.Value)
		}
		if dims != nil {
			dims = append(append(dims, n.IntsAttr("strides")...), n.IntAttr("group", 1))
		}
		out = append(out, dims)
	}
	return out
}

// isDFL reports whether n is a DFL decode's fixed convolution, by its name
// ("/model.38/dfl2/conv/Conv") or, in a dynamo export, its module scope
// ("model.38.dfl2.conv").
func isDFL(n *ir.Node) bool {
	if strings.Contains(n.Name, "/dfl") {
		return true
	}
	for _, s := range n.Scopes {
		if strings.Contains(s, ".dfl") {
			return true
		}
	}
	return false
}

// isRepBranch reports whether n is the 1×1 branch of a RepConvN
// ("…/cv1/conv2/conv/Conv"), which model.fuse() adds into the 3×3 branch
// (conv1).
func isRepBranch(n *ir.Node) bool { return strings.HasSuffix(n.Name, "/conv2/conv/Conv") }
