package onnxmem

import "github.com/onnxmem/onnxmem/schedule"

// CuDNNWorkspace is the workspace that cuDNN 9 takes through PyTorch's caching
// allocator for one convolution call with torch.backends.cudnn.benchmark off.
// The rules below are the algorithms that cuDNN 9.19's heuristics pick on an
// H200, as calibration/conv_workspace.py measured them for 182 YOLOv9-like
// convolutions (calibration/README.md, section 4). IN, OUT and W are the
// input, output and weight bytes in the compute type:
//
//   - 1×1 convs need no workspace in the forward and the backward-data pass;
//     the backward-filter pass takes 8 weights in float32, and in float16 two
//     weights per image of the batch, at most 16.
//   - The stem, a conv on the 3-channel image, needs none in float32; in
//     float16 its backward-filter pass takes 1.25 × OUT.
//   - k×k convs (k > 1) in float16 take IN + OUT + W in the forward; in
//     float32 the forward takes IN + W, except a stride-1 conv on a large
//     problem (128 or more input channels, or 51200 or more output pixels
//     N·H·W), which takes IN + OUT + W.
//   - The backward-data pass of a k×k conv takes IN + OUT + W.
//   - The backward-filter pass of a float32 k×k conv with at most 64 input
//     channels and at most 25600 output pixels takes 4.5 × OUT (a split-K
//     algorithm that keeps partial weights per block of pixels); other k×k
//     convs take IN + OUT + W.
//
// The heuristics are not a formula: the measured sizes scatter around these
// rules, the backward-filter ones most (from 1.6 × IN to 10 × IN for small
// maps). Workspaces are transient, so they matter only where
// the peak falls inside a conv call, as it does in the backward at small
// batch sizes. Another GPU or cuDNN version may pick other algorithms.
func CuDNNWorkspace(c schedule.ConvCall) int64 {
	in := c.N * c.Cin * c.H * c.W * c.ElemSize
	out := c.N * c.Cout * c.OutH * c.OutW * c.ElemSize
	w := c.Cout * (c.Cin / max(c.Groups, 1)) * c.KH * c.KW * c.ElemSize
	half := c.ElemSize == 2
	pixels := c.N * c.OutH * c.OutW
	switch {
	case c.Cin <= 4:
		if half && c.Which == "bwd-filter" {
			return out + out/4
		}
		return 0
	case c.KH == 1 && c.KW == 1:
		if c.Which != "bwd-filter" {
			return 0
		}
		if half {
			return min(2*c.N, 16) * w
		}
		return 8 * w
	}
	switch c.Which {
	case "fwd":
		if half || (c.StrideH == 1 && (c.Cin >= 128 || pixels >= 51200)) {
			return in + out + w
		}
		return in + w
	case "bwd-filter":
		if !half && c.Cin <= 64 && pixels <= 25600 {
			return out*4 + out/2
		}
	}
	return in + out + w
}
