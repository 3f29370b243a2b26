package sim_test

// alignOp is one step of an alignment of a measured and a predicted event
// list: a match (both indices), a measured event only (p < 0) or a predicted
// event only (m < 0).
type alignOp struct{ m, p int }

// align aligns n measured with k predicted events, eq telling which pairs
// match, by Myers' O(ND) difference algorithm (E. Myers, "An O(ND)
// Difference Algorithm and Its Variations", Algorithmica 1, 1986): the
// result is a shortest edit script, in order, matches included. It stays fast
// on the few thousand events of a YOLOv9 step as long as they mostly agree.
func align(n, k int, eq func(i, j int) bool) []alignOp {
	max := n + k
	off := max
	v := make([]int, 2*max+2)
	var trace [][]int
	for d := 0; d <= max; d++ {
		trace = append(trace, append([]int(nil), v...))
		for diag := -d; diag <= d; diag += 2 {
			var x int
			if diag == -d || (diag != d && v[off+diag-1] < v[off+diag+1]) {
				x = v[off+diag+1]
			} else {
				x = v[off+diag-1] + 1
			}
			y := x - diag
			for x < n && y < k && eq(x, y) {
				x, y = x+1, y+1
			}
			v[off+diag] = x
			if x >= n && y >= k {
				return backtrack(trace, d, n, k, off)
			}
		}
	}
	return nil
}

// backtrack walks the saved frontiers of align back from (n, k).
func backtrack(trace [][]int, d, n, k, off int) []alignOp {
	var rev []alignOp
	x, y := n, k
	for ; d >= 0; d-- {
		v := trace[d]
		diag := x - y
		var prev int
		if diag == -d || (diag != d && v[off+diag-1] < v[off+diag+1]) {
			prev = diag + 1
		} else {
			prev = diag - 1
		}
		px := 0
		if d > 0 {
			px = v[off+prev]
		}
		py := px - prev
		if d == 0 {
			px, py = 0, 0
		}
		for x > px && y > py {
			x, y = x-1, y-1
			rev = append(rev, alignOp{x, y})
		}
		if d > 0 {
			if x == px {
				rev = append(rev, alignOp{-1, y - 1})
			} else {
				rev = append(rev, alignOp{x - 1, -1})
			}
		}
		x, y = px, py
	}
	ops := make([]alignOp, len(rev))
	for i, op := range rev {
		ops[len(rev)-1-i] = op
	}
	return ops
}
