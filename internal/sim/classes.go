package sim

import (
	"fmt"
	"math/bits"
	"slices"
	"sync"

	"github.com/onnxmem/onnxmem/internal/cudnn"
	"github.com/onnxmem/onnxmem/schedule"
)

// Programs by shape class. A sweep or a max-batch search simulates one
// scenario at many batch sizes; shape inference and the schedule then make
// the same program every time but for the sizes of its buffers, which grow
// linearly with the batch, and for the cuDNN workspaces, which do not (the
// heuristics pick an algorithm per shape). So the programs a model has
// built are kept by class: the scenario without its batch size. After three
// builds of one class at different batch sizes, if the three have the same
// events, buffers and convolution calls, and every buffer's bytes (and every
// call's batch dim) lie on one line k·B + c through all three points, that
// line makes the program at any other batch: the buffers' bytes from it, the
// workspaces from the cuDNN table at the new batch. A call whose workspace is
// empty allocates nothing, so the program has no events for it, and which
// calls have one changes with the batch; so the builds behind a template
// give every call a workspace of at least a byte, and a program is that
// superset with the events of the empty workspaces taken out (trim).
//
// Worked example. An AMP model step is built at batch 2, 3 and 4. Its stem
// conv's output, 16 channels of 320×320 in float16, holds 6,553,600 bytes at
// batch 2, 9,830,400 at 3 and 13,107,200 at 4: k = 3,276,800, c = 0, and the
// three points agree, so at batch 48 the buffer holds 157,286,400 bytes. The
// input is the same; a batch-norm's statistics (C floats) have k = 0. The
// stem conv's forward workspace is looked up again for N = 48.
//
// TestClassPrograms checks the derived programs against built ones for the
// built-in models, batch by batch.

// maxClasses bounds the classes a prepared model keeps; the least recently
// used goes first.
const maxClasses = 16

// convCall is one convolution call of a build and the workspace it got.
type convCall struct {
	call schedule.ConvCall
	ws   int64
}

// classCache holds the classes of one prepared model.
type classCache struct {
	mu      sync.Mutex
	classes []*class // least recently used first
}

// class is what the cache knows of one shape class: up to three builds,
// then the template made from them, or that its programs do not scale.
type class struct {
	key    string
	points []classPoint
	tmpl   *template
	misses int  // fits that failed
	fixed  bool // maxMisses fits failed: always build
	// last is the program last returned for the class, at batch lastBatch:
	// asked for again, it is returned again. one is the class's program at
	// batch 1, which no template makes and every max-batch search asks for.
	last      *schedule.Program
	lastBatch int64
	one       *schedule.Program
}

// maxMisses is how many three-build windows may fail to fit a line before
// a class is always built.
const maxMisses = 3

// classPoint is one build of a class, with a workspace event for every
// convolution call: calls hold the real workspaces, wsBuf the buffer of
// each call's.
type classPoint struct {
	batch int64
	prog  *schedule.Program
	calls []convCall
	wsBuf []int32
}

// template derives a class's program at any batch.
type template struct {
	prog  *schedule.Program // a build; derived programs share its events
	k, c  []int64           // by buffer: bytes = k·B + c
	calls []convCall        // the build's calls
	nk    []int64           // by call: N = nk·B + nc
	nc    []int64
	wsBuf []int32 // by call: its workspace buffer
	// wsCall is, by buffer, the call whose workspace it is, or -1.
	wsCall []int32
	// shape is, by call, the index of its shape: calls of one shape (the
	// call but for Which, and the same line of N) share a row of the
	// cuDNN table; shapes lists one call of each.
	shape  []int32
	shapes []int32

	mu    sync.Mutex
	skels []*skeleton // least recently used first
}

// classKey names a scenario's class: everything but the batch size and the
// allocator's limit and options, which no program depends on.
func classKey(sc Options) string {
	sc.Batch, sc.Capacity, sc.AllocConf, sc.EmptyCache = 0, 0, "", ""
	return fmt.Sprintf("%+v", sc)
}

// program returns the step's program for a scenario: derived from its
// class's template when there is one, else built (and kept towards one).
// The program it returns may share its events with other programs and has
// no Shapes; it is for the allocator's replay only.
func (m *Model) program(sc Options) (*schedule.Program, error) {
	prog, err := m.programOf(sc)
	if err != nil {
		return nil, err
	}
	return prog, checkBytes(prog, sc)
}

