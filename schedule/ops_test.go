package schedule

import (
	"slices"
	"testing"

	"github.com/onnxmem/onnxmem/ir"
)

// TestOpFLOPs checks the FLOP rules on one node each.
func TestOpFLOPs(t *testing.T) {
	// Values: 0 x [2 4 8 8], 1 w [6 2 3 3], 2 bias [6], 3 y [2 6 8 8],
	// 4 a [2 8], 5 fc [10 8], 6 fc bias [10], 7 logits [2 10], 8 pooled [2 4 1 1],
	// 9 w [8 8], 10 bias [8].
	s := &ir.Shapes{Dims: [][]int64{{2, 4, 8, 8}, {6, 2, 3, 3}, {6}, {2, 6, 8, 8}, {2, 8}, {10, 8}, {10}, {2, 10}, {2, 4, 1, 1}, {8, 8}, {8}}}
	node := func(op string, in []ir.ValueID, out ir.ValueID, attrs ...ir.Attr) *ir.Node {
		return &ir.Node{Name: "/n/" + op, OpType: op, Inputs: in, Outputs: []ir.ValueID{out}, Attrs: attrs}
	}
	const outs = 2 * 6 * 8 * 8
	for _, tc := range []struct {
		n    *ir.Node
		want int64
	}{
		{node("Conv", []ir.ValueID{0, 1}, 3), 2 * outs * 2 * 3 * 3},
		{node("Conv", []ir.ValueID{0, 1, 2}, 3), 2*outs*2*3*3 + outs},
		{&ir.Node{OpType: "BatchNormalization", Inputs: []ir.ValueID{3}, Outputs: []ir.ValueID{3, 2, 2}}, 4 * outs},
		{node("BatchNormalization", []ir.ValueID{3}, 3), 2 * outs},
		{node("MaxPool", []ir.ValueID{0}, 3, ir.Attr{Name: "kernel_shape", Kind: ir.AttrInts, Ints: []int64{2, 2}}), 4 * outs},
		{node("ReduceSum", []ir.ValueID{0}, 2), 2 * 4 * 8 * 8},
		{node("ReduceMean", []ir.ValueID{0}, 4), 2 * 4 * 8 * 8},
		{node("Softmax", []ir.ValueID{3}, 3), 5 * outs},
		{node("Resize", []ir.ValueID{0}, 3), 0},
		{node("Resize", []ir.ValueID{0}, 3, ir.Attr{Name: "mode", Kind: ir.AttrString, Str: "linear"}), outs},
		{node("Relu", []ir.ValueID{3}, 3), outs},
		{node("Concat", []ir.ValueID{0, 0}, 3), 0},
		{node("Gemm", []ir.ValueID{4, 5, 6}, 7), 2*2*10*8 + 2*10},
		{node("Gemm", []ir.ValueID{4, 5}, 7), 2 * 2 * 10 * 8},
		{node("GlobalAveragePool", []ir.ValueID{0}, 8), 2 * 4 * 8 * 8},
		{node("Dropout", []ir.ValueID{7}, 7), 2 * 10},
		{node("Flatten", []ir.ValueID{8}, 4), 0},
		{node("Gelu", []ir.ValueID{3}, 3), outs},
		{node("Tanh", []ir.ValueID{3}, 3), outs},
		// One bmm: 2 per multiply-add of a [2·10] × [10·8] product.
		{node("Einsum", []ir.ValueID{7, 5}, 4, ir.Attr{Name: "equation", Kind: ir.AttrString, Str: "bk,kj->bj"}), 2 * 2 * 10 * 8},
		// A linear over the last dim of an N-D input (the generic family's
		// fused MatMul + Add): x [2 6 8 8] · W [8 8]ᵀ → [2 6 8 8].
		{node("Gemm", []ir.ValueID{3, 9, 10}, 3, ir.Attr{Name: "transB", Kind: ir.AttrInt, Int: 1}), 2*outs*8 + outs},
	} {
		got, err := FLOPs(tc.n, s)
		if err != nil || got != tc.want {
			t.Errorf("%s %v: %d FLOPs, %v; want %d", tc.n.OpType, tc.n.Inputs, got, err, tc.want)
		}
	}
	if _, err := FLOPs(&ir.Node{Name: "g", OpType: "FancyOp"}, s); err == nil {
		t.Error("FancyOp: no error")
	}
	if _, err := FLOPs(&ir.Node{Name: "c", OpType: "Conv", Domain: "com.microsoft"}, s); err == nil {
		t.Error("a Conv of another domain: no error")
	}
}

