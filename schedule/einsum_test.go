package schedule

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/ir"
)

// TestPlanEinsum checks how einsum reads its two operands as bmm's
// matrices (aten's sumproduct_pair): the operands' dims in the order bmm
// reads them, the matrices, and the output's strides; and the equations
// that one bmm does not run.
func TestPlanEinsum(t *testing.T) {
	for _, tc := range []struct {
		eq     string
		da, db []int64
		order  [2][]int
		mat    [2][3]int64
		out    []int64
	}{
		// MaxViT's scores and their product with v at batch 2 (64 windows
		// of 49 positions, 2 heads of 32): batch B G H.
		{"B G H I D, B G H J D -> B G H I J", []int64{2, 64, 2, 49, 32}, []int64{2, 64, 2, 49, 32},
			[2][]int{{0, 1, 2, 3, 4}, {0, 1, 2, 4, 3}}, [2][3]int64{{256, 49, 32}, {256, 32, 49}}, []int64{64 * 2 * 49 * 49, 2 * 49 * 49, 49 * 49, 49, 1}},
		{"B G H I J, B G H J D -> B G H I D", []int64{2, 64, 2, 49, 49}, []int64{2, 64, 2, 49, 32},
			[2][]int{{0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}}, [2][3]int64{{256, 49, 49}, {256, 49, 32}}, []int64{64 * 2 * 49 * 32, 2 * 49 * 32, 49 * 32, 32, 1}},
		// A matrix product, implicit output; and the output transposed:
		// a view of bmm's [1, i, k].
		{"ij,jk", []int64{3, 4}, []int64{4, 5}, [2][]int{{0, 1}, {0, 1}}, [2][3]int64{{1, 3, 4}, {1, 4, 5}}, []int64{5, 1}},
		{"ij,jk->ki", []int64{3, 4}, []int64{4, 5}, [2][]int{{0, 1}, {0, 1}}, [2][3]int64{{1, 3, 4}, {1, 4, 5}}, []int64{1, 5}},
		// The right operand's dims read out of order; a broadcast batch
		// dim of size 1 is left's own.
		{"bij,bkj->bik", []int64{1, 3, 4}, []int64{6, 5, 4}, [2][]int{{1, 2}, {2, 0, 1}}, [2][3]int64{{1, 3, 4}, {1, 4, 30}}, []int64{5, 30, 1}},
	} {
		p, err := planEinsum(tc.eq, tc.da, tc.db)
		if err != nil {
			t.Errorf("%s: %v", tc.eq, err)
			continue
		}
		if diff := cmp.Diff(tc.order, p.order); diff != "" {
			t.Errorf("%s: order (-want +got):\n%s", tc.eq, diff)
		}
		if p.mat != tc.mat || !cmp.Equal(p.out, tc.out) {
			t.Errorf("%s: matrices %v, output strides %v; want %v, %v", tc.eq, p.mat, p.out, tc.mat, tc.out)
		}
	}
	for _, tc := range []struct {
		eq     string
		da, db []int64
		want   string
	}{
		{"ii,ij->j", []int64{3, 3}, []int64{3, 4}, "label i twice in operand 0"},
		{"ij,jk->k", []int64{3, 4}, []int64{4, 5}, "label i, summed, is in one operand only"},
		{"ij,jk,kl->il", []int64{3, 4}, []int64{4, 5}, "3 operands for 2 inputs"},
		{"ijk,jk->ik", []int64{3, 4}, []int64{4, 5}, "operand 0 has 2 dims"},
	} {
		if _, err := planEinsum(tc.eq, tc.da, tc.db); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %q", tc.eq, err, tc.want)
		}
	}
}

// TestEinsumViewable checks when an operand's matrix is a view: MaxViT's
// q, a permuted slice of the qkv projection, is not (its strides cannot
// merge B, G and H), nor is k·scale, dense in k's order; the softmax's
// contiguous output is.
func TestEinsumViewable(t *testing.T) {
	p, err := planEinsum("B G H I D, B G H J D -> B G H I J", []int64{2, 64, 2, 49, 32}, []int64{2, 64, 2, 49, 32})
	if err != nil {
		t.Fatal(err)
	}
	// qkv [2, 64, 49, 192] contiguous; q = qkv[..., :64] as [2, 64, 49, 2,
	// 32], permuted (0, 1, 3, 2, 4).
	q := []int64{64 * 49 * 192, 49 * 192, 32, 192, 1}
	k := denseInOrder([]int64{2, 64, 2, 49, 32}, q)
	if p.viewable(0, q) || p.viewable(1, k) || p.viewable(0, nil) {
		t.Errorf("q (strides %v) or k·scale (%v) viewable", q, k)
	}
	if !p.viewable(0, rowMajor([]int64{2, 64, 2, 49, 32})) {
		t.Error("a contiguous left operand is not viewable")
	}
	if got, want := k, []int64{64 * 49 * 64, 49 * 64, 32, 64, 1}; !cmp.Equal(got, want) {
		t.Errorf("k·scale strides %v, want %v", got, want)
	}
}