// MaxStepBytes bounds the bytes of all the tensors a step makes: 2^60
// (1 EiB), far beyond any device, so that every byte count onnxmem adds
// (allocated, requested, reserved, over the warm-up and the measured step)
// stays exact in an int64. A scenario beyond it is an error.
const MaxStepBytes = 1 << 60

// ErrTooLarge is the error of a scenario whose tensors add up to more than
// MaxStepBytes.
type ErrTooLarge struct{ Batch, Height, Width int64 }

func (e *ErrTooLarge) Error() string {
	return fmt.Sprintf("onnxmem: batch %d at %dx%d: the step's tensors add up to more than 2^60 bytes (1 EiB), beyond any device and beyond what onnxmem counts exactly; use a smaller batch or image", e.Batch, e.Height, e.Width)
}

// checkBytes returns an *ErrTooLarge when the buffers of prog add up to more than
// MaxStepBytes.
func checkBytes(prog *schedule.Program, sc Options) error {
	var total int64
	for _, b := range prog.Buffers {
		total += b.Bytes
		if b.Bytes < 0 || total > MaxStepBytes {
			return &ErrTooLarge{Batch: sc.Batch, Height: sc.Height, Width: sc.Width}
		}
	}
	return nil
}

// programOf returns the step's program as program says, unchecked.
func (m *Model) programOf(sc Options) (*schedule.Program, error) {
	p, sc, err := m.programPrep(sc)
	if err != nil {
		return nil, err
	}
	if sc.Train && sc.BoxCounts != nil {
		// A run's iterations: by count class, not by batch class, whose key
		// would hold every iteration's counts.
		prog, ok, err := countProgram(p, sc, func() (*schedule.Program, error) { return buildTrimmed(m, p, sc) })
		if ok {
			return prog, err
		}
	}
	// At batch 1 a slice along the channels is contiguous, so some kernels
	// copy nothing that they copy at batch 2 and more: batch 1 is a class
	// of its own, always built.
	key := classKey(sc)
	last, t := p.classes.lookup(key, sc.Batch)
	if last != nil {
		return last, nil
	}
	if t != nil && sc.Batch > 1 {
		if prog := t.at(sc.Batch, wsFor(sc)); prog != nil {
			p.classes.remember(key, sc.Batch, prog)
			return prog, nil
		}
	}
	prog, calls, wsBuf, err := m.buildSuperset(p, sc)
	if err != nil {
		return nil, err
	}
	if sc.Batch > 1 {
		p.classes.add(key, classPoint{batch: sc.Batch, prog: prog, calls: calls, wsBuf: wsBuf})
	}
	out := trim(prog, calls, wsBuf)
	p.classes.remember(key, sc.Batch, out)
	return out, nil
}

// buildTrimmed builds sc's program as programOf does, without keeping it
// towards a batch class.
func buildTrimmed(m *Model, p *prepared, sc Options) (*schedule.Program, error) {
	prog, calls, wsBuf, err := m.buildSuperset(p, sc)
	if err != nil {
		return nil, err
	}
	return trim(prog, calls, wsBuf), nil
}

// buildSuperset builds sc's program with a workspace event for every
// convolution call, empty or not (see above), and returns the calls with
// their real workspaces and each one's workspace buffer.
func (m *Model) buildSuperset(p *prepared, sc Options) (*schedule.Program, []convCall, []int32, error) {
	ws := wsFor(sc)
	prog, calls, err := m.build(p, sc, func(c schedule.ConvCall) int64 { return max(ws.Workspace(c), 1) })
	if err != nil {
		return nil, nil, nil, err
	}
	for i := range calls {
		calls[i].ws = ws.Workspace(calls[i].call)
	}
	wsBuf, ok := workspaceBuffers(prog, calls)
	if !ok {
		panic("onnxmem: a convolution's workspace buffer is missing from its program")
	}
	return prog, calls, wsBuf, nil
}

// find returns the class of a key, made most recently used, or nil. The
// caller holds c.mu.
func (c *classCache) find(key string) *class {
	for i, cl := range c.classes {
		if cl.key == key {
			c.classes = append(append(c.classes[:i:i], c.classes[i+1:]...), cl)
			return cl
		}
	}
	return nil
}

// lookup returns the program last returned for a class when it was at
// batch n, and the class's template; either may be nil.
func (c *classCache) lookup(key string, n int64) (*schedule.Program, *template) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.find(key); cl != nil {
		if cl.last != nil && cl.lastBatch == n {
			return cl.last, cl.tmpl
		}
		if n == 1 && cl.one != nil {
			return cl.one, cl.tmpl
		}
		return nil, cl.tmpl
	}
	return nil, nil
}

