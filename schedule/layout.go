package schedule

import (
	"cmp"
	"slices"

	"github.com/onnxmem/onnxmem/ir"
)

// Memory layouts of dense tensors: which views and reshapes need a copy.
//
// A dense tensor that is not contiguous is kept with its strides (in
// elements). A view keeps the storage and gets new strides: a transpose
// permutes them, a reshape takes the strides that ATen's computeStride
// finds (aten/src/ATen/TensorUtils.cpp), or copies when there are none.
// Worked example, MultiheadAttention's query in vit_b_16 at batch 8: q is
// [197, 8, 768], contiguous (strides 6144, 768, 1); q.view(197, 96, 64)
// has strides 6144, 64, 1; .transpose(0, 1) is [96, 197, 64] with strides
// 64, 6144, 1; .view(8, 12, 197, 64) only splits the first dim, so
// computeStride gives 768, 64, 6144, 1: a view, not a copy. Its gradient,
// written by the flash kernel in the same strides, goes back through the
// same views without a copy: [8, 12, 197, 64] → [96, 197, 64] merges dims
// of strides 768 and 64 = 12 × 64, which computeStride allows.

// rowMajor returns the strides of a contiguous tensor of dims d.
func rowMajor(d []int64) []int64 {
	st := make([]int64, len(d))
	acc := int64(1)
	for i := len(d) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= max(d[i], 1)
	}
	return st
}

// channelsLastStrides returns the strides of a 4-D tensor of dims d stored
// in N, H, W, C order.
func channelsLastStrides(d []int64) []int64 {
	if len(d) != 4 {
		return nil
	}
	return []int64{d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]}
}

// sameStrides reports whether strides a and b address a tensor of dims d
// alike: equal in every dim of size above 1.
func sameStrides(d, a, b []int64) bool {
	if len(a) != len(d) || len(b) != len(d) {
		return false
	}
	for i := range d {
		if d[i] != 1 && a[i] != b[i] {
			return false
		}
	}
	return true
}

// isChannelsLast reports whether strides st lay out a 4-D tensor of dims d
// in N, H, W, C order (and not also contiguous).
func isChannelsLast(d, st []int64) bool {
	return len(d) == 4 && st != nil && sameStrides(d, st, channelsLastStrides(d)) && !sameStrides(d, st, rowMajor(d))
}

// permuteStrides returns the strides of a transpose by perm: dim i of the
// result is dim perm[i] of the input; no perm reverses the dims, as ONNX's
// Transpose does. It returns nil for a perm that is not one of st's dims.
func permuteStrides(st, perm []int64) []int64 {
	if len(perm) == 0 {
		perm = make([]int64, len(st))
		for i := range perm {
			perm[i] = int64(len(st) - 1 - i)
		}
	}
	if len(perm) != len(st) {
		return nil
	}
	out := make([]int64, len(st))
	for i, p := range perm {
		if p < 0 || int(p) >= len(st) {
			return nil
		}
		out[i] = st[p]
	}
	return out
}

// inversePerm returns the permutation that undoes perm.
func inversePerm(perm []int64) []int64 {
	inv := make([]int64, len(perm))
	for j, p := range perm {
		if p >= 0 && int(p) < len(inv) {
			inv[p] = int64(j)
		}
	}
	return inv
}

// viewStrides returns the strides of a view of a tensor of dims old and
// strides st as dims nd, and false when no view has those dims (the
// reshape copies). It is ATen's computeStride_impl: the old dims are cut
// into chunks that are contiguous among themselves, and each chunk must be
// the product of consecutive new dims.
func viewStrides(old, st, nd []int64) ([]int64, bool) {
	if slices.Contains(old, 0) {
		return rowMajor(nd), true // no elements: any view
	}
	if len(old) == 0 {
		out := make([]int64, len(nd))
		for i := range out {
			out[i] = 1
		}
		return out, true
	}
	out := make([]int64, len(nd))
	viewD := len(nd) - 1
	chunkBase := st[len(st)-1]
	tensorNumel, viewNumel := int64(1), int64(1)
	for d := len(old) - 1; d >= 0; d-- {
		tensorNumel *= old[d]
		if d == 0 || (old[d-1] != 1 && st[d-1] != tensorNumel*chunkBase) {
			for viewD >= 0 && (viewNumel < tensorNumel || nd[viewD] == 1) {
				out[viewD] = viewNumel * chunkBase
				viewNumel *= nd[viewD]
				viewD--
			}
			if viewNumel != tensorNumel {
				return nil, false
			}
			if d > 0 {
				chunkBase = st[d-1]
				tensorNumel, viewNumel = 1, 1
			}
		}
	}
	if viewD != -1 {
		return nil, false
	}
	return out, true
}