// TestSplitsOnly checks which reshapes are views of a strided tensor
// whatever its strides: those that only split dims (computeStride's case
// where each new dim lies inside one old dim), not those that merge.
func TestSplitsOnly(t *testing.T) {
	for _, c := range []struct {
		in, out []int64
		want    bool
	}{
		{[]int64{96, 197, 64}, []int64{8, 12, 197, 64}, true}, // q.view(bsz, heads, L, d)
		{[]int64{8, 768, 49}, []int64{8, 768, 7, 7}, true},    // a patch embedding's gradient
		{[]int64{197, 8, 768}, []int64{197, 96, 64}, false},   // merges 8 and 12
		{[]int64{2, 3}, []int64{6}, false},
		{[]int64{4, 2}, []int64{2, 4}, false},
		{[]int64{6, 1}, []int64{1, 2, 3}, true},
		{[]int64{5}, []int64{5}, true},
		{[]int64{12}, []int64{5, 2}, false},
	} {
		if got := splitsOnly(c.in, c.out); got != c.want {
			t.Errorf("splitsOnly(%v, %v) = %v, want %v", c.in, c.out, got, c.want)
		}
	}
}

// TestViewStrides checks the port of ATen's computeStride: which reshapes
// of a strided tensor are views, and their strides.
func TestViewStrides(t *testing.T) {
	for _, c := range []struct {
		old, st, nd []int64
		want        []int64 // nil: no view, the reshape copies
	}{
		// q.view(8, 12, 197, 64) of MultiheadAttention's transposed q.
		{[]int64{96, 197, 64}, []int64{64, 6144, 1}, []int64{8, 12, 197, 64}, []int64{768, 64, 6144, 1}},
		// Its gradient, in the same strides, back to [96, 197, 64].
		{[]int64{8, 12, 197, 64}, []int64{768, 64, 6144, 1}, []int64{96, 197, 64}, []int64{64, 6144, 1}},
		// [197, 96, 64] of the transposed [96, 197, 64] to [197, 8, 768]:
		// merges 12 heads of stride 12608 with 64 of stride 1.
		{[]int64{197, 96, 64}, []int64{64, 12608, 1}, []int64{197, 8, 768}, nil},
		// A contiguous tensor reshapes to anything.
		{[]int64{2, 3, 4}, []int64{12, 4, 1}, []int64{6, 4}, []int64{4, 1}},
		// A channels-last [N, C, H, W] is a contiguous [N, H, W, C]: its
		// flatten to [N, C·H·W] copies.
		{[]int64{2, 8, 4, 4}, []int64{128, 1, 32, 8}, []int64{2, 128}, nil},
		// Size-1 dims go and come anywhere.
		{[]int64{4, 1, 6}, []int64{6, 99, 1}, []int64{1, 4, 6, 1}, []int64{24, 6, 1, 1}},
	} {
		got, ok := viewStrides(c.old, c.st, c.nd)
		if !ok {
			got = nil
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("viewStrides(%v, %v, %v) = %v, %v; want %v", c.old, c.st, c.nd, got, ok, c.want)
		}
	}
	for _, c := range []struct {
		d, st []int64
		want  bool
	}{
		{[]int64{2, 8, 4, 4}, []int64{128, 1, 32, 8}, true}, // channels-last
		{[]int64{8, 768}, []int64{50 * 768, 1}, false},      // a select of every 50th row
		{[]int64{3, 1, 5}, []int64{5, 77, 1}, true},         // a size-1 dim's stride is free
		{[]int64{4, 6}, []int64{1, 4}, true},                // a transpose
		{[]int64{4, 6}, []int64{6, 2}, false},               // overlapping
		{[]int64{4, 6}, nil, false},                         // unknown
	} {
		if got := dense(c.d, c.st); got != c.want {
			t.Errorf("dense(%v, %v) = %v, want %v", c.d, c.st, got, c.want)
		}
	}
	// A tensor of no elements views as anything; a Transpose without perm
	// reverses the dims.
	if st, ok := viewStrides([]int64{0, 4}, []int64{1, 1}, []int64{2, 0, 2}); !ok || !slices.Equal(st, rowMajor([]int64{2, 0, 2})) {
		t.Errorf("viewStrides of no elements = %v, %v", st, ok)
	}
	if !splitsOnly([]int64{0, 3}, []int64{3, 0}) {
		t.Error("splitsOnly of no elements: want a view")
	}
	if got := permuteStrides([]int64{24, 6, 1}, nil); !slices.Equal(got, []int64{1, 6, 24}) {
		t.Errorf("permuteStrides without perm = %v, want the dims reversed", got)
	}
	if got := permuteStrides([]int64{6, 1}, []int64{0, 5}); got != nil {
		t.Errorf("permuteStrides with a perm out of range = %v, want nil", got)
	}
}