// remember keeps prog as the program last returned for a class, at batch n.
func (c *classCache) remember(key string, n int64, prog *schedule.Program) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.findOrAdd(key)
	cl.last, cl.lastBatch = prog, n
	if n == 1 {
		cl.one = prog
	}
}

// findOrAdd returns the class of a key, made most recently used, adding it
// (and dropping the least recently used beyond maxClasses) when it is new.
// The caller holds c.mu.
func (c *classCache) findOrAdd(key string) *class {
	cl := c.find(key)
	if cl == nil {
		cl = &class{key: key}
		if len(c.classes) == maxClasses {
			c.classes = c.classes[1:]
		}
		c.classes = append(c.classes, cl)
	}
	return cl
}

// add keeps a build of a class; the third distinct batch makes the
// template, or marks the class as one that does not scale.
func (c *classCache) add(key string, pt classPoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.findOrAdd(key)
	if cl.tmpl != nil || cl.fixed || slices.ContainsFunc(cl.points, func(q classPoint) bool { return q.batch == pt.batch }) {
		return
	}
	cl.points = append(cl.points, pt)
	if len(cl.points) < 3 {
		return
	}
	if cl.tmpl = fit(cl.points); cl.tmpl != nil {
		cl.points = nil
		return
	}
	// Slide the window: the oldest build goes.
	cl.misses++
	cl.points = slices.Delete(cl.points, 0, 1)
	if cl.fixed = cl.misses == maxMisses; cl.fixed {
		cl.points = nil
	}
}

// fit makes the template of three builds, or returns nil when they differ
// in anything but sizes or when a size is not linear in the batch.
func fit(pts []classPoint) *template {
	a, b, z := pts[0], pts[1], pts[2]
	if !sameStructure(a, b) || !sameStructure(a, z) || !slices.Equal(a.wsBuf, b.wsBuf) || !slices.Equal(a.wsBuf, z.wsBuf) {
		return nil
	}
	t := &template{prog: a.prog, calls: a.calls}
	for i, cc := range a.calls {
		nk, nc, ok := line(a.batch, cc.call.N, b.batch, b.calls[i].call.N, z.batch, z.calls[i].call.N)
		if !ok {
			return nil
		}
		t.nk, t.nc = append(t.nk, nk), append(t.nc, nc)
	}
	t.wsBuf = a.wsBuf
	type shapeKey struct {
		call   schedule.ConvCall
		nk, nc int64
	}
	shapes := make(map[shapeKey]int32)
	for i, cc := range a.calls {
		k := shapeKey{cc.call, t.nk[i], t.nc[i]}
		k.call.Which, k.call.N = "", 0
		g, ok := shapes[k]
		if !ok {
			g = int32(len(t.shapes))
			shapes[k] = g
			t.shapes = append(t.shapes, int32(i))
		}
		t.shape = append(t.shape, g)
	}
	ws := make([]bool, len(a.prog.Buffers))
	t.wsCall = make([]int32, len(a.prog.Buffers))
	for i := range t.wsCall {
		t.wsCall[i] = -1
	}
	for c, b := range a.wsBuf {
		ws[b] = true
		t.wsCall[b] = int32(c)
	}
	t.k, t.c = make([]int64, len(a.prog.Buffers)), make([]int64, len(a.prog.Buffers))
	for i := range a.prog.Buffers {
		if ws[i] {
			continue
		}
		k, c, ok := line(a.batch, a.prog.Buffers[i].Bytes, b.batch, b.prog.Buffers[i].Bytes, z.batch, z.prog.Buffers[i].Bytes)
		if !ok {
			return nil
		}
		t.k[i], t.c[i] = k, c
	}
	return t
}

// line returns k and c with y = k·x + c through the three points, if there
// are such integers.
func line(x0, y0, x1, y1, x2, y2 int64) (k, c int64, ok bool) {
	if (y1-y0)%(x1-x0) != 0 {
		return 0, 0, false
	}
	k = (y1 - y0) / (x1 - x0)
	c = y0 - k*x0
	return k, c, k*x2+c == y2
}

