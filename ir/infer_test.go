// Tests of the shape rules, constant folding, bindings and Infer errors.

package ir

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
)

// opCase is one shape-rule test: a tiny model, a binding, and the dims (and
// optionally folded contents) expected of some values.
type opCase struct {
	name  string
	build func() *model
	bind  Binding
	dims  map[string][]int64
	data  map[string][]int64
	dtype map[string]DType
}

func TestOpRules(t *testing.T) {
	image := func(opset int64) *model {
		return newModel(opset).input("x", Float32, "batch", 3, "height", "width")
	}
	b := Binding{Batch: 2, Height: 32, Width: 48}
	cases := []opCase{
		{
			name: "conv strides pads",
			build: func() *model {
				return image(17).init("w", Float32, []int64{8, 3, 3, 3}).
					node("Conv", "c", "x,w", "y", onnxbuild.IntsAttr("kernel_shape", 3, 3), onnxbuild.IntsAttr("strides", 2, 2), onnxbuild.IntsAttr("pads", 1, 1, 1, 1))
			},
			bind: b, dims: map[string][]int64{"y": {2, 8, 16, 24}},
		},
		{
			name: "conv dilations bias no attrs",
			build: func() *model {
				return image(17).init("w", Float32, []int64{4, 3, 3, 3}).init("b", Float32, []int64{4}).
					node("Conv", "c", "x,w,b", "y", onnxbuild.IntsAttr("dilations", 2, 2))
			},
			bind: b, dims: map[string][]int64{"y": {2, 4, 28, 44}},
		},
		{
			name: "conv depthwise same_upper",
			build: func() *model {
				return newModel(12).input("x", Float32, 1, 8, 33, 33).init("w", Float32, []int64{8, 1, 3, 3}).
					node("Conv", "c", "x,w", "y", onnxbuild.IntAttr("group", 8), onnxbuild.IntsAttr("strides", 2, 2), onnxbuild.StringAttr("auto_pad", "SAME_UPPER"))
			},
			dims: map[string][]int64{"y": {1, 8, 17, 17}},
		},
		{
			name: "conv valid",
			build: func() *model {
				return newModel(12).input("x", Float32, 1, 1, 10, 9).init("w", Float32, []int64{2, 1, 3, 3}).
					node("Conv", "c", "x,w", "y", onnxbuild.StringAttr("auto_pad", "VALID"), onnxbuild.IntsAttr("strides", 2, 2))
			},
			dims: map[string][]int64{"y": {1, 2, 4, 4}},
		},
		{
			name: "maxpool floor and ceil, SPPF-style same",
			build: func() *model {
				return newModel(12).input("x", Float32, 1, 4, 5, 5).
					node("MaxPool", "floor", "x", "f", onnxbuild.IntsAttr("kernel_shape", 2, 2), onnxbuild.IntsAttr("strides", 2, 2)).
					node("MaxPool", "ceil", "x", "c", onnxbuild.IntsAttr("kernel_shape", 2, 2), onnxbuild.IntsAttr("strides", 2, 2), onnxbuild.IntAttr("ceil_mode", 1)).
					node("MaxPool", "same", "x", "s,idx", onnxbuild.IntsAttr("kernel_shape", 5, 5), onnxbuild.IntsAttr("pads", 2, 2, 2, 2))
			},
			dims:  map[string][]int64{"f": {1, 4, 2, 2}, "c": {1, 4, 3, 3}, "s": {1, 4, 5, 5}, "idx": {1, 4, 5, 5}},
			dtype: map[string]DType{"idx": Int64, "s": Float32},
		},
		{
			name: "avgpool ceil drops a window that starts in the tail pad",
			build: func() *model {
				return newModel(12).input("x", Float32, 1, 1, 5, 6).
					node("AveragePool", "p", "x", "y", onnxbuild.IntsAttr("kernel_shape", 2, 3), onnxbuild.IntsAttr("strides", 2, 2),
						onnxbuild.IntsAttr("pads", 1, 1, 1, 1), onnxbuild.IntAttr("ceil_mode", 1))
			},
			// H: ceil((5+2-2)/2)+1 = 4, but window 3 would start at 6 >= 5+1: 3.
			// W: ceil((6+2-3)/2)+1 = 4, window 3 starts at 6 < 6+1: 4.
			dims: map[string][]int64{"y": {1, 1, 3, 4}},
		},
		{
			name: "classifier head: global average pool, flatten, gemm, dropout",
			build: func() *model {
				return newModel(17).input("x", Float32, "batch", 512, 7, 7).
					init("w", Float32, []int64{1000, 512}).init("b", Float32, []int64{1000}).
					init("wa", Float32, []int64{512, 10}).
					constant("ratio", Float32, []int64{}, 0).
					node("GlobalAveragePool", "gap", "x", "p").
					node("Flatten", "flat", "p", "f", onnxbuild.IntAttr("axis", 1)).
					node("Gemm", "fc", "f,w,b", "y", onnxbuild.IntAttr("transB", 1)).
					node("Gemm", "plain", "f,wa", "z").
					node("Dropout", "drop", "y,ratio", "d,mask").
					node("Flatten", "all", "x", "x0", onnxbuild.IntAttr("axis", 0)).
					node("Flatten", "last", "x", "xl", onnxbuild.IntAttr("axis", -1))
			},
			bind: Binding{Batch: 4},
			dims: map[string][]int64{"p": {4, 512, 1, 1}, "f": {4, 512}, "y": {4, 1000}, "z": {4, 10},
				"d": {4, 1000}, "mask": {4, 1000}, "x0": {1, 4 * 512 * 49}, "xl": {4 * 512 * 7, 7}},
			dtype: map[string]DType{"p": Float32, "y": Float32, "mask": Bool},
		},
		{
			name: "batchnorm training outputs",
			build: func() *model {
				return image(17).init("s", Float32, []int64{3}).init("bias", Float32, []int64{3}).
					init("m", Float32, []int64{3}).init("v", Float32, []int64{3}).
					node("BatchNormalization", "bn", "x,s,bias,m,v", "y,rm,rv", onnxbuild.IntAttr("training_mode", 1))
			},
			bind: b, dims: map[string][]int64{"y": {2, 3, 32, 48}, "rm": {3}, "rv": {3}},
		},
		{
			name: "shape gather cast arithmetic concat fold",
			build: func() *model {
				return width(image(17)).
					constant("two", Float32, []int64{}, 2).
					node("Mul", "mul", "wf,two", "w2f").
					node("Cast", "back", "w2f", "w2", onnxbuild.IntAttr("to", int64(Int64))).
					constant("one", Int64, []int64{1}, 1).
					node("Add", "add", "w2,one", "a").
					node("Sub", "sub", "a,one", "d").
					node("Div", "div", "d,one", "q").
					constant("axis0", Int64, []int64{1}, 0).
					node("Unsqueeze", "u", "w,axis0", "wu").
					node("Concat", "cat", "wu,q,one", "cat", onnxbuild.IntAttr("axis", 0))
			},
			bind:  b,
			dims:  map[string][]int64{"s": {4}, "w": {}, "wf": {}, "a": {1}, "cat": {3}},
			data:  map[string][]int64{"s": {2, 3, 32, 48}, "w": {48}, "w2f": {96}, "a": {97}, "q": {96}, "cat": {48, 96, 1}},
			dtype: map[string]DType{"wf": Float32, "w2": Int64, "s": Int64},
		},
		{
			name: "worked example of the file comment",
			build: func() *model {
				return newModel(17).input("images", Float32, 1, 3, 640, 640).
					init("W", Float32, []int64{144, 3, 8, 8}).
					node("Conv", "conv", "images,W", "x", onnxbuild.IntsAttr("strides", 8, 8)).
					node("Shape", "shape", "x", "s").
					constant("zero", Int64, []int64{}, 0).
					node("Gather", "gather", "s,zero", "b").
					constant("axes", Int64, []int64{1}, 0).
					node("Unsqueeze", "unsq", "b,axes", "u").
					constant("c144", Int64, []int64{1}, 144).
					constant("rest", Int64, []int64{1}, -1).
					node("Concat", "cat", "u,c144,rest", "t", onnxbuild.IntAttr("axis", 0)).
					node("Reshape", "reshape", "x,t", "y")
			},
			bind: Binding{Batch: 2, Height: 512, Width: 512},
			dims: map[string][]int64{"images": {2, 3, 512, 512}, "x": {2, 144, 64, 64}, "y": {2, 144, 4096}},
			data: map[string][]int64{"s": {2, 144, 64, 64}, "b": {2}, "u": {2}, "t": {2, 144, -1}},
		},
		{
			name: "split attribute opset 12",
			build: func() *model {
				return image(12).node("Split", "s", "x", "a,b", onnxbuild.IntAttr("axis", 1), onnxbuild.IntsAttr("split", 1, 2))
			},
			bind: b, dims: map[string][]int64{"a": {2, 1, 32, 48}, "b": {2, 2, 32, 48}},
		},
		{
			name: "split input opset 13 and even split",
			build: func() *model {
				return image(17).constant("sizes", Int64, []int64{2}, 12, 36).
					node("Split", "s", "x,sizes", "a,b", onnxbuild.IntAttr("axis", -1)).
					node("Split", "even", "x", "c,d", onnxbuild.IntAttr("axis", 2))
			},
			bind: b, dims: map[string][]int64{"a": {2, 3, 32, 12}, "b": {2, 3, 32, 36}, "c": {2, 3, 16, 48}, "d": {2, 3, 16, 48}},
		},
		{
			name: "split num_outputs opset 18 and folding",
			build: func() *model {
				return newModel(18).input("x", Float32, 10).
					node("Split", "s", "x", "a,b,c", onnxbuild.IntAttr("num_outputs", 3)).
					constant("k", Float32, []int64{3}, 8, 16, 32).
					node("Split", "ks", "k", "k0,k1,k2", onnxbuild.IntsAttr("split", 1, 1, 1))
			},
			dims: map[string][]int64{"a": {4}, "b": {4}, "c": {2}, "k2": {1}},
			data: map[string][]int64{"k0": {8}, "k2": {32}},
		},
		{
			name: "slice inputs, negative and huge bounds, steps",
			build: func() *model {
				return image(17).
					constant("st", Int64, []int64{2}, 1, -10).
					constant("en", Int64, []int64{2}, math.MaxInt64, -1).
					constant("ax", Int64, []int64{2}, 1, 3).
					constant("sp", Int64, []int64{2}, 1, 3).
					node("Slice", "s", "x,st,en,ax,sp", "y").
					constant("rst", Int64, []int64{1}, -1).
					constant("ren", Int64, []int64{1}, math.MinInt64).
					constant("rax", Int64, []int64{1}, 2).
					constant("rsp", Int64, []int64{1}, -2).
					node("Slice", "rev", "x,rst,ren,rax,rsp", "r").
					node("Shape", "shape", "x", "sh").
					constant("zero", Int64, []int64{1}, 0).
					constant("two", Int64, []int64{1}, 2).
					node("Slice", "head", "sh,zero,two", "hw")
			},
			bind: b,
			// Axis 3: from 38 to 47 by 3 is 38, 41, 44: 3 elements.
			dims: map[string][]int64{"y": {2, 2, 32, 3}, "r": {2, 3, 16, 48}, "hw": {2}},
			data: map[string][]int64{"hw": {2, 3}},
		},
		{
			name: "slice attributes opset 9",
			build: func() *model {
				return newModel(9).input("x", Float32, 4, 10).
					node("Slice", "s", "x", "y", onnxbuild.IntsAttr("starts", 2), onnxbuild.IntsAttr("ends", 100), onnxbuild.IntsAttr("axes", 1))
			},
			dims: map[string][]int64{"y": {4, 8}},
		},
		{
			name: "squeeze unsqueeze attributes opset 12",
			build: func() *model {
				return newModel(12).input("x", Float32, 1, 5, 1).
					node("Squeeze", "sq", "x", "a", onnxbuild.IntsAttr("axes", 0)).
					node("Squeeze", "all", "x", "b").
					node("Unsqueeze", "u", "b", "c", onnxbuild.IntsAttr("axes", -1, 0))
			},
			dims: map[string][]int64{"a": {5, 1}, "b": {5}, "c": {1, 5, 1}},
		},
		{
			name: "squeeze unsqueeze inputs opset 13",
			build: func() *model {
				return newModel(13).input("x", Float32, 1, 5, 1).
					constant("ax", Int64, []int64{1}, 2).
					node("Squeeze", "sq", "x,ax", "a").
					constant("ax2", Int64, []int64{2}, 0, 3).
					node("Unsqueeze", "u", "a,ax2", "c")
			},
			dims: map[string][]int64{"a": {1, 5}, "c": {1, 1, 5, 1}},
		},
		{
			name: "reducesum attribute and input forms",
			build: func() *model {
				return newModel(17).input("x", Float32, 4, 2, 3).
					constant("ax", Int64, []int64{1}, 0).
					node("ReduceSum", "drop", "x,ax", "a", onnxbuild.IntAttr("keepdims", 0)).
					node("ReduceSum", "keep", "x,ax", "b").
					node("ReduceSum", "all", "x", "c", onnxbuild.IntAttr("keepdims", 0)).
					node("ReduceSum", "noop", "x", "d", onnxbuild.IntAttr("noop_with_empty_axes", 1))
			},
			dims: map[string][]int64{"a": {2, 3}, "b": {1, 2, 3}, "c": {}, "d": {4, 2, 3}},
		},
		{
			name: "tile, cumsum, sin and cos: a Fourier position encoding's x.repeat(B, 1, 1, 1) and cumsum",
			build: func() *model {
				return newModel(17).input("x", Float32, 1, 32, 14, 14).
					constant("r", Int64, []int64{4}, 8, 1, 1, 2).
					node("Tile", "t", "x,r", "a").
					constant("ax", Int64, nil, 1).
					node("CumSum", "c", "x,ax", "b").
					node("Sin", "s", "b", "c").
					node("Cos", "k", "b", "d")
			},
			dims: map[string][]int64{"a": {8, 32, 14, 28}, "b": {1, 32, 14, 14}, "c": {1, 32, 14, 14}, "d": {1, 32, 14, 14}},
		},
		{
			name: "reducemean over H and W (opset 17 attribute), as x.mean([2, 3])",
			build: func() *model {
				return newModel(17).input("x", Float32, 4, 8, 7, 7).
					node("ReduceMean", "m", "x", "a", onnxbuild.IntsAttr("axes", 2, 3), onnxbuild.IntAttr("keepdims", 0))
			},
			dims: map[string][]int64{"a": {4, 8}},
		},
		{
			name: "reducel2 over the last axis, keepdims (F.normalize's norm)",
			build: func() *model {
				return newModel(17).input("x", Float32, 4, 3, 64, 32).
					node("ReduceL2", "n", "x", "a", onnxbuild.IntsAttr("axes", -1), onnxbuild.IntAttr("keepdims", 1))
			},
			dims: map[string][]int64{"a": {4, 3, 64, 1}},
		},
		{
			name: "reducesum opset 12",
			build: func() *model {
				return newModel(12).input("x", Float32, 4, 2, 3).
					node("ReduceSum", "r", "x", "a", onnxbuild.IntsAttr("axes", -1), onnxbuild.IntAttr("keepdims", 1))
			},
			dims: map[string][]int64{"a": {4, 2, 1}},
		},
		{
			name: "reshape zero and minus one, allowzero",
			build: func() *model {
				return image(17).
					constant("s", Int64, []int64{3}, 0, 0, -1).
					node("Reshape", "r", "x,s", "y").
					constant("z", Int64, []int64{2}, 0, 5).
					constant("empty", Float32, []int64{0, 7}).
					node("Reshape", "az", "empty,z", "e", onnxbuild.IntAttr("allowzero", 1))
			},
			bind: b, dims: map[string][]int64{"y": {2, 3, 1536}, "e": {0, 5}},
		},
		{
			name: "resize scales opset 12 and sizes opset 17",
			build: func() *model {
				return image(12).
					constant("roi", Float32, []int64{0}).
					constant("scales", Float32, []int64{4}, 1, 1, 2, 0.5).
					node("Resize", "scale", "x,roi,scales", "up").
					constant("empty", Float32, []int64{0}).
					constant("sizes", Int64, []int64{4}, 2, 3, 7, 9).
					node("Resize", "size", "x,roi,empty,sizes", "fixed")
			},
			bind: b, dims: map[string][]int64{"up": {2, 3, 64, 24}, "fixed": {2, 3, 7, 9}},
		},
		{
			name: "resize folded scales and sizes with empty-string inputs",
			build: func() *model {
				return image(17).
					constant("ones", Float32, []int64{2}, 1, 1).
					constant("twos", Float32, []int64{2}, 2, 2).
					node("Concat", "cat", "ones,twos", "scales", onnxbuild.IntAttr("axis", 0)).
					node("Resize", "up", "x,,scales", "up").
					node("Shape", "shape", "up", "s").
					constant("two", Int64, []int64{1}, 2).
					constant("four", Int64, []int64{1}, 4).
					constant("zero", Int64, []int64{1}, 0).
					node("Slice", "hw", "s,two,four", "hw").
					node("Shape", "xshape", "x", "xs").
					node("Slice", "nc", "xs,zero,two", "nc").
					node("Concat", "sizes", "nc,hw", "sizes", onnxbuild.IntAttr("axis", 0)).
					node("Resize", "to", "x,,,sizes", "to")
			},
			bind: b, dims: map[string][]int64{"up": {2, 3, 64, 96}, "to": {2, 3, 64, 96}},
		},
		{
			name: "expand range constantofshape transpose",
			build: func() *model {
				return width(image(12)).
					constant("zero", Float32, []int64{}, 0).
					constant("one", Float32, []int64{}, 1).
					node("Range", "range", "zero,wf,one", "r").
					constant("three", Int64, []int64{}, 3).
					node("Range", "small", "three,w,w", "sr").
					constant("shape2", Int64, []int64{2}, 5, 1).
					node("Expand", "expand", "r,shape2", "e").
					node("ConstantOfShape", "cos", "shape2", "c", onnxbuild.TensorAttr("value", tensorProto("", Int64, []int64{1}, 7))).
					node("Transpose", "t", "x", "tx", onnxbuild.IntsAttr("perm", 0, 2, 3, 1)).
					node("Transpose", "rev", "e", "te")
			},
			bind:  b,
			dims:  map[string][]int64{"r": {48}, "sr": {1}, "e": {5, 48}, "c": {5, 1}, "tx": {2, 32, 48, 3}, "te": {48, 5}},
			data:  map[string][]int64{"c": {7, 7, 7, 7, 7}, "sr": {3}},
			dtype: map[string]DType{"r": Float32, "c": Int64},
		},
		{
			name: "shape start end opset 15 and constant attribute forms",
			build: func() *model {
				return image(15).
					node("Shape", "shape", "x", "s", onnxbuild.IntAttr("start", 1), onnxbuild.IntAttr("end", -1)).
					node("Constant", "ints", "", "ci", onnxbuild.IntsAttr("value_ints", 4, 5)).
					node("Constant", "f", "", "cf", onnxbuild.FloatAttr("value_float", 0.5))
			},
			bind: b,
			dims: map[string][]int64{"s": {2}, "ci": {2}, "cf": {}},
			data: map[string][]int64{"s": {3, 32}, "ci": {4, 5}},
		},
		{
			name: "fixed image input rebound, other inputs by name",
			build: func() *model {
				return newModel(12).input("images", Float32, 1, 3, 640, 640).input("mask", Float32, "batch", 7).
					node("Sigmoid", "s", "images", "y").node("Identity", "i", "mask", "m")
			},
			bind: Binding{Batch: 4, Height: 512, Width: 256},
			dims: map[string][]int64{"y": {4, 3, 512, 256}, "m": {4, 7}},
		},
		{
			name: "einsum explicit, implicit, broadcast",
			build: func() *model {
				return newModel(17).input("q", Float32, "batch", 49, 2, 64, 32).input("k", Float32, "batch", 49, 2, 64, 32).
					input("a", Float32, 3, 4).input("c", Float32, 4, 5).input("u", Float32, 1, 3, 4).input("w", Float32, 6, 4, 5).
					node("Einsum", "e", "q,k", "s", onnxbuild.StringAttr("equation", "B G H I D, B G H J D -> B G H I J")).
					node("Einsum", "i", "a,c", "ik", onnxbuild.StringAttr("equation", "ij,jk")).
					node("Einsum", "t", "a", "at", onnxbuild.StringAttr("equation", "ij->ji")).
					node("Einsum", "b", "u,w", "bik", onnxbuild.StringAttr("equation", "bij,bjk->bik"))
			},
			bind: Binding{Batch: 2},
			dims: map[string][]int64{"s": {2, 49, 2, 64, 64}, "ik": {3, 5}, "at": {4, 3}, "bik": {6, 3, 5}},
		},
		{
			name: "matmul batched, broadcast, vectors",
			build: func() *model {
				return newModel(17).input("q", Float32, "batch", 3, 49, 32).input("k", Float32, "batch", 3, 32, 49).
					input("w", Float32, 32, 10).input("v", Float32, 32).input("u", Float32, 32).
					node("MatMul", "s", "q,k", "s").
					node("MatMul", "b", "q,w", "qw").
					node("MatMul", "r", "q,v", "qv").
					node("MatMul", "l", "u,k", "uk")
			},
			bind: Binding{Batch: 2},
			dims: map[string][]int64{"s": {2, 3, 49, 49}, "qw": {2, 3, 49, 10}, "qv": {2, 3, 49}, "uk": {2, 3, 49}},
		},
		{
			name: "pad all axes, some axes, zero pads",
			build: func() *model {
				return newModel(18).input("x", Float32, "batch", 56, 56, 96).
					init("p", Int64, []int64{8}, 0, 0, 0, 0, 0, 1, 3, 0).
					init("p2", Int64, []int64{4}, 0, 2, 0, 2).init("ax", Int64, []int64{2}, 1, 2).
					node("Pad", "a", "x,p", "y").
					node("Pad", "s", "x,p2,,ax", "z")
			},
			bind: Binding{Batch: 2},
			dims: map[string][]int64{"y": {2, 57, 59, 96}, "z": {2, 56, 60, 96}},
		},
		{
			// The export of F.pad reverses its pads as a [-1, 2] view:
			// Slice of step -1 along axis 0, then Transpose.
			name: "slice and transpose of rank 2 fold",
			build: func() *model {
				return newModel(17).init("p", Int64, []int64{3, 2}, 1, 2, 3, 4, 5, 6).
					init("st", Int64, []int64{1}, -1).init("en", Int64, []int64{1}, -9223372036854775807).
					init("ax", Int64, []int64{1}, 0).init("sp", Int64, []int64{1}, -1).
					node("Slice", "s", "p,st,en,ax,sp", "r").
					node("Transpose", "t", "r", "rt", onnxbuild.IntsAttr("perm", 1, 0))
			},
			dims: map[string][]int64{"r": {3, 2}, "rt": {2, 3}},
			data: map[string][]int64{"r": {5, 6, 3, 4, 1, 2}, "rt": {5, 3, 1, 6, 4, 2}},
		},
		{
			name: "zero binding keeps fixed dims",
			build: func() *model {
				return newModel(12).input("images", Float32, 1, 3, 640, 640).node("Sigmoid", "s", "images", "y")
			},
			dims: map[string][]int64{"y": {1, 3, 640, 640}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.build().load(t)
			s, err := g.Infer(tc.bind)
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range tc.dims {
				if got := s.Dims[id(t, g, name)]; !slices.Equal(got, want) || got == nil {
					t.Errorf("%s: dims %v, want %v", name, got, want)
				}
			}
			for name, want := range tc.data {
				if got := s.Data[id(t, g, name)]; !slices.Equal(got, want) || got == nil {
					t.Errorf("%s: data %v, want %v", name, got, want)
				}
			}
			for name, want := range tc.dtype {
				if got := s.DTypes[id(t, g, name)]; got != want {
					t.Errorf("%s: dtype %v, want %v", name, got, want)
				}
			}
			for i := range g.Values {
				if s.Dims[i] == nil {
					t.Errorf("value %q has no dims", g.Values[i].Name)
				}
			}
		})
	}
}

