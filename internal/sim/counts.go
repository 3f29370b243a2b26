package sim

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"

	"github.com/onnxmem/onnxmem/family"
	"github.com/onnxmem/onnxmem/schedule"
)

// Programs by box counts. A training run builds a train step for every
// iteration, and every iteration's images hold other box counts: the
// network's part of the program is the same each time, and the loss's
// tensors grow with a few numbers of the counts (a loss that is
// schedule.CountShaped says which, and which counts give the same events).
// So the programs of one scenario at one batch are kept by count class:
// once a class has builds at enough counts, and all of them have the same
// events and buffers, and every buffer's bytes are one affine function
// k₀ + Σ kⱼ·xⱼ of the loss's numbers xⱼ that holds exactly at every
// build, that function makes the program at any other counts of the class.
// A number that has been equal to another at every build so far (a dual
// head's two branches with the same anchors have the same foreground
// anchors) is one column, and counts where they differ are built.
//
// Worked example. A detector with two head branches at batch 16 and
// 640×640 has numbers (M, T, F₁, F₂): the most boxes of an image, the
// batch's boxes, each branch's foreground anchors, ten per box. Builds at
// (40, 180, 1800, 1800), (52, 190, 1900, 1900), … have F₁ = F₂ = 10·T at
// every one, so the columns are 1, M and T; they fit the assigner's
// overlaps, a float32 [16, M, 8400], as 537,600·M bytes, the targets'
// copy, [T, 6] float32, as 24·T, a convolution's output as its size. At
// (67, 230, 2300, 2300) the overlaps hold 36,019,200 bytes; at counts
// where F₁ ≠ 10·T the program is built.
//
// TestCountPrograms checks derived programs against built ones at random
// counts, buffer by buffer.

// maxCountClasses bounds the count classes a prepared model keeps; the
// oldest goes first.
const maxCountClasses = 32

// maxCountBuilds is how many builds a count class takes before it stops
// trying to fit them and builds every program.
const maxCountBuilds = 16

// countCache holds the count classes of one prepared model.
type countCache struct {
	mu      sync.Mutex
	classes []*countClass
	// outs holds, by scenario without its counts, the outputs of a build:
	// what the loss's CountShape reads.
	outs map[string][]schedule.Output
	// derived counts the programs made from a fit, for tests.
	derived int
}

// countClass is one scenario's programs at one count class.
type countClass struct {
	key    string
	points []countPoint
	fit    *countFit
	fixed  bool // maxCountBuilds builds did not fit
}

// countPoint is one build of a class at the loss's numbers x.
type countPoint struct {
	x    []int64
	prog *schedule.Program
}

// countFit makes a class's program at any numbers x whose proportions
// are the builds': a number proportional to an earlier one at every build
// (x[j]·q = x[k]·p) shares its column, and coef gives each buffer's bytes
// as coef[i][0] + Σ coef[i][1+c]·x[base[c]].
type countFit struct {
	prog *schedule.Program
	cols columns
	coef [][]int64
}

// columns maps the loss's numbers to independent columns: number j is
// column of[j], x[j]·ratio[j][1] = x[base[of[j]]]·ratio[j][0].
type columns struct {
	of    []int
	base  []int
	ratio [][2]int64
}

// columnsOf finds the columns of the numbers of points.
func columnsOf(points []countPoint) columns {
	nx := len(points[0].x)
	c := columns{of: make([]int, nx), ratio: make([][2]int64, nx)}
	for j := range nx {
		c.of[j] = -1
		for col, k := range c.base {
			if r, ok := proportional(points, j, k); ok {
				c.of[j], c.ratio[j] = col, r
				break
			}
		}
		if c.of[j] < 0 {
			c.of[j], c.ratio[j] = len(c.base), [2]int64{1, 1}
			c.base = append(c.base, j)
		}
	}
	return c
}

// proportional returns p and q such that x[j]·q = x[k]·p at every build.
func proportional(points []countPoint, j, k int) ([2]int64, bool) {
	r := [2]int64{0, 1}
	for _, pt := range points {
		if pt.x[k] != 0 {
			r = [2]int64{pt.x[j], pt.x[k]}
			break
		}
	}
	for _, pt := range points {
		a, ok1 := mulOK(pt.x[j], r[1])
		b, ok2 := mulOK(pt.x[k], r[0])
		if !ok1 || !ok2 || a != b {
			return r, false
		}
	}
	return r, true
}