// sameStructure reports whether two builds of a class have the same events,
// buffers and convolution calls but for sizes and batch dims.
func sameStructure(a, b classPoint) bool {
	p, q := a.prog, b.prog
	if p.Input != q.Input || p.ForwardEnd != q.ForwardEnd || p.BackwardStart != q.BackwardStart ||
		p.OptStep != q.OptStep || p.OptStepEnd != q.OptStepEnd ||
		p.BackwardEnd != q.BackwardEnd || p.StepEnd != q.StepEnd || len(p.Buffers) != len(q.Buffers) ||
		!slices.Equal(p.Events, q.Events) || !slices.Equal(p.Resident, q.Resident) ||
		!slices.Equal(p.ParamGrads, q.ParamGrads) || !slices.Equal(p.LayerEnds, q.LayerEnds) || len(a.calls) != len(b.calls) ||
		!slices.Equal(p.PrevPred, q.PrevPred) || !slices.Equal(p.PrevPredFrom, q.PrevPredFrom) ||
		!slices.Equal(p.Persistent, q.Persistent) || !slices.Equal(p.PersistentAt, q.PersistentAt) || !slices.Equal(p.ResidentRoles, q.ResidentRoles) ||
		!slices.Equal(p.StateOrder, q.StateOrder) || !slices.Equal(p.StateAt, q.StateAt) ||
		!slices.Equal(p.ResidentBuffer, q.ResidentBuffer) || !slices.Equal(p.ResidentOff, q.ResidentOff) || !slices.Equal(p.OffGraph, q.OffGraph) {
		return false
	}
	for i := range p.Buffers {
		x, y := p.Buffers[i], q.Buffers[i]
		if x.Kind != y.Kind || x.Value != y.Value || x.Node != y.Node {
			return false
		}
	}
	for i := range a.calls {
		x, y := a.calls[i], b.calls[i]
		x.call.N, y.call.N = 0, 0
		if x.call != y.call {
			return false
		}
	}
	return true
}

// at returns the class's program at batch n with the workspaces of wp, or
// nil when a size overflows.
// The events of a program depend on the batch only through which calls
// have an empty workspace, so the trimmed programs' events, kept by that
// pattern (skeleton), are shared by the programs derived with it; each
// derived program has buffers of its own.
func (t *template) at(n int64, wp wsPolicy) *schedule.Program {
	// The table's row of each shape, looked up once for the calls that
	// share it (a conv's forward, its two backward calls, its recompute).
	rows := make([]cudnn.Row, len(t.shapes))
	found := make([]bool, len(t.shapes))
	ns := make([]int64, len(t.shapes)) // the shape's batch dim: its calls share its line
	for g, i := range t.shapes {
		call := t.calls[i].call
		var ok bool
		if call.N, ok = affine(t.nk[i], n, t.nc[i]); !ok {
			return nil
		}
		ns[g] = call.N
		rows[g], found[g] = workspaces.Lookup(call)
	}
	ws := make([]int64, len(t.calls))
	key := make([]uint64, (len(t.calls)+63)/64)
	for i, cc := range t.calls {
		g := t.shape[i]
		call := cc.call
		call.N = ns[g]
		ws[i] = wp.WorkspaceOf(call, rows[g], found[g])
		if ws[i] == 0 {
			key[i/64] |= 1 << (i % 64)
		}
	}
	sk := t.skeleton(key, ws)
	q := *sk.prog
	q.Calls = make([]schedule.ConvCall, 0, len(t.prog.Calls))
	for i, cc := range t.calls {
		if !schedule.IsReduction(cc.call.Which) {
			call := cc.call
			call.N = ns[t.shape[i]]
			q.Calls = append(q.Calls, call)
		}
	}
	q.Buffers = make([]schedule.Buffer, len(sk.src))
	for j, i := range sk.src {
		b := t.prog.Buffers[i]
		if c := t.wsCall[i]; c >= 0 {
			b.Bytes = ws[c]
		} else {
			v, ok := affine(t.k[i], n, t.c[i])
			if !ok {
				return nil
			}
			b.Bytes = v
		}
		q.Buffers[j] = b
	}
	return &q
}

// skeleton is a template's trimmed program for one pattern of empty
// workspaces (key: bit i for call i), its buffers' sizes aside; src maps
// each of its buffers to the template's.
type skeleton struct {
	key  []uint64
	prog *schedule.Program
	src  []int32
}

// maxSkeletons bounds the skeletons a template keeps; the least recently
// used goes first.
const maxSkeletons = 8