// blasMatrix reports whether a tensor of dims d and strides st reaches
// cuBLAS without a copy: viewed as the matrix [rows, last dim] that
// aten::linear folds it to (computeStride), one of the matrix's strides is
// 1 (ViT's class token x[:, 0], a select of every 50th row). Unknown
// strides (nil) say no.
func blasMatrix(d, st []int64) bool {
	if st == nil || len(d) == 0 {
		return false
	}
	k := d[len(d)-1]
	m, ok := viewStrides(d, st, []int64{prod(d) / max(k, 1), k})
	return ok && (m[1] == 1 || m[0] == 1)
}

// prod returns the product of dims d.
func prod(d []int64) int64 {
	n := int64(1)
	for _, v := range d {
		n *= v
	}
	return n
}

// dense reports whether strides st address every element of a tensor of
// dims d once, without gaps: some order of the dims is row-major.
func dense(d, st []int64) bool {
	if st == nil || len(st) != len(d) {
		return false
	}
	idx := make([]int, 0, len(d))
	for i := range d {
		if d[i] != 1 {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(st[b], st[a]) })
	acc := int64(1)
	for k := len(idx) - 1; k >= 0; k-- {
		if st[idx[k]] != acc {
			return false
		}
		acc *= d[idx[k]]
	}
	return true
}

// denseInOrder returns the strides of a dense tensor of dims d whose dims
// lie in memory in the order of strides st, largest first, as
// TensorIterator allocates an element-wise op's output from its input's
// strides (ties keep their order; a dim of size 1 gets stride 1, which
// addresses nothing). For a dense st it is st itself.
func denseInOrder(d, st []int64) []int64 {
	var idx []int
	for i := range d {
		if d[i] != 1 {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(st[b], st[a]) })
	out := make([]int64, len(d))
	for i := range out {
		out[i] = 1
	}
	acc := int64(1)
	for k := len(idx) - 1; k >= 0; k-- {
		out[idx[k]] = acc
		acc *= d[idx[k]]
	}
	return out
}

// denseStrides returns the strides of value v when they are known: those
// of its dims when it is contiguous, its own when it is a slice of step 1,
// a transpose or a select of a tensor whose strides are known (dense or
// not); nil when it is strided in a way onnxmem does not follow (a slice
// of a larger step).
func (b *builder) denseStrides(v ir.ValueID) []int64 {
	if b.contig[v] {
		return rowMajor(b.s.Dims[v])
	}
	return b.str[v]
}

// channelsLast reports whether value v is channels-last (a contiguous v is
// not: the check allocates nothing for it).
func (b *builder) channelsLast(v ir.ValueID) bool {
	return !b.contig[v] && isChannelsLast(b.s.Dims[v], b.str[v])
}

// gradChannelsLast reports whether gradient t of a value of dims d is
// channels-last.
func gradChannelsLast(t gradT, d []int64) bool {
	return t.whole && !t.contig && isChannelsLast(d, t.str)
}

// setLayout records that value v has strides st: contiguous when they are
// its dims' own.
func (b *builder) setLayout(v ir.ValueID, st []int64) {
	if st == nil || sameStrides(b.s.Dims[v], st, rowMajor(b.s.Dims[v])) {
		b.contig[v], b.str[v] = true, nil
		return
	}
	b.contig[v], b.str[v] = false, st
}

// setStrided records that value v is strided and not dense (a slice).
func (b *builder) setStrided(v ir.ValueID) {
	b.contig[v], b.str[v] = false, nil
}

// gradStrides returns the strides of gradient t of a value of dims d when
// it is dense and all of its storage, else nil.
func gradStrides(t gradT, d []int64) []int64 {
	switch {
	case !t.whole:
		return nil
	case t.contig:
		return rowMajor(d)
	}
	return t.str
}

// withStrides returns t laid out with strides st over dims d: contiguous
// when they are the dims' own.
func withStrides(t gradT, d, st []int64) gradT {
	t.contig, t.str = false, nil
	switch {
	case st == nil:
	case sameStrides(d, st, rowMajor(d)):
		t.contig = true
	default:
		t.str = st
	}
	return t
}
