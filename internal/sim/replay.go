package sim

import (
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/onnxmem/onnxmem/allocator"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/liveness"
	"github.com/onnxmem/onnxmem/schedule"
)

// Run replays a step's program through the simulated caching allocator the
// way the measurement harness runs it: load the parameters (of a train
// step also the EMA copy, but not the optimizer's state), empty the cache
// (but with EmptyCacheNever), run one warm-up step (which makes the cuBLAS
// workspaces that stay and, in its optimizer.step(), the optimizer's state,
// as torch.optim makes it lazily: in the segments that the warm-up's
// activations left free), empty the cache again where sc.EmptyCache says (the
// warm-up's .grad tensors still alive), then free the warm-up's .grad
// buffers, allocate the input and measure the next step. p must be a
// program that schedule.Build
// made: Run panics on one whose events are not balanced, a broken invariant,
// and on a scenario whose allocator options Supported refuses.
//
// Under a limit (Options.Capacity) a step that fits only after the
// allocator released its cache and retried (atLimit) fits only when it fits
// whichever way cudaMalloc orders the segments' addresses (allocator.
// Placement), which decides which of several free blocks of one size a
// request gets: Run replays it with each new segment below the earlier
// ones and, when that fits at the limit, again with each above them, and
// returns the replay that ran out, if one did (calibration §29: a
// validation that fits at two more batches in the first order only runs
// out on the device where the second order does).
func Run(p *schedule.Program, sc Options) *Result {
	r := runPlaced(p, sc, allocator.TopDown)
	if atLimit(sc, r) {
		if up := runPlaced(p, sc, allocator.BottomUp); !up.Fits() {
			return up
		}
	}
	return r
}

// runPlaced is Run with the segments placed as place says only.
func runPlaced(p *schedule.Program, sc Options, place allocator.Placement) *Result {
	s := scratches.Get().(*scratch)
	defer scratches.Put(s)
	r, _ := runInto(s, p, sc, nil, nil, false, place, nil)
	return r
}

// Sample is the allocator's state after one event of the measured step.
type Sample struct {
	// Event indexes Program.Events.
	Event int
	Phase string
	// Allocated, Requested and Reserved are the counters after the event.
	Allocated, Requested, Reserved int64
	// Live is the bytes of the buffers alive after the event, each its
	// request rounded to the allocator's 512-byte blocks, from the liveness
	// analysis of the step. Allocated less Live is what blocks that the
	// allocator did not split hold beyond their requests.
	Live int64
}

// Timeline simulates a scenario like Simulate and also returns the
// allocator's counters and the live bytes after every event of the measured
// step, for plots of memory over time.
func (m *Model) Timeline(sc Options) (*Result, []Sample, error) {
	p, err := m.program(sc)
	if err != nil {
		return nil, nil, err
	}
	samples := make([]Sample, 0, len(p.Events))
	r, an := run(p, sc, nil, func(i int, st allocator.Stats) {
		samples = append(samples, Sample{Event: i, Phase: p.Events[i].Phase.String(),
			Allocated: st.Allocated, Requested: st.Requested, Reserved: st.Reserved})
	})
	for i := range samples {
		samples[i].Live = an.LiveBytes(samples[i].Event)
	}
	return r, samples, nil
}

// allocators keeps simulated allocators for reuse: a replay makes tens of
// thousands of blocks, and a reset allocator has room for them.
var allocators = sync.Pool{New: func() any { return allocator.New() }}