// skeleton returns the skeleton of key, kept or made by trimming the
// template's program with the workspaces ws (key's pattern).
func (t *template) skeleton(key []uint64, ws []int64) *skeleton {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, sk := range t.skels {
		if slices.Equal(sk.key, key) {
			t.skels = append(append(t.skels[:i:i], t.skels[i+1:]...), sk)
			return sk
		}
	}
	p := *t.prog
	p.Buffers = slices.Clone(t.prog.Buffers)
	calls := slices.Clone(t.calls)
	drop := make([]bool, len(p.Buffers))
	for i := range calls {
		calls[i].ws = ws[i]
		drop[t.wsBuf[i]] = ws[i] == 0
	}
	sk := &skeleton{key: key, prog: trim(&p, calls, t.wsBuf)}
	for i := range p.Buffers {
		if !drop[i] {
			sk.src = append(sk.src, int32(i))
		}
	}
	if len(t.skels) == maxSkeletons {
		t.skels = t.skels[1:]
	}
	t.skels = append(t.skels, sk)
	return sk
}

// workspaceBuffers returns the workspace buffer of each call of a build
// that gave every call one: the k-th call made the k-th workspace buffer
// that is neither resident nor made once (those are cuBLAS's).
func workspaceBuffers(p *schedule.Program, calls []convCall) ([]int32, bool) {
	resident := make([]bool, len(p.Buffers))
	for _, r := range p.Resident {
		resident[r] = true
	}
	for _, r := range p.Persistent {
		resident[r] = true
	}
	out := make([]int32, 0, len(calls))
	next := 0
	for range calls {
		for next < len(p.Buffers) && (p.Buffers[next].Kind != schedule.Workspace || resident[next]) {
			next++
		}
		if next == len(p.Buffers) {
			return nil, false
		}
		out = append(out, int32(next))
		next++
	}
	return out, true
}

// trim returns the program of a build that gave every call a workspace,
// with each call's real workspace: the empty ones' buffers and events taken
// out, the other buffers and the event indices renumbered, as a build that
// allocated nothing for them made it. p's sizes are those of its batch.
func trim(p *schedule.Program, calls []convCall, wsBuf []int32) *schedule.Program {
	drop := make([]bool, len(p.Buffers))
	for i, cc := range calls {
		if cc.ws > 0 {
			p.Buffers[wsBuf[i]].Bytes = cc.ws
		} else {
			drop[wsBuf[i]] = true
		}
	}
	q := *p
	q.Shapes = nil
	idx := make([]int32, len(p.Buffers))
	q.Buffers = make([]schedule.Buffer, 0, len(p.Buffers))
	for i, b := range p.Buffers {
		idx[i] = -1
		if !drop[i] {
			idx[i] = int32(len(q.Buffers))
			q.Buffers = append(q.Buffers, b)
		}
	}
	// kept[i] is the number of events kept before event i.
	kept := make([]int, len(p.Events)+1)
	q.Events = make([]schedule.Event, 0, len(p.Events))
	for i, e := range p.Events {
		kept[i] = len(q.Events)
		if !drop[e.Buf] {
			e.Buf = idx[e.Buf]
			q.Events = append(q.Events, e)
		}
	}
	kept[len(p.Events)] = len(q.Events)
	renumber := func(bufs []int32) []int32 {
		out := make([]int32, len(bufs))
		for i, b := range bufs {
			out[i] = idx[b]
		}
		return out
	}
	q.Resident, q.ParamGrads = renumber(p.Resident), renumber(p.ParamGrads)
	q.PrevPred, q.PrevPredFrom = renumber(p.PrevPred), renumber(p.PrevPredFrom)
	q.Persistent, q.StateOrder = renumber(p.Persistent), renumber(p.StateOrder)
	q.PersistentAt = make([]int, len(p.PersistentAt))
	for i, at := range p.PersistentAt {
		q.PersistentAt[i] = kept[at]
	}
	q.StateAt = make([]int, len(p.StateAt))
	for i, at := range p.StateAt {
		q.StateAt[i] = kept[at]
	}
	if p.Input >= 0 {
		q.Input = idx[p.Input]
	}
	q.ForwardEnd, q.BackwardStart, q.BackwardEnd, q.StepEnd = kept[p.ForwardEnd], kept[p.BackwardStart], kept[p.BackwardEnd], kept[p.StepEnd]
	q.OptStep, q.OptStepEnd = kept[p.OptStep], kept[p.OptStepEnd]
	q.LayerEnds = slices.Clone(p.LayerEnds)
	for i := range q.LayerEnds {
		q.LayerEnds[i].Event = kept[q.LayerEnds[i].Event]
	}
	return &q
}

// affine returns k·n + c, or false when it overflows or is negative.
func affine(k, n, c int64) (int64, bool) {
	if k < 0 || n < 0 || c < -(1<<62) || c > 1<<62 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(k), uint64(n))
	if hi != 0 || lo > 1<<62 {
		return 0, false
	}
	v := int64(lo) + c
	return v, v >= 0
}