// TestMatMulEquation checks the einsum that a MatMul of two activations
// runs as, and the MatMuls onnxmem does not simulate.
func TestMatMulEquation(t *testing.T) {
	s := &ir.Shapes{Dims: [][]int64{{2, 3, 49, 32}, {2, 3, 32, 49}, {49, 32}, {1, 3, 32, 49}}}
	mm := func(a, b ir.ValueID) *ir.Node {
		return &ir.Node{Name: "/attn/MatMul", OpType: "MatMul", Inputs: []ir.ValueID{a, b}, Outputs: []ir.ValueID{0}}
	}
	if eq, err := ir.EinsumEquation(mm(0, 1), s); err != nil || eq != "ABxy,AByz->ABxz" {
		t.Errorf("4-D MatMul: %q, %v", eq, err)
	}
	for _, n := range []*ir.Node{mm(2, 2), mm(0, 3)} {
		if _, err := ir.EinsumEquation(n, s); err == nil || !strings.Contains(err.Error(), "the same batch dims") {
			t.Errorf("MatMul of %v and %v: error %v", s.Dims[n.Inputs[0]], s.Dims[n.Inputs[1]], err)
		}
	}
}

// TestPlanEinsumRandom checks the plans of seeded random equations of two
// operands against what any bmm plan must be: each operand's dims of size
// above 1 read once, its matrix holding all its elements, the two matrices
// agreeing on the batch and the summed size, and the output a dense view
// of bmm's result.
func TestPlanEinsumRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	planned := 0
	for range 5000 {
		size := map[byte]int64{}
		term := func() ([]byte, []int64) {
			var ls []byte
			var d []int64
			for range rng.IntN(4) + 1 {
				l := byte('a' + rng.IntN(6))
				if slices.Contains(ls, l) && rng.IntN(2) == 0 {
					continue
				}
				if _, ok := size[l]; !ok {
					size[l] = int64(rng.IntN(4) + 1)
				}
				ls, d = append(ls, l), append(d, size[l])
			}
			return ls, d
		}
		la, da := term()
		lb, db := term()
		var out []byte
		for _, l := range append(append([]byte(nil), la...), lb...) {
			if !slices.Contains(out, l) && rng.IntN(2) == 0 {
				out = append(out, l)
			}
		}
		eq := string(la) + "," + string(lb) + "->" + string(out)
		p, err := planEinsum(eq, da, db)
		if err != nil {
			continue
		}
		planned++
		for k, d := range [][]int64{da, db} {
			var want []int
			elems := int64(1)
			for j, n := range d {
				if n != 1 {
					want = append(want, j)
					elems *= n
				}
			}
			got := slices.Sorted(slices.Values(p.order[k]))
			if !slices.Equal(got, want) {
				t.Fatalf("%s %v %v: operand %d reads dims %v, want each of %v once", eq, da, db, k, p.order[k], want)
			}
			if m := p.mat[k]; m[0]*m[1]*m[2] != elems {
				t.Fatalf("%s %v %v: operand %d's matrix %v, %d elements", eq, da, db, k, m, elems)
			}
		}
		if p.mat[0][0] != p.mat[1][0] || p.mat[0][2] != p.mat[1][1] {
			t.Fatalf("%s %v %v: matrices %v and %v do not multiply", eq, da, db, p.mat[0], p.mat[1])
		}
		od := make([]int64, len(out))
		for i, l := range out {
			od[i] = size[l]
		}
		if len(od) > 0 && !dense(od, p.out) {
			t.Fatalf("%s %v %v: output strides %v of dims %v are not dense", eq, da, db, p.out, od)
		}
	}
	if planned < 800 {
		t.Errorf("%d of 5000 random equations planned: the generator makes too few that one bmm runs", planned)
	}
}