// width adds the shape arithmetic that takes the width of image input x: s is
// its shape, w its width and wf the width as float32.
func width(m *model) *model {
	return m.node("Shape", "shape", "x", "s").
		constant("i", Int64, []int64{}, 3).
		node("Gather", "g", "s,i", "w").
		node("Cast", "cast", "w", "wf", onnxbuild.IntAttr("to", int64(Float32)))
}

// wantError fails the test unless err is an error whose message contains
// every one of want.
func wantError(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

func TestInferErrors(t *testing.T) {
	cases := []struct {
		name  string
		build func() *model
		bind  Binding
		want  []string
	}{
		{
			name:  "unknown op",
			build: func() *model { return newModel(17).input("x", Float32, 2).node("FancyOp", "fancy", "x", "y") },
			want:  []string{`ir: node "fancy": unsupported op FancyOp:`, "opset 17", "open an issue to add shape rules for FancyOp"},
		},
		{
			name: "gemm inner dims",
			build: func() *model {
				return newModel(17).input("x", Float32, 2, 8).init("w", Float32, []int64{4, 9}).
					node("Gemm", "fc", "x,w", "y", onnxbuild.IntAttr("transB", 1))
			},
			want: []string{`ir: node "fc" (Gemm)`, "inner dims 8 and 9"},
		},
		{
			name: "gemm bias",
			build: func() *model {
				return newModel(17).input("x", Float32, 2, 8).init("w", Float32, []int64{4, 8}).init("b", Float32, []int64{3}).
					node("Gemm", "fc", "x,w,b", "y", onnxbuild.IntAttr("transB", 1))
			},
			want: []string{`ir: node "fc" (Gemm)`, "cannot broadcast"},
		},
		{
			name:  "global pool rank",
			build: func() *model { return newModel(17).input("x", Float32, 2, 8).node("GlobalAveragePool", "g", "x", "y") },
			want:  []string{`ir: node "g" (GlobalAveragePool)`, "no spatial axes"},
		},
		{
			name:  "unbound symbolic dim",
			build: func() *model { return newModel(17).input("x", Float32, "batch", "seq").node("Relu", "r", "x", "y") },
			bind:  Binding{Batch: 2},
			want:  []string{`ir: graph input "x": dim 1 ("seq") is symbolic`},
		},
		{
			name:  "overflowing input",
			build: func() *model { return newModel(17).input("x", Float32, "batch", 1<<40).node("Relu", "r", "x", "y") },
			bind:  Binding{Batch: 1 << 30},
			want:  []string{"ir: ", "overflows int64"},
		},
		{
			name: "overflowing expand",
			build: func() *model {
				return newModel(17).input("x", Float32, 1, 1).constant("s", Int64, []int64{2}, 1<<40, 1<<40).
					node("Expand", "e", "x,s", "y")
			},
			want: []string{`ir: node "e" (Expand)`, "overflows int64"},
		},
		{
			name: "overflowing fold",
			build: func() *model {
				return newModel(17).input("x", Float32, 1).constant("a", Int64, []int64{1}, math.MaxInt64/2).
					node("Mul", "m", "a,a", "y")
			},
			want: []string{`ir: node "m" (Mul)`, "int64 overflow"},
		},
		{
			name: "negative computed dim",
			build: func() *model {
				return newModel(17).input("x", Float32, 1).constant("s", Int64, []int64{1}, -3).
					node("ConstantOfShape", "c", "s", "y")
			},
			want: []string{`ir: node "c" (ConstantOfShape)`, "negative dim"},
		},
		{
			name: "reshape element count",
			build: func() *model {
				return newModel(17).input("x", Float32, 2, 3).constant("s", Int64, []int64{1}, 5).node("Reshape", "r", "x,s", "y")
			},
			want: []string{`ir: node "r" (Reshape): cannot reshape [2 3]`},
		},
		{
			name: "conv channels",
			build: func() *model {
				return newModel(17).input("x", Float32, 1, 3, 8, 8).init("w", Float32, []int64{4, 2, 3, 3}).node("Conv", "c", "x,w", "y")
			},
			want: []string{`ir: node "c" (Conv): input has 3 channels`},
		},
		{
			name: "broadcast",
			build: func() *model {
				return newModel(17).input("x", Float32, 2, 3).input("z", Float32, 4).node("Add", "a", "x,z", "y")
			},
			want: []string{"cannot broadcast [2 3] and [4]"},
		},
		{
			name: "unknown shape input without declared output",
			build: func() *model {
				return newModel(17).input("x", Float32, 6).init("s", Int64, []int64{2}).node("Reshape", "r", "x,s", "y")
			},
			want: []string{`the contents of input "s" are unknown`, `output "y" declares no shape`},
		},
		{
			name: "einsum ellipsis",
			build: func() *model {
				return newModel(17).input("a", Float32, 2, 3, 4).input("c", Float32, 2, 4, 5).
					node("Einsum", "e", "a,c", "y", onnxbuild.StringAttr("equation", "...ij,...jk->...ik"))
			},
			want: []string{`ir: node "e" (Einsum)`, "an ellipsis (...) is not supported"},
		},
		{
			name: "einsum sizes disagree",
			build: func() *model {
				return newModel(17).input("a", Float32, 3, 4).input("c", Float32, 5, 6).
					node("Einsum", "e", "a,c", "y", onnxbuild.StringAttr("equation", "ij,jk->ik"))
			},
			want: []string{"label j is 4 in one operand and 5 in another"},
		},
		{
			name: "einsum labels and dims",
			build: func() *model {
				return newModel(17).input("a", Float32, 3, 4).input("c", Float32, 4, 6).
					node("Einsum", "e", "a,c", "y", onnxbuild.StringAttr("equation", "ijk,jk->ik"))
			},
			want: []string{"operand 0 has 2 dims and 3 labels"},
		},
		{
			name: "einsum output label of no operand",
			build: func() *model {
				return newModel(17).input("a", Float32, 3, 4).input("c", Float32, 4, 6).
					node("Einsum", "e", "a,c", "y", onnxbuild.StringAttr("equation", "ij,jk->iz"))
			},
			want: []string{"output label z is no operand's"},
		},
		{
			name: "declared fallback at other sizes",
			build: func() *model {
				return newModel(17).input("images", Float32, "batch", 3, 64, 64).init("s", Int64, []int64{2}).
					node("Reshape", "r", "images,s", "y").declare("y", Float32, "batch", 12288)
			},
			bind: Binding{Batch: 2, Height: 32, Width: 32},
			want: []string{"the export fixed these sizes", "[batch 3 64 64]"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.build().load(t).Infer(tc.bind)
			wantError(t, err, tc.want...)
		})
	}
}

func TestDeclaredFallback(t *testing.T) {
	// Shape constants in external initializers (as in dynamo exports) resolve
	// from value_info when the input is at its declared size.
	g := newModel(18).input("images", Float32, "batch", 4, 8, 8).
		init("s", Int64, []int64{3}).
		node("Reshape", "r", "images,s", "y").declare("y", Float32, "batch", 4, 64).
		init("sizes", Int64, []int64{2}).
		node("Split", "split", "y,sizes", "a,b", onnxbuild.IntAttr("axis", 1)).
		declare("a", Float32, "batch", 1, 64).declare("b", Float32, "batch", 3, 64).
		load(t)
	s, err := g.Infer(Binding{Batch: 5})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]int64{"y": {5, 4, 64}, "a": {5, 1, 64}, "b": {5, 3, 64}} {
		if got := s.Dims[id(t, g, name)]; !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}

func TestInferHandBuiltGraph(t *testing.T) {
	// A Graph built without Load (no cached op kinds) infers the same.
	g := &Graph{
		Values: []Value{
			{ID: 0, Name: "x", Kind: Input, DType: Float32, Dims: []Dim{{Value: -1, Param: "batch"}, {Value: 4}}, Producer: -1},
			{ID: 1, Name: "y", Kind: Activation, Producer: 0},
		},
		Nodes:   []Node{{ID: 0, Name: "s", OpType: "Sigmoid", Inputs: []ValueID{0}, Outputs: []ValueID{1}, Layer: -1}},
		Inputs:  []ValueID{0},
		Outputs: []ValueID{1},
	}
	s, err := g.Infer(Binding{Batch: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Dims[1], []int64{3, 4}) || s.Bytes(1) != 48 {
		t.Errorf("dims %v, bytes %d", s.Dims[1], s.Bytes(1))
	}
}

// TestFromInputs checks which values depend on a graph input: x and what
// reads it, not an initializer nor a value computed from initializers
// alone, even when an input-dependent value later reads it.
func TestFromInputs(t *testing.T) {
	g := newModel(17).input("x", Float32, 2, 3).init("w", Float32, []int64{3}).
		node("Exp", "e", "w", "ew").
		node("Mul", "m", "x,ew", "y").
		load(t)
	from := g.FromInputs()
	for name, want := range map[string]bool{"x": true, "w": false, "ew": false, "y": true} {
		v, ok := g.Lookup(name)
		if !ok {
			t.Fatalf("no value %s", name)
		}
		if from[v] != want {
			t.Errorf("%s: from an input %v, want %v", name, from[v], want)
		}
	}
}
