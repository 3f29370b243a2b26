package onnxmem

import "github.com/onnxmem/onnxmem/schedule"

// CuDNNWorkspace is the workspace that cuDNN 9 takes through PyTorch's caching
// allocator for one convolution call with torch.backends.cudnn.benchmark off,
// as measured on an H200 by calibration/conv_workspace.py (see
// calibration/README.md, section 4). The algorithms that cuDNN's heuristics
// pick need, for a k×k conv with k > 1, about one input, one output and one
// weight of scratch (IN+OUT+W) in the forward, the backward-data and the
// backward-filter pass; a 1×1 conv needs none except in backward-filter,
// which takes eight weights; the stem conv on a 3-channel image needs none.
//
// The heuristics are not a formula: some shapes get smaller or larger
// workspaces (the measured backward-filter ones range from 1.6×IN to 10×IN).
// The rule is exact for most YOLOv9 convs and an upper bound for most of the
// rest. Workspaces are transient, so they matter only where the peak falls
// inside a conv call, as it does in the backward at small batch sizes.
func CuDNNWorkspace(c schedule.ConvCall) int64 {
	in := c.N * c.Cin * c.H * c.W * c.ElemSize
	out := c.N * c.Cout * c.OutH * c.OutW * c.ElemSize
	w := c.Cout * (c.Cin / max(c.Groups, 1)) * c.KH * c.KW * c.ElemSize
	if c.Cin <= 4 {
		return 0
	}
	if c.KH == 1 && c.KW == 1 {
		if c.Which == "bwd-filter" {
			return 8 * w
		}
		return 0
	}
	return in + out + w
}