// scratch is the memory of one replay's liveness analysis, kept for the
// next: a Result does not refer to it.
type scratch struct {
	an      liveness.Analysis
	ev      []liveness.Event
	initial []int32
	ids     []allocator.ID
	live    []bool
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// run replays p as Run says, calling begin with the allocator just before
// the measured step and observe after each of its events, and returns the
// Result with the liveness analysis of the step: under a limit, of the
// placement that runs out of memory where one does (as Run answers).
func run(p *schedule.Program, sc Options, begin func(*allocator.Allocator), observe func(int, allocator.Stats)) (*Result, *liveness.Analysis) {
	return runInto(new(scratch), p, sc, begin, observe, true, placementOf(p, sc), nil)
}

// runRecorded is run with each new cudaMalloc segment at the address that
// recorded gives, a device recording's (allocator.Allocator.SegmentAddr),
// the residents loaded afresh: it tells a reserved peak that differs
// because the driver placed the segments elsewhere from one that differs
// because the events do (calibration §35).
func runRecorded(p *schedule.Program, sc Options, recorded func(size int64) (int64, bool)) *Result {
	r, _ := runInto(new(scratch), p, sc, nil, nil, false, allocator.TopDown, recorded)
	return r
}

// placementOf returns the placement whose replay Run answers with: TopDown,
// or under a limit BottomUp when only that one runs out of memory.
func placementOf(p *schedule.Program, sc Options) allocator.Placement {
	if atLimit(sc, runPlaced(p, sc, allocator.TopDown)) && !runPlaced(p, sc, allocator.BottomUp).Fits() {
		return allocator.BottomUp
	}
	return allocator.TopDown
}

// atLimit reports whether r, sc's replay placed top down, fitted under its
// limit only after the allocator released its cache and retried a request
// (num_alloc_retries): a step at the limit, where the segments' placement
// decides, and so one that fits only when it fits placed bottom up too. A
// step that never touched the limit fits either way (the 23 capped trials
// of calibration §29 all answer so).
func atLimit(sc Options, r *Result) bool {
	return r.Fits() && r.Retries > 0 && bothPlacements(sc)
}

// bothPlacements reports whether sc's replay under its limit depends on the
// placement of the segments: with cudaMalloc's segments, not with
// expandable segments, which map pages into one address range.
func bothPlacements(sc Options) bool {
	if sc.Capacity <= 0 {
		return false
	}
	conf, err := sc.allocConfig()
	return err == nil && !conf.ExpandableSegments
}

// runInto is run with its memory taken from s and the allocator's segments
// placed as place says, or where recorded puts them when it is not nil
// (runRecorded). It returns the liveness analysis of the step only when
// analyze is set; the Result does not need it.
func runInto(s *scratch, p *schedule.Program, sc Options, begin func(*allocator.Allocator), observe func(int, allocator.Stats), analyze bool, place allocator.Placement, recorded func(int64) (int64, bool)) (*Result, *liveness.Analysis) {
	how, err := replayOf(sc, p)
	if err != nil {
		panic(fmt.Sprintf("onnxmem: Run of a scenario that Supported refuses: %v", err))
	}
	a := allocators.Get().(*allocator.Allocator)
	defer allocators.Put(a)
	a.Reset(how.conf)
	a.Capacity, a.Placement, a.SegmentAddr = how.capacity, place, recorded
	ps := session{rp: replayer{a: a}, mode: how.mode, skips: how.skips}
	ids := s.ids[:0]
	ids = append(ids, make([]allocator.ID, len(p.Buffers))...)
	s.ids = ids
	ps.warmUp(p, how.conf, how.capacity, ids)
	r, an := s.measure(p, sc, how.conf, &ps.rp, ids, begin, observe, analyze)
	r.Retries = a.Stats().Retries
	return r, an
}

// replay is a scenario decoded once for the allocator's replay of its
// program: its allocator options and limit, the warm-up iterations whose
// optimizer step GradScaler skips, and where the harness empties the
// cache.
type replay struct {
	conf     allocator.Config
	capacity int64
	skips    int
	mode     EmptyCache
}

// replayOf decodes sc, whose program is p, for its replay.
func replayOf(sc Options, p *schedule.Program) (replay, error) {
	conf, err := sc.allocConfig()
	return replay{conf: conf, capacity: sc.Capacity, skips: sc.warmSkips(), mode: emptyCacheOf(sc, p)}, err
}

// emptyCacheOf returns where the harness empties the cache for sc's step,
// whose program is p: sc.EmptyCache when given; for a train step
// EmptyCacheWarmUp, as a training loop runs its steps; for the others the
// harness of the model family's reference measurements (Program.Harness),
// or, for a program that names none (one that schedule.Build made for
// another caller), EmptyCacheStep.
func emptyCacheOf(sc Options, p *schedule.Program) EmptyCache {
	switch {
	case sc.EmptyCache != "":
		return sc.EmptyCache
	case sc.Train:
		return EmptyCacheWarmUp
	case p.Harness != "":
		return EmptyCache(p.Harness)
	}
	return EmptyCacheStep
}

// session is what a simulated process keeps from one scenario to the next:
// its allocator, the parameters, and the last measured step's gradients.
type session struct {
	rp   replayer
	mode EmptyCache // Options.EmptyCache, its default set
	// res are the resident tensors' allocations, by index of
	// Program.Resident, once the first scenario has loaded them.
	res   []allocator.ID
	grads []allocator.ID // the .grad tensors the last measured step left
	// skips is the number of warm-up steps whose optimizer step
	// GradScaler skipped before the one that makes the optimizer's state.
	skips int
}

// warmUp runs a scenario of the process up to its measured step, as Run
// says: the first one loads the parameters; each empties the cache (but
// with EmptyCacheNever) and runs the warm-up, whose zero_grad drops the
// last step's gradients and which makes the workspaces that stay
// (Program.Persistent) and the optimizer's state (Program.StateOrder) the first
// time the process runs one, after the iterations whose optimizer step
// GradScaler skips (skips of them, Options.WarmSteps); then it empties the
// cache again with EmptyCacheStep, frees the warm-up's gradients and
// allocates the measured step's input. ids receives q's allocations.
func (ps *session) warmUp(q *schedule.Program, conf allocator.Config, capacity int64, ids []allocator.ID) {
	rp := &ps.rp
	empty := func() {
		if !rp.oom {
			rp.a.EmptyCache()
		}
	}
	first := ps.res == nil
	if first {
		// The cache is emptied after loading unless the harness never
		// empties it.
		rp.oom = residentsInto(rp.a, q, conf, capacity, ids, ps.mode != EmptyCacheNever)
	} else {
		for i, buf := range q.Resident {
			ids[buf] = ps.res[i]
		}
		if ps.mode != EmptyCacheNever {
			empty()
		}
	}
	for _, id := range ps.grads {
		rp.free(id)
	}
	ps.grads = ps.grads[:0]
	// The outputs of the step before the warm-up are alive until its
	// forward.
	for _, buf := range q.PrevPred {
		rp.malloc(q, ids, buf)
	}
	if q.Input >= 0 {
		rp.malloc(q, ids, q.Input)
	}
	// The iterations whose optimizer step GradScaler skips, then the one
	// that makes the optimizer's state; after each, the next one's batch,
	// and its PrevPred are the outputs this one made.
	for k := 0; k <= ps.skips; k++ {
		last := k == ps.skips
		rp.step(q, ids, first && k == 0, first && last, !last)
		for i, buf := range q.PrevPred {
			ids[buf] = ids[q.PrevPredFrom[i]]
		}
		if last && ps.mode == EmptyCacheStep {
			empty()
		}
		for _, buf := range q.ParamGrads {
			rp.free(ids[buf])
		}
		if q.Input >= 0 {
			rp.malloc(q, ids, q.Input)
		}
	}
	if first {
		ps.res = make([]allocator.ID, len(q.Resident))
		for i, buf := range q.Resident {
			ps.res[i] = ids[buf]
		}
	}
}

// ended records what q's measured step, run over ids, leaves to the next
// scenario: its gradients, alive until the next warm-up's zero_grad; the
// harness drops its outputs.
func (ps *session) ended(q *schedule.Program, ids []allocator.ID) {
	for _, buf := range q.ParamGrads {
		ps.grads = append(ps.grads, ids[buf])
	}
	for _, buf := range q.PrevPredFrom {
		ps.rp.free(ids[buf])
	}
}

// measure runs p's measured step over ids from the allocator's state rp
// leaves (the step's input allocated) and returns its Result, with the
// liveness analysis of the step when analyze is set; begin and observe are
// run's. It leaves rp.oom set when the step ran out of memory.
func (s *scratch) measure(p *schedule.Program, sc Options, conf allocator.Config, rp *replayer, ids []allocator.ID, begin func(*allocator.Allocator), observe func(int, allocator.Stats), analyze bool) (*Result, *liveness.Analysis) {
	a := rp.a
	r := &Result{Scenario: sc, Events: len(p.Events), PeakLayer: -1, PeakEvent: -1}
	r.M0 = a.Allocated()
	a.ResetPeaks()
	if begin != nil {
		begin(a)
		defer func() { a.Observe = nil }()
	}
	// Walk the step event by event to find where the peak falls.
	peakAt := -1
	best := r.M0
	for i := 0; i < len(p.Events); i++ {
		e := p.Events[i]
		if observe == nil && !rp.oom && isTransient(p, i) && i+1 != p.ForwardEnd && i+1 != p.StepEnd {
			held := rp.transient(p, e.Buf)
			if cur := a.Allocated() + held; !rp.oom && cur > best {
				best, peakAt = cur, i
			}
			i++ // the free, after which allocated is as it was
		} else {
			if e.Free {
				rp.free(ids[e.Buf])
			} else {
				rp.malloc(p, ids, e.Buf)
			}
			if observe != nil {
				observe(i, a.Stats())
			}
			if cur := a.Allocated(); cur > best {
				best, peakAt = cur, i
			}
		}
		switch i + 1 {
		case p.ForwardEnd:
			r.AfterForward = a.Allocated()
			r.ForwardPeak = a.Stats().PeakAllocated
		case p.StepEnd:
			r.AfterBackward = a.Allocated()
		}
	}
	st := a.Stats()
	r.Peak, r.PeakRequested, r.PeakReserved, r.OOM = st.PeakAllocated, st.PeakRequested, st.PeakReserved, rp.oom
	r.ReservedAfter = st.Reserved
	r.FellBack = len(rp.fellBack)
	if peakAt >= 0 {
		e := p.Events[peakAt]
		r.PeakEvent = peakAt
		r.PeakPhase = e.Phase.String()
		if e.Node >= 0 {
			n := &p.Graph.Nodes[e.Node]
			r.PeakNode, r.PeakLayer = n.Name, n.Layer
		}
		r.AtPeak, r.PeakByKind = atPeak(p, s.liveAt(p, peakAt), conf)
	}
	if !analyze {
		return r, nil
	}
	return r, s.analyze(p, conf)
}

// liveAt returns, by buffer, whether it is alive just after event at of
// the measured step: the buffers alive before the step (initialLive) and
// those its events have allocated and not yet freed.
func (s *scratch) liveAt(p *schedule.Program, at int) []bool {
	live := s.live[:0]
	live = append(live, make([]bool, len(p.Buffers))...)
	s.live = live
	for _, b := range s.initialLive(p) {
		live[b] = true
	}
	for _, e := range p.Events[:at+1] {
		live[e.Buf] = !e.Free
	}
	return live
}

// loadResidents allocates p's resident buffers on a as the harness loads
// them, in order, and sets ids[buf] to each one's allocation. The model's
// copy (RoleCopy, after the model's own buffers, in the same order) is
// copy.deepcopy(model): a clone of every tensor first, and for each buffer
// (a plain tensor, not a Parameter) Tensor.__deepcopy__'s 0-d new_empty of
// its type, made after the clone and dropped at once (calibration §29's
// traces); when the copy is
// smaller (the eval step's copy.deepcopy(model).eval().half()), .half()
// then converts each floating tensor in turn, in Module._apply's order,
// allocating the half tensor before it frees the clone, and an integer one
// (num_batches_tracked) stays as it was cloned. With lazyState it leaves
// out the optimizer's state (RoleState), which a training loop's first
// optimizer.step() makes (Program.StateOrder). It returns the allocator's
// error when it runs out of memory, having allocated what fitted.
func loadResidents(a *allocator.Allocator, p *schedule.Program, ids []allocator.ID, lazyState bool) error {
	if p.ResidentLoad != nil {
		return loadHalved(a, p, ids, lazyState)
	}
	var model, copied []int32
	for i, buf := range p.Resident {
		switch p.ResidentRoles[i] {
		case schedule.RoleModel:
			model = append(model, buf)
		case schedule.RoleCopy:
			copied = append(copied, buf)
		}
	}
	converted := false
	if len(copied) == len(model) {
		for j, buf := range copied {
			converted = converted || p.Buffers[buf].Bytes < p.Buffers[model[j]].Bytes
		}
	}
	for i := 0; i < len(p.Resident); i++ {
		if lazyState && p.ResidentRoles[i] == schedule.RoleState {
			continue
		}
		if p.ResidentRoles[i] != schedule.RoleCopy || !converted {
			id, err := a.TryMalloc(p.Buffers[p.Resident[i]].Bytes)
			if err != nil {
				return err
			}
			ids[p.Resident[i]] = id
			if p.ResidentRoles[i] == schedule.RoleCopy {
				if err := zeroDim(a, p, i); err != nil {
					return err
				}
			}
			continue
		}
		// The whole copy, from here.
		clones := make([]allocator.ID, len(copied))
		for j := range copied {
			var err error
			if clones[j], err = a.TryMalloc(p.Buffers[model[j]].Bytes); err != nil {
				return err
			}
			if err := zeroDim(a, p, i+j); err != nil {
				return err
			}
		}
		for j, buf := range copied {
			if p.Buffers[buf].Bytes == p.Buffers[model[j]].Bytes {
				ids[buf] = clones[j]
				continue
			}
			id, err := a.TryMalloc(p.Buffers[buf].Bytes)
			if err != nil {
				return err
			}
			ids[buf] = id
			a.Free(clones[j])
		}
		i += len(copied) - 1
	}
	return nil
}

// zeroDim makes and drops the 0-d tensor that Tensor.__deepcopy__ makes
// (self.new_empty([]), whose storage it then replaces with the clone's)
// when resident i, a copy's tensor, is a buffer or a plain tensor: a block
// of its element's size (num_batches_tracked's 8 bytes where a buffer has
// no graph value).
func zeroDim(a *allocator.Allocator, p *schedule.Program, i int) error {
	if n := zeroDimBytes(p, i); n > 0 {
		_, err := a.Transient(n)
		return err
	}
	return nil
}

// zeroDimBytes returns the bytes of zeroDim's 0-d tensor for resident i,
// or 0 when it is a Parameter, which deepcopy clones without one.
func zeroDimBytes(p *schedule.Program, i int) int64 {
	if !p.ResidentBuffer[i] {
		return 0
	}
	switch v := p.Buffers[p.Resident[i]].Value; {
	case p.ResidentOff[i] > 0:
		return 4 // an off-graph float32 tensor
	case v != ir.NoValue:
		return int64(p.Graph.Values[v].DType.Size())
	}
	return 8 // num_batches_tracked
}

// loadHalved loads p's residents as model.to('cuda').half() makes them:
// each at its loaded (float32) bytes, in order, then each one that is
// smaller now converted in turn, its half tensor allocated before its
// float32 one is freed (Module._apply).
func loadHalved(a *allocator.Allocator, p *schedule.Program, ids []allocator.ID, lazyState bool) error {
	lazy := func(i int) bool { return lazyState && p.ResidentRoles[i] == schedule.RoleState }
	for i, buf := range p.Resident {
		if lazy(i) {
			continue
		}
		id, err := a.TryMalloc(p.ResidentLoad[i])
		if err != nil {
			return err
		}
		ids[buf] = id
	}
	for i, buf := range p.Resident {
		if lazy(i) || p.Buffers[buf].Bytes == p.ResidentLoad[i] {
			continue
		}
		id, err := a.TryMalloc(p.Buffers[buf].Bytes)
		if err != nil {
			return err
		}
		a.Free(ids[buf])
		ids[buf] = id
	}
	return nil
}

// analyze returns the liveness of the measured step: its events over the
// program's buffers, with the resident buffers, the input and the warm-up's
// workspaces live before the first event, each buffer its request rounded
// to the allocator's blocks.
func (s *scratch) analyze(p *schedule.Program, conf allocator.Config) *liveness.Analysis {
	ev := s.ev[:0]
	for _, e := range p.Events {
		ev = append(ev, liveness.Event{Buf: e.Buf, Free: e.Free})
	}
	s.ev = ev
	initial := s.initialLive(p)
	size := func(b int32) int64 { return conf.RoundSize(p.Buffers[b].Bytes) }
	if err := liveness.AnalyzeInto(&s.an, ev, len(p.Buffers), initial, size); err != nil {
		panic(fmt.Sprintf("onnxmem: schedule built a broken program: %v", err))
	}
	return &s.an
}

// initialLive returns the buffers alive before the measured step's first
// event: the residents, the input, the previous step's outputs and the
// warm-up's workspaces that stay, in s's memory.
func (s *scratch) initialLive(p *schedule.Program) []int32 {
	initial := append(s.initial[:0], p.Resident...)
	if p.Input >= 0 {
		initial = append(initial, p.Input)
	}
	initial = append(initial, p.PrevPred...)
	initial = append(initial, p.Persistent...)
	s.initial = initial
	return initial
}

// atPeak lists the buffers that live marks (those alive after the peak's
// event, from scratch.liveAt): the MaxAtPeak largest, largest first, then
// in buffer order; and the live bytes of every kind, each buffer its
// request rounded to the allocator's blocks, as the liveness analysis of
// the step sizes it.
func atPeak(p *schedule.Program, live []bool, conf allocator.Config) ([]Tensor, []KindBytes) {
	// Bytes and counts by kind, in the order kinds are first met: a slot
	// per named kind and one for the rest, all of which print "unknown".
	const slots = schedule.NumKinds + 1
	var bytes [slots]int64
	var count [slots]int
	var order []int
	size := func(b int32) int64 { return conf.RoundSize(p.Buffers[b].Bytes) }
	// The MaxAtPeak largest, largest first and then in buffer order, as
	// liveness.Analysis.Largest orders them; sizes[i] is largest[i]'s.
	var largest []int32
	var sizes []int64
	for b, ok := range live {
		if !ok {
			continue
		}
		id, sz := int32(b), size(int32(b))
		k := int(p.Buffers[b].Kind)
		if k >= schedule.NumKinds {
			k = slots - 1
		}
		if count[k] == 0 {
			order = append(order, k)
		}
		bytes[k] += sz
		count[k]++
		// An equal size goes after: the IDs rise.
		if len(largest) == MaxAtPeak && sz <= sizes[MaxAtPeak-1] {
			continue
		}
		j := len(largest)
		if j < MaxAtPeak {
			largest, sizes = append(largest, id), append(sizes, sz)
		} else {
			j = MaxAtPeak - 1
		}
		for j > 0 && sz > sizes[j-1] {
			largest[j], sizes[j] = largest[j-1], sizes[j-1]
			j--
		}
		largest[j], sizes[j] = id, sz
	}
	kinds := make([]KindBytes, 0, len(order))
	for _, k := range order {
		kinds = append(kinds, KindBytes{Kind: schedule.Kind(k).String(), Bytes: bytes[k], Count: count[k]})
	}
	sort.SliceStable(kinds, func(i, j int) bool { return kinds[i].Bytes > kinds[j].Bytes })
	out := make([]Tensor, 0, len(largest))
	for _, b := range largest {
		buf := p.Buffers[b]
		t := Tensor{Kind: buf.Kind.String(), Bytes: size(b), Requested: buf.Bytes}
		if buf.Value >= 0 {
			t.Name = p.Graph.Values[buf.Value].Name
		} else {
			t.Name = buf.Kind.String()
		}
		if buf.Node >= 0 {
			t.Node = p.Graph.Nodes[buf.Node].Name
		}
		out = append(out, t)
	}
	return out, kinds
}

// residentState is the allocator just after a program's resident buffers
// were loaded and the cache emptied, as every replay of the program starts:
// the same for every program with the same resident sizes, roles, allocator
// options and limit (the scenarios of a sweep over batch sizes, precisions
// and checkpoint segments), so replays copy it instead of loading the
// residents again.
type residentState struct {
	conf     allocator.Config
	place    allocator.Placement
	capacity int64
	emptied  bool // the cache emptied after loading
	lazy     bool // the optimizer's state left out (loadResidents)
	sizes    []int64
	roles    []schedule.Role
	load     []int64 // Program.ResidentLoad
	buffer   []bool  // Program.ResidentBuffer
	off      []int   // Program.ResidentOff
	a        *allocator.Allocator
	ids      []allocator.ID // by index of Program.Resident
	oom      bool
}

// maxResidentStates bounds the resident states kept; the least recently
// used goes first.
const maxResidentStates = 8

var residentStates struct {
	mu     sync.Mutex
	states []*residentState // least recently used first
}

// residentsInto sets a to the state of an allocator with conf and capacity
// after loadResidents(p), and EmptyCache when emptied is set, and ids[buf]
// for each resident buffer, and reports whether loading ran out of memory.
func residentsInto(a *allocator.Allocator, p *schedule.Program, conf allocator.Config, capacity int64, ids []allocator.ID, emptied bool) bool {
	if a.SegmentAddr != nil {
		// The kept states' segments lie where the simulation put them.
		oom := loadResidents(a, p, ids, len(p.StateOrder) > 0) != nil
		if emptied {
			a.EmptyCache()
		}
		return oom
	}
	st := residentStateOf(p, conf, capacity, emptied, a.Placement)
	a.CopyFrom(st.a)
	for i, buf := range p.Resident {
		ids[buf] = st.ids[i]
	}
	return st.oom
}

// residentStateOf returns the resident state of p, kept or made.
func residentStateOf(p *schedule.Program, conf allocator.Config, capacity int64, emptied bool, place allocator.Placement) *residentState {
	lazy := len(p.StateOrder) > 0
	same := func(st *residentState) bool {
		if st.conf != conf || st.place != place || st.emptied != emptied || st.lazy != lazy || st.capacity != capacity || len(st.sizes) != len(p.Resident) || !slices.Equal(st.roles, p.ResidentRoles) ||
			!slices.Equal(st.load, p.ResidentLoad) || !slices.Equal(st.buffer, p.ResidentBuffer) || !slices.Equal(st.off, p.ResidentOff) {
			return false
		}
		for i, buf := range p.Resident {
			if st.sizes[i] != p.Buffers[buf].Bytes {
				return false
			}
		}
		return true
	}
	rs := &residentStates
	rs.mu.Lock()
	for i, st := range rs.states {
		if same(st) {
			rs.states = append(append(rs.states[:i:i], rs.states[i+1:]...), st)
			rs.mu.Unlock()
			return st
		}
	}
	rs.mu.Unlock()
	st := &residentState{conf: conf, place: place, capacity: capacity, emptied: emptied, lazy: lazy, roles: slices.Clone(p.ResidentRoles), load: slices.Clone(p.ResidentLoad),
		buffer: slices.Clone(p.ResidentBuffer), off: slices.Clone(p.ResidentOff), a: allocator.New()}
	st.a.Reset(conf)
	st.a.Capacity, st.a.Placement = capacity, place
	ids := make([]allocator.ID, len(p.Buffers))
	st.oom = loadResidents(st.a, p, ids, lazy) != nil
	if emptied {
		st.a.EmptyCache()
	}
	for _, buf := range p.Resident {
		st.sizes = append(st.sizes, p.Buffers[buf].Bytes)
		st.ids = append(st.ids, ids[buf])
	}
	rs.mu.Lock()
	if len(rs.states) == maxResidentStates {
		rs.states = rs.states[1:]
	}
	rs.states = append(rs.states, st)
	rs.mu.Unlock()
	return st
}

// replayer runs steps through an allocator until the first request that it
// cannot serve, after which it does nothing.
type replayer struct {
	a   *allocator.Allocator
	oom bool
	// fellBack holds the cuDNN convolution calls (Phase zeroed: the shape
	// cuDNN caches a plan for) whose workspace the allocator could not
	// serve, even after releasing its cache. Conv_v8.cpp's run_single_conv
	// catches that out-of-memory error and tries the next engine config
	// (try_configs: the other heuristic configs, then the fallback list),
	// and caches the first that runs for the shape, so every later call of
	// the shape in the process runs it too. Which engine that is depends on
	// the card and the memory left; the replay takes one that needs no
	// workspace, as the fallback list always holds: the call's smallest
	// need.
	fellBack map[schedule.ConvCall]bool
}

// noID is the ID of a workspace that its call did without.
const noID allocator.ID = -1

// call returns the cuDNN convolution call whose workspace q's buffer buf
// is, with its Phase zeroed, or false for any other buffer.
func call(q *schedule.Program, buf int32) (schedule.ConvCall, bool) {
	i := q.Buffers[buf].Call
	if i == 0 {
		return schedule.ConvCall{}, false
	}
	c := q.Calls[i-1]
	c.Phase = 0
	return c, true
}

// skips reports whether q's buffer buf is the workspace of a call that
// fell back before, which takes none now.
func (rp *replayer) skips(q *schedule.Program, buf int32) bool {
	if rp.fellBack == nil {
		return false
	}
	c, ok := call(q, buf)
	return ok && rp.fellBack[c]
}

// fallBack records that the workspace in q's buffer buf could not be had:
// true when it is a convolution's, whose call then falls back (fellBack);
// false when the replay has run out of memory.
func (rp *replayer) fallBack(q *schedule.Program, buf int32) bool {
	c, ok := call(q, buf)
	if !ok {
		return false
	}
	if rp.fellBack == nil {
		rp.fellBack = make(map[schedule.ConvCall]bool)
	}
	rp.fellBack[c] = true
	return true
}

// malloc allocates q's buffer buf and records it in ids (noID for a
// workspace that its call does without).
func (rp *replayer) malloc(q *schedule.Program, ids []allocator.ID, buf int32) {
	if rp.oom {
		return
	}
	if rp.skips(q, buf) {
		ids[buf] = noID
		return
	}
	id, err := rp.a.TryMalloc(q.Buffers[buf].Bytes)
	if err != nil {
		if rp.fallBack(q, buf) {
			ids[buf] = noID
			return
		}
		rp.oom = true
		return
	}
	ids[buf] = id
}

// transient serves q's buffer buf, which the next event frees, as
// Allocator.Transient, and returns the bytes it held (none for a
// workspace that its call does without).
func (rp *replayer) transient(q *schedule.Program, buf int32) int64 {
	if rp.oom || rp.skips(q, buf) {
		return 0
	}
	held, err := rp.a.Transient(q.Buffers[buf].Bytes)
	if err != nil {
		if !rp.fallBack(q, buf) {
			rp.oom = true
		}
		return 0
	}
	return held
}

// free frees an allocation.
func (rp *replayer) free(id allocator.ID) {
	if !rp.oom && id != noID {
		rp.a.Free(id)
	}
}

// step runs q's events over ids, making, each just before its event, the
// workspaces that stay (Program.Persistent) with once, as a process's first step
// that uses them does, and the optimizer's state (Program.StateOrder) with
// state, as the first step that GradScaler does not skip does. With
// skipped it replays an iteration whose optimizer step GradScaler skipped:
// without the events of optimizer.step(), and without freeing a buffer
// that those events would have made, as Model.Run does.
func (rp *replayer) step(q *schedule.Program, ids []allocator.ID, once, state, skipped bool) {
	next, end, st, states := 0, 0, 0, 0
	if once {
		end = len(q.Persistent)
	}
	if state && !skipped {
		states = len(q.StateOrder)
	}
	// made marks, in a skipped iteration, the buffers that it holds.
	var made []bool
	if skipped {
		made = make([]bool, len(q.Buffers))
		if q.Input >= 0 {
			made[q.Input] = true
		}
		for _, b := range q.PrevPred {
			made[b] = true
		}
	}
	// due reports whether something is made before event i.
	due := func(i int) bool {
		return next < end && q.PersistentAt[next] <= i || st < states && q.StateAt[st] <= i
	}
	for i := 0; i < len(q.Events) && !rp.oom; i++ {
		for ; next < end && q.PersistentAt[next] <= i; next++ {
			rp.malloc(q, ids, q.Persistent[next])
		}
		for ; st < states && q.StateAt[st] <= i; st++ {
			rp.malloc(q, ids, q.StateOrder[st])
		}
		if skipped && i >= q.OptStep && i < q.OptStepEnd {
			continue
		}
		e := q.Events[i]
		switch {
		case isTransient(q, i) && !due(i+1) && !(skipped && i+1 == q.OptStep):
			rp.transient(q, e.Buf)
			i++
		case e.Free:
			if made == nil || made[e.Buf] {
				rp.free(ids[e.Buf])
			}
			if made != nil {
				made[e.Buf] = false
			}
		default:
			rp.malloc(q, ids, e.Buf)
			if made != nil {
				made[e.Buf] = true
			}
		}
	}
	for ; next < end; next++ {
		rp.malloc(q, ids, q.Persistent[next])
	}
	for ; st < states; st++ {
		rp.malloc(q, ids, q.StateOrder[st])
	}
}

// isTransient reports whether event i of q allocates a buffer that event
// i+1 frees: the pair is one Allocator.Transient.
func isTransient(q *schedule.Program, i int) bool {
	e := q.Events[i]
	return !e.Free && i+1 < len(q.Events) && q.Events[i+1].Free && q.Events[i+1].Buf == e.Buf
}