// holds reports whether x keeps the proportions of the builds.
func (c columns) holds(x []int64) bool {
	if len(x) != len(c.of) {
		return false
	}
	for j, col := range c.of {
		a, ok1 := mulOK(x[j], c.ratio[j][1])
		b, ok2 := mulOK(x[c.base[col]], c.ratio[j][0])
		if !ok1 || !ok2 || a != b {
			return false
		}
	}
	return true
}

// countProgram returns the program of a train step sc with box counts:
// derived from its count class when it has a fit, else built and kept
// towards one. ok is false when the family's loss is not CountShaped: the
// caller builds.
func countProgram(p *prepared, sc Options, build func() (*schedule.Program, error)) (*schedule.Program, bool, error) {
	loss, _ := family.Recipe(p.fam, p.graph, schedule.Optimizer(sc.Optimizer), sc.EMA, sc.Boxes).Loss.(schedule.CountShaped)
	if loss == nil {
		return nil, false, nil
	}
	base := sc
	base.BoxCounts, base.Boxes = nil, 0
	baseKey := fmt.Sprintf("%+v", base)
	c := &p.counts
	c.mu.Lock()
	outs, known := c.outs[baseKey]
	c.mu.Unlock()
	if !known {
		prog, err := build()
		if err != nil {
			return nil, true, err
		}
		c.mu.Lock()
		if c.outs == nil {
			c.outs = map[string][]schedule.Output{}
		}
		if len(c.outs) >= maxCountClasses {
			clear(c.outs)
		}
		c.outs[baseKey] = prog.Outputs
		c.mu.Unlock()
		return prog, true, nil
	}
	class, x := loss.CountShape(schedule.LossInput{Batch: sc.Batch, Outputs: outs, AMP: sc.AMP, Boxes: slices.Max(sc.BoxCounts), BoxCounts: sc.BoxCounts})
	key := baseKey + "|" + class
	c.mu.Lock()
	cl := c.find(key)
	if cl.fit != nil {
		if prog := cl.fit.at(x); prog != nil {
			c.derived++
			c.mu.Unlock()
			return prog, true, nil
		}
	}
	c.mu.Unlock()
	prog, err := build()
	if err != nil {
		return nil, true, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl.fit == nil && !cl.fixed {
		cl.points = append(cl.points, countPoint{x: x, prog: prog})
		cl.fit = fitCounts(cl.points)
		if cl.fit != nil {
			cl.points = nil
		} else if len(cl.points) >= maxCountBuilds {
			cl.points, cl.fixed = nil, true
		}
	}
	return prog, true, nil
}

// find returns the class of key, made if new. The caller holds c.mu.
func (c *countCache) find(key string) *countClass {
	for _, cl := range c.classes {
		if cl.key == key {
			return cl
		}
	}
	cl := &countClass{key: key}
	if len(c.classes) >= maxCountClasses {
		c.classes = c.classes[1:]
	}
	c.classes = append(c.classes, cl)
	return cl
}

// fitCounts returns the fit of a class's builds, or nil when they do not
// have the same events and buffers, do not yet determine every column, or
// disagree with the affine bytes.
func fitCounts(points []countPoint) *countFit {
	first := points[0].prog
	for _, pt := range points[1:] {
		if !sameSteps(first, pt.prog) || len(pt.x) != len(points[0].x) {
			return nil
		}
	}
	cols := columnsOf(points)
	ncol := len(cols.base)
	// Rows [1, columns...]; pick ncol+1 independent ones by elimination.
	row := func(pt countPoint) []float64 {
		r := make([]float64, ncol+1)
		r[0] = 1
		for c, j := range cols.base {
			r[1+c] = float64(pt.x[j])
		}
		return r
	}
	n := ncol + 1
	var basis []int
	var reduced [][]float64
	for i, pt := range points {
		r := row(pt)
		for _, rr := range reduced { // their pivots differ
			p := pivot(rr)
			f := r[p] / rr[p]
			for k := range r {
				r[k] -= f * rr[k]
			}
		}
		if p := pivot(r); p >= 0 && math.Abs(r[p]) > 1e-6 {
			reduced = append(reduced, r)
			basis = append(basis, i)
		}
		if len(basis) == n {
			break
		}
	}
	if len(basis) < n || len(points) <= n { // one build beyond the basis checks the fit
		return nil
	}
	// Solve A·k = bytes for every buffer, A the basis's rows.
	a := make([][]float64, n)
	for i, b := range basis {
		a[i] = row(points[b])
	}
	inv, ok := invert(a)
	if !ok {
		return nil
	}
	coef := make([][]int64, len(first.Buffers))
	for i := range first.Buffers {
		k := make([]int64, n)
		for r := range n {
			var v float64
			for c := range n {
				v += inv[r][c] * float64(points[basis[c]].prog.Buffers[i].Bytes)
			}
			if math.Abs(v) > 1<<52 {
				return nil
			}
			k[r] = int64(math.Round(v))
		}
		for _, pt := range points {
			if got, ok := evalCount(k, cols, pt.x); !ok || got != pt.prog.Buffers[i].Bytes {
				return nil
			}
		}
		coef[i] = k
	}
	return &countFit{prog: first, cols: cols, coef: coef}
}

// pivot is the index of r's first entry that is not (nearly) zero, or -1.
func pivot(r []float64) int {
	for i, v := range r {
		if math.Abs(v) > 1e-9 {
			return i
		}
	}
	return -1
}

// invert returns the inverse of the square matrix a, by Gauss–Jordan
// elimination with partial pivoting, or false when it is singular.
func invert(a [][]float64) ([][]float64, bool) {
	n := len(a)
	m := make([][]float64, n)
	for i := range a {
		m[i] = make([]float64, 2*n)
		copy(m[i], a[i])
		m[i][n+i] = 1
	}
	for col := range n {
		best := col
		for r := col + 1; r < n; r++ {
			if math.Abs(m[r][col]) > math.Abs(m[best][col]) {
				best = r
			}
		}
		if math.Abs(m[best][col]) < 1e-9 {
			return nil, false
		}
		m[col], m[best] = m[best], m[col]
		pv := m[col][col]
		for k := range m[col] {
			m[col][k] /= pv
		}
		for r := range n {
			if r != col && m[r][col] != 0 {
				f := m[r][col]
				for k := range m[r] {
					m[r][k] -= f * m[col][k]
				}
			}
		}
	}
	inv := make([][]float64, n)
	for i := range m {
		inv[i] = m[i][n:]
	}
	return inv, true
}

// evalCount is k₀ + Σ k₁₊꜀·x[base[c]] over the columns, exactly, with
// false on overflow.
func evalCount(k []int64, cols columns, x []int64) (int64, bool) {
	v := k[0]
	for c, j := range cols.base {
		lo, ok := mulOK(k[1+c], x[j])
		if !ok {
			return 0, false
		}
		s := v + lo
		if (lo > 0 && s < v) || (lo < 0 && s > v) {
			return 0, false
		}
		v = s
	}
	return v, true
}

// mulOK returns a·b and whether it did not overflow.
func mulOK(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	p := a * b
	return p, p/b == a && !(a == -1 && b == math.MinInt64) && !(b == -1 && a == math.MinInt64)
}

// at returns the class's program at numbers x, or nil when x breaks a
// proportion the fit rests on or a buffer's bytes come out negative.
func (f *countFit) at(x []int64) *schedule.Program {
	if !f.cols.holds(x) {
		return nil
	}
	q := *f.prog
	q.Buffers = slices.Clone(f.prog.Buffers)
	for i, k := range f.coef {
		v, ok := evalCount(k, f.cols, x)
		if !ok || v < 0 {
			return nil
		}
		q.Buffers[i].Bytes = v
	}
	return &q
}

// sameSteps reports whether two programs have the same events, the same
// buffers but for their bytes, and the same everything else.
func sameSteps(a, b *schedule.Program) bool {
	if len(a.Buffers) != len(b.Buffers) {
		return false
	}
	for i := range a.Buffers {
		x, y := a.Buffers[i], b.Buffers[i]
		if x.Kind != y.Kind || x.Value != y.Value || x.Node != y.Node {
			return false
		}
	}
	x, y := *a, *b
	x.Buffers, y.Buffers, x.Shapes, y.Shapes = nil, nil, nil, nil
	return reflect.DeepEqual(x, y)
}
