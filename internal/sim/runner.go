package sim

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/onnxmem/onnxmem/allocator"
	"github.com/onnxmem/onnxmem/family"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// A whole training run: the events of a training script, one after another
// in one process, through one caching allocator. A step's program says
// what one iteration allocates; a run strings programs together and adds
// what lies between them, as a detection trainer's loop does:
//
//	model = Model(cfg).to(device)            # setup: the parameters
//	optimizer = SGD(...)                     # no state until the first step
//	ema = ModelEMA(model)                    # a deep copy
//	model.half().float()                     # each tensor: a half copy, then a float one
//	for epoch ...:
//	    for imgs, targets in loader:         # train: one step's program
//	        imgs = imgs.to(device).float() / 255
//	        pred = model(imgs); loss = ...   # the old imgs and pred go only now
//	        ...
//	    val.run(model=ema.ema, half=amp, batch_size=2*B)  # val: ema.half(), eval programs, ema.float()
//	    ckpt = {'model': deepcopy(model).half(), 'ema': deepcopy(ema.ema).half(), ...}
//	    torch.save(ckpt, last); del ckpt     # ckpt
//
// What belongs to one script (the small tensors of its setup and its
// validation, the conversions, the validation's shapes) is its family's
// schedule.Loop.
//
// Worked example: a 9.7 M-parameter detector at batch 16 under AMP.
// Setup reserves the parameters twice (model and EMA, 38 MiB each) and a
// half copy for a moment; the first train event runs a step whose
// optimizer creates the momentum buffers inside the step, after the
// backward has freed the activations, so they come from blocks the
// activations left; later iterations differ in their box counts, so the
// loss's assigner tensors grow and shrink with the most boxes an image of
// the batch has; the val events halve the EMA in place, run the eval
// forward at twice the batch on rectangular images, keep each batch's
// outputs until the next forward returns, and return the EMA to float32 at
// new addresses.
//
// The run's figures are the allocator's after each event, and its peaks
// over the run: what the loop prints as GPU_mem after an iteration is
// RunStep.Reserved / 1e9 (RunStep.GPUMem).

// RunEvent is one event of a training run.
type RunEvent struct {
	// Kind is "setup", "train", "val" or "ckpt" (the RunEvent* constants).
	Kind string
	// BoxCounts are the ground-truth boxes of each image of a train or val
	// batch: a train batch has the scenario's batch size, a val batch
	// Batch images.
	BoxCounts []int64
	// Batch, Height and Width are a val batch's shape; train batches have
	// the scenario's.
	Batch, Height, Width int64
	// Skipped marks a train iteration whose optimizer step GradScaler
	// skipped (it found an inf or a NaN in the scaled gradients, as it
	// does in the first iterations of AMP training while its scale falls
	// from 65536): optimizer.step() does not run, so it makes no state and
	// no temporaries.
	Skipped bool
	// Omitted is how many iterations (for a val event, batches of its
	// shape) a plan left out right after this event, as repeating memory
	// that the events it kept show (thinEpoch, collapseVal); the run does
	// not replay them.
	Omitted int
}

// The kinds of run events.
const (
	RunEventSetup = "setup"
	RunEventTrain = "train"
	RunEventVal   = "val"
	RunEventCkpt  = "ckpt"
)

// RunStep is the allocator's state after one event of a run.
type RunStep struct {
	Event int
	Kind  string
	// Allocated and Reserved are the counters after the event; Peak and
	// PeakReserved their peaks during it.
	Allocated, Reserved, Peak, PeakReserved int64
}

// GPUMem is Reserved as the detection training loops print it in their
// GPU_mem column (see Result.GPUMem).
func (s RunStep) GPUMem() string { return gpuMem(s.Reserved) }

// RunResult is the simulation of a training run.
type RunResult struct {
	Scenario Options
	// Steps has one entry per event, in order; a run that ran out of
	// memory stops at the event that did.
	Steps []RunStep
	// Peak and PeakReserved are the peaks over the whole run: what
	// max_memory_allocated and max_memory_reserved say at its end.
	Peak, PeakReserved int64
	// OOM is set when the run ran out of memory under Options.Capacity,
	// at event OOMEvent.
	OOM      bool
	OOMEvent int
	// Retries counts the requests that the allocator served (or failed)
	// only after releasing its cache under Capacity (num_alloc_retries).
	Retries int64 `json:",omitempty"`
}

// Run simulates a training run of the model: sc is the training scenario
// (Train must be set; Batch, the image size, AMP, optimizer, EMA,
// checkpointing, allocator options and limit as for a train step), events
// what the run does, in order, starting with one setup. A train event's
// box counts give the batch's boxes (its loss pads every image to the
// largest); the previous iteration's outputs and batch stay alive until the
// next forward has made its own, as the loop's variables hold them; the
// optimizer's state is made by the first iteration's step that GradScaler
// does not skip: the events' Skipped marks, or when none is marked the
// first sc.WarmSteps-1 iterations (Options.WarmSteps: 3 under float16 AMP
// by default, none otherwise). A val event is
// one batch of the validation that the loop runs at an epoch end: the first
// of a row of val events also halves the copy it validates (the EMA, or the
// model without EMA) when AMP is on, and the last returns it to float32.
func (m *Model) Run(sc Options, events []RunEvent) (*RunResult, error) {
	return runPlacements(m, sc, events, allocator.TopDown, true)
}

// RunPlaced is m.Run with the segments placed one way only
// (allocator.Placement): top down, as a search's probe, cheaper by a
// replay, or with bottomUp the other way, as the check of its answer.
func RunPlaced(m *Model, sc Options, events []RunEvent, bottomUp bool) (*RunResult, error) {
	place := allocator.TopDown
	if bottomUp {
		place = allocator.BottomUp
	}
	return runPlacements(m, sc, events, place, false)
}

// runPlacements is m.Run placing the segments as place says, and under a
// limit also bottom up where that run was at the limit, when both is set.
func runPlacements(m *Model, sc Options, events []RunEvent, place allocator.Placement, both bool) (*RunResult, error) {
	if !sc.Train {
		return nil, fmt.Errorf("onnxmem: run: the scenario is not a train step: a run trains (set Train)")
	}
	if sc.EmptyCache != "" {
		return nil, fmt.Errorf("onnxmem: run: empty cache %s: a run's events say what it runs, and its training loop empties no cache; leave EmptyCache out", sc.EmptyCache)
	}
	if len(events) > MaxRunEvents {
		return nil, fmt.Errorf("onnxmem: run: %d events, more than the %d a run simulates: a run's memory repeats from its second epoch on, so a few epochs say what a long run does", len(events), MaxRunEvents)
	}
	if len(events) == 0 || events[0].Kind != RunEventSetup {
		return nil, fmt.Errorf("onnxmem: run: the events must start with one setup event")
	}
	marked := false
	for i, e := range events {
		if err := e.check(sc, i); err != nil {
			return nil, err
		}
		marked = marked || e.Skipped
	}
	if err := sc.Supported(); err != nil {
		return nil, err
	}
	// The rank's steps are a process's; DDP's own tensors are the runner's.
	world, rank, syncBN := sc.GPUs, sc.Rank, sc.SyncBN
	sc.GPUs, sc.Rank, sc.SyncBN = 0, 0, false
	if marked && sc.WarmSteps != 0 {
		return nil, fmt.Errorf("onnxmem: run: warm steps %d with events marked skipped: give the skipped iterations one way", sc.WarmSteps)
	}
	if k := sc.warmSkips(); k > 0 && !marked {
		// No event says which iterations GradScaler skipped: the first
		// ones, as Options.WarmSteps says for a step.
		events = slices.Clone(events)
		for i := range events {
			if k > 0 && events[i].Kind == RunEventTrain {
				events[i].Skipped = true
				k--
			}
		}
	}
	conf, err := sc.allocConfig()
	if err != nil {
		return nil, err
	}
	pr, err := m.forScenario(sc)
	if err != nil {
		return nil, err
	}
	loop := family.Loop(pr.fam, pr.graph)
	if loop == nil {
		return nil, fmt.Errorf("onnxmem: run: the %s family knows no training script to run: simulate its train steps instead", cmp.Or(sc.Family, m.Family))
	}
	if rank > 0 && loop.RankZeroOnly {
		sc.EMA = false // the copy is rank 0's
	}
	// Under a limit a run that fits only after releasing its cache fits
	// only when it fits whichever way cudaMalloc orders the segments
	// (allocator.Placement), as a step does (Run).
	res, err := runOnce(m, sc, events, conf, pr, loop, world, rank, syncBN, place)
	if err != nil || !both || !bothPlacements(sc) || res.OOM || res.Retries == 0 {
		return res, err // no limit, or it never touched it (atLimit)
	}
	if up, err := runOnce(m, sc, events, conf, pr, loop, world, rank, syncBN, allocator.BottomUp); err != nil || up.OOM {
		return up, err
	}
	return res, nil
}

// runOnce runs the checked events of m.Run with the allocator's segments
// placed as place says.
func runOnce(m *Model, sc Options, events []RunEvent, conf allocator.Config, pr *prepared, loop *schedule.Loop, world, rank int64, syncBN bool, place allocator.Placement) (*RunResult, error) {
	r := &runner{m: m, sc: sc.Defaults(), loop: loop, a: allocator.NewWithConfig(conf), res: &RunResult{Scenario: sc, OOMEvent: -1},
		world: world, rank: rank, fam: pr.fam}
	r.res.Scenario.GPUs, r.res.Scenario.Rank, r.res.Scenario.SyncBN = world, rank, syncBN
	recipe := family.Recipe(pr.fam, pr.graph, schedule.Optimizer(sc.Optimizer), sc.EMA, sc.Boxes)
	if loop.ValLoss != nil {
		r.loss = recipe.Loss
	}
	if w := recipe.CuBLASWorkspace; w > 0 { // the script's, for its validation too
		r.sc.CuBLASWorkspace = w
	}
	r.a.Capacity, r.a.Placement = sc.Capacity, place
	for i, e := range events {
		r.a.ResetPeaks()
		var err error
		switch e.Kind {
		case RunEventSetup:
			err = r.setup()
		case RunEventTrain:
			err = r.train(e)
		case RunEventVal:
			if !r.idle() {
				err = r.val(e, i+1 == len(events) || events[i+1].Kind != RunEventVal, i == 0 || events[i-1].Kind != RunEventVal)
			}
		case RunEventCkpt:
			if !r.idle() {
				r.ckpt()
			}
		}
		if err != nil {
			return nil, err
		}
		st := r.a.Stats()
		r.res.Steps = append(r.res.Steps, RunStep{Event: i, Kind: e.Kind, Allocated: st.Allocated, Reserved: st.Reserved,
			Peak: st.PeakAllocated, PeakReserved: st.PeakReserved})
		r.res.Peak = max(r.res.Peak, st.PeakAllocated)
		r.res.PeakReserved = max(r.res.PeakReserved, st.PeakReserved)
		if r.oom {
			r.res.OOM, r.res.OOMEvent = true, i
			break
		}
	}
	r.res.Retries = r.a.Stats().Retries
	return r.res, nil
}

// check returns why an event cannot be run in a run of sc, or nil.
func (e RunEvent) check(sc Options, i int) error {
	switch e.Kind {
	case RunEventSetup:
		if i != 0 {
			return fmt.Errorf("onnxmem: run: event %d: setup comes once, first", i)
		}
	case RunEventTrain:
		if e.Skipped && !sc.AMP {
			return fmt.Errorf("onnxmem: run: event %d: a skipped step is GradScaler's, which skips only under AMP", i)
		}
		if e.Batch != 0 || e.Height != 0 || e.Width != 0 {
			return fmt.Errorf("onnxmem: run: event %d: a train batch has the scenario's shape: leave batch and image out", i)
		}
		if e.BoxCounts != nil && (len(e.BoxCounts) == 0 || int64(len(e.BoxCounts)) > sc.Batch) {
			return fmt.Errorf("onnxmem: run: event %d: %d box counts for a batch of %d: give one count for each image (fewer for an epoch's short last batch)", i, len(e.BoxCounts), sc.Batch)
		}
	case RunEventVal:
		if e.Skipped {
			return fmt.Errorf("onnxmem: run: event %d: only a train event's optimizer step can be skipped", i)
		}
		if e.Batch < 1 || e.Height < 1 || e.Width < 1 {
			return fmt.Errorf("onnxmem: run: event %d: a val batch needs its batch size and image height and width", i)
		}
		if e.BoxCounts != nil && int64(len(e.BoxCounts)) != e.Batch {
			return fmt.Errorf("onnxmem: run: event %d: %d box counts for a val batch of %d: give one count for each image", i, len(e.BoxCounts), e.Batch)
		}
	case RunEventCkpt:
		if e.Batch != 0 || e.Height != 0 || e.Width != 0 || e.BoxCounts != nil || e.Skipped {
			return fmt.Errorf("onnxmem: run: event %d: a ckpt event takes no fields", i)
		}
	default:
		return fmt.Errorf("onnxmem: run: event %d: unknown kind %q: want setup, train, val or ckpt", i, e.Kind)
	}
	if e.BoxCounts != nil && slices.Min(e.BoxCounts) < 0 {
		return fmt.Errorf("onnxmem: run: event %d: box count %d: counts must be 0 or more", i, slices.Min(e.BoxCounts))
	}
	return nil
}

// runner holds a run's allocator and the tensors that outlive an event.
type runner struct {
	m    *Model
	sc   Options
	loop *schedule.Loop
	loss schedule.Loss // the training loss, for a validation that computes it
	a    *allocator.Allocator
	res  *RunResult
	oom  bool
	// world and rank are DDP's (Options.GPUs, Rank); ddp, with world 1
	// or more, what DDP keeps.
	world, rank int64
	ddp         *ddp
	fam         family.Family

	ref *schedule.Program // a train step's program: the resident layout
	// The persistent tensors, by their place among the program's resident
	// buffers of each role.
	model, copy, scalars, state []allocator.ID
	ws                          allocator.ID
	hasWS, stepped, halved      bool
	once                        []allocator.ID // Program.Persistent, by position
	small                       []allocator.ID // the loop's tiny tensors
	// What the loop's variables hold from the last iteration or val batch.
	prevOut  []allocator.ID // pred, as Program.PrevPredFrom
	prevImgs allocator.ID
	hasImgs  bool
	valOut   []allocator.ID // the last val batch's outputs
	valHeld  []allocator.ID // the last val batch's input and targets
	head     []allocator.ID // the eval head's anchors of the last val batch
	valSmall []allocator.ID // run()'s own tensors (iouv, loss)
}

func (r *runner) malloc(n int64) allocator.ID {
	if r.oom {
		return -1
	}
	id, err := r.a.TryMalloc(n)
	if err != nil {
		r.oom = true
		return -1
	}
	return id
}

func (r *runner) free(id allocator.ID) {
	if !r.oom && id >= 0 {
		r.a.Free(id)
	}
}

// idle reports whether the runner's rank skips what the script does on
// rank 0 only: validation and the checkpoint save.
func (r *runner) idle() bool { return r.rank > 0 && r.loop.RankZeroOnly }

// trainScenario is the step of the run's iterations with these box counts.
func (r *runner) trainScenario(counts []int64) Options {
	sc := r.sc
	sc.PrevPredAlive = true
	if counts != nil { // an epoch's last batch may be short
		sc.BoxCounts, sc.Boxes, sc.Batch = counts, 0, int64(len(counts))
	}
	return sc
}

// residents returns the resident buffers of p with role ro, in order.
func residents(p *schedule.Program, ro schedule.Role) []int32 {
	var out []int32
	for i, b := range p.Resident {
		if p.ResidentRoles[i] == ro {
			out = append(out, b)
		}
	}
	return out
}

// deepcopy allocates a copy.deepcopy of the resident tensors of p with the
// role, in order: each clone, and beside a buffer's the 0-d tensor that
// Tensor.__deepcopy__ makes and drops (zeroDim).
func (r *runner) deepcopy(p *schedule.Program, ro schedule.Role) []allocator.ID {
	var ids []allocator.ID
	for i, b := range p.Resident {
		if p.ResidentRoles[i] != ro {
			continue
		}
		ids = append(ids, r.malloc(p.Buffers[b].Bytes))
		if n := zeroDimBytes(p, i); n > 0 {
			r.free(r.malloc(n))
		}
	}
	return ids
}

// convert replaces each float tensor of ids (the model's buffers of p with
// the role, in order) by a copy with elements of size bytes, as
// module.half() (2) and module.float() (4) do: the new tensor is made,
// then the old one freed.
func (r *runner) convert(p *schedule.Program, ro schedule.Role, ids []allocator.ID, size int64) {
	k := 0
	for j, b := range p.Resident {
		if p.ResidentRoles[j] != ro {
			continue
		}
		i := k
		k++
		buf := p.Buffers[b]
		elems := int64(0)
		switch {
		case p.ResidentOff[j] > 0:
			elems = p.OffGraph[p.ResidentOff[j]-1].Elems // float32 when loaded
		case buf.Value == ir.NoValue:
			continue // num_batches_tracked, an int64
		case p.Graph.Values[buf.Value].DType.IsFloat():
			elems = buf.Bytes / p.Graph.Values[buf.Value].DType.Size()
		default:
			continue
		}
		id := r.malloc(elems * size)
		r.free(ids[i])
		ids[i] = id
	}
}

// setup makes the model, the EMA copy and the loop's tiny tensors.
func (r *runner) setup() error {
	p, err := r.m.program(r.trainScenario(nil))
	if err != nil {
		return err
	}
	r.ref = p
	if r.world > 0 {
		if r.ddp, err = newDDP(p, p.OffGraph); err != nil {
			return err
		}
		if r.loop.SetupBarriers > 0 {
			r.barrier() // before the model
		}
	}
	for _, b := range residents(p, schedule.RoleModel) {
		r.model = append(r.model, r.malloc(p.Buffers[b].Bytes))
	}
	r.copy = r.deepcopy(p, schedule.RoleCopy)
	if r.ddp != nil {
		for range r.loop.SetupBarriers - 1 {
			r.barrier() // after the copy
		}
	}
	if r.loop.HalfFloatAtSetup && !r.idle() {
		r.convert(p, schedule.RoleModel, r.model, 2)
		r.convert(p, schedule.RoleModel, r.model, 4)
	}
	if r.ddp != nil {
		r.wrap()
	}
	for _, n := range r.loop.SetupTensors {
		r.small = append(r.small, r.malloc(n))
	}
	return nil
}

// mapResident gives the resident buffers of p the run's tensors of their
// roles, by position.
func (r *runner) mapResident(p *schedule.Program, ids []allocator.ID, copyIDs []allocator.ID) error {
	pos := map[schedule.Role]int{}
	for i, b := range p.Resident {
		ro := p.ResidentRoles[i]
		j := pos[ro]
		pos[ro]++
		var list []allocator.ID
		switch ro {
		case schedule.RoleModel:
			list = r.model
		case schedule.RoleCopy:
			list = copyIDs
		case schedule.RoleScalar:
			list = r.scalars
		case schedule.RoleState:
			list = r.state
		case schedule.RoleWorkspace:
			if r.hasWS {
				ids[b] = r.ws
			}
			continue
		case schedule.RoleHead, schedule.RoleInput:
			continue
		}
		if j < len(list) {
			ids[b] = list[j]
		}
	}
	if pos[schedule.RoleModel] != len(r.model) {
		return fmt.Errorf("onnxmem: run: a step's program holds %d model tensors, the run %d: a broken invariant of the schedule", pos[schedule.RoleModel], len(r.model))
	}
	return nil
}

// train runs one iteration.
func (r *runner) train(e RunEvent) error {
	p, err := r.m.program(r.trainScenario(e.BoxCounts))
	if err != nil {
		return err
	}
	ids := make([]allocator.ID, len(p.Buffers))
	for i := range ids {
		ids[i] = -1
	}
	if err := r.mapResident(p, ids, r.copy); err != nil {
		return err
	}
	// The previous iteration's pred becomes this step's PrevPred.
	if len(r.prevOut) == len(p.PrevPred) {
		for i, b := range p.PrevPred {
			ids[b] = r.prevOut[i]
		}
	}
	x := p.Graph.Inputs[0]
	inputFree := -1
	if p.StepEnd < len(p.Events) {
		if ev := p.Events[p.StepEnd]; ev.Free && p.Buffers[ev.Buf].Value == x && p.Buffers[ev.Buf].Kind == schedule.Input {
			inputFree = p.StepEnd
		}
	}
	firstLoss := true
	fwd := -1 // the forward's first op, where DDP's _pre_forward runs before
	if r.ddp != nil {
		for i, ev := range p.Events {
			if ev.Phase == schedule.Forward && ev.Node >= 0 {
				fwd = i
				break
			}
		}
	}
	once, state := 0, 0
	states := slices.Clone(p.StateOrder)
	stateIDs := map[int32]allocator.ID{}
	for i, ev := range p.Events {
		if i == fwd {
			r.preForward()
		}
		if r.ddp != nil && i == p.ForwardEnd && r.ddp.forwards == 1 {
			r.sinkOutputs(p, ids)
		}
		if e.Skipped && i >= p.OptStep && i < p.OptStepEnd {
			continue
		}
		for ; !r.stepped && !e.Skipped && state < len(p.StateAt) && p.StateAt[state] <= i; state++ {
			stateIDs[states[state]] = r.malloc(p.Buffers[states[state]].Bytes)
		}
		for ; once < len(p.Persistent) && p.PersistentAt[once] <= i; once++ {
			if once >= len(r.once) {
				r.once = append(r.once, r.malloc(p.Buffers[p.Persistent[once]].Bytes))
			}
		}
		if ev.Phase == schedule.LossPhase && firstLoss {
			firstLoss = false
			// The loss's first matrix product makes the cuBLAS workspace
			// (the forward has none).
			if !r.hasWS {
				if ws := residents(p, schedule.RoleWorkspace); len(ws) > 0 {
					r.ws, r.hasWS = r.malloc(p.Buffers[ws[0]].Bytes), true
					ids[ws[0]] = r.ws
				}
			}
		}
		if ev.Phase == schedule.Backward && r.scalars == nil {
			for _, b := range residents(p, schedule.RoleScalar) {
				id := r.malloc(p.Buffers[b].Bytes)
				r.scalars = append(r.scalars, id)
				ids[b] = id
			}
		}
		switch {
		case ev.Free && i == inputFree:
			// imgs stays bound until the next iteration's batch is made.
			r.prevImgs, r.hasImgs = ids[ev.Buf], true
			continue
		case ev.Free:
			if id := ids[ev.Buf]; id >= 0 {
				r.free(id)
			}
		default:
			ids[ev.Buf] = r.malloc(p.Buffers[ev.Buf].Bytes)
			if b := p.Buffers[ev.Buf]; b.Kind == schedule.Input && b.Value == x && r.hasImgs {
				r.free(r.prevImgs)
				r.hasImgs = false
			}
		}
		if r.oom {
			return nil
		}
	}
	for ; once < len(p.Persistent); once++ {
		if once >= len(r.once) {
			r.once = append(r.once, r.malloc(p.Buffers[p.Persistent[once]].Bytes))
		}
	}
	if !r.stepped && !e.Skipped {
		for ; state < len(states); state++ {
			stateIDs[states[state]] = r.malloc(p.Buffers[states[state]].Bytes)
		}
		for _, b := range residents(p, schedule.RoleState) {
			r.state = append(r.state, stateIDs[b])
		}
		r.stepped = true
	}
	r.prevOut = r.prevOut[:0]
	for _, b := range p.PrevPredFrom {
		r.prevOut = append(r.prevOut, ids[b])
	}
	return nil
}

// val runs one batch of validation; first and last say whether it opens
// or closes a row of val events (val_dual.run's preamble and return).
func (r *runner) val(e RunEvent, last, first bool) error {
	if r.ref == nil {
		return fmt.Errorf("onnxmem: run: a val event before setup")
	}
	copyRole, copyIDs := schedule.RoleCopy, r.copy
	if !r.sc.EMA {
		copyRole, copyIDs = schedule.RoleModel, r.model
	}
	half := r.sc.AMP
	if first {
		if half {
			r.convert(r.ref, copyRole, copyIDs, 2)
		}
		for _, n := range r.loop.ValTensors {
			r.valSmall = append(r.valSmall, r.malloc(n))
		}
	}
	sc := Options{Batch: e.Batch, Height: e.Height, Width: e.Width, Eval: true, EvalFloat: !half,
		CuBLASWorkspace: r.sc.CuBLASWorkspace, Family: r.sc.Family, AllocConf: r.sc.AllocConf}
	p, err := r.m.program(sc)
	if err != nil {
		return err
	}
	ids := make([]allocator.ID, len(p.Buffers))
	for i := range ids {
		ids[i] = -1
	}
	// The eval program's model is the training model, its copy the one
	// validated; with EMA that is the EMA, else the model itself.
	evalCopy := copyIDs
	if err := r.mapResident(p, ids, evalCopy); err != nil {
		return err
	}
	// im = im.to(device); targets = targets.to(device); im = im.half()
	elemSize := int64(2)
	if !half {
		elemSize = 4
	}
	u8 := r.malloc(p.Buffers[p.Input].Bytes / elemSize)
	var boxes int64
	for _, c := range e.BoxCounts {
		boxes += c
	}
	targets := r.malloc(boxes * 6 * 4)
	for _, id := range r.valHeld {
		r.free(id)
	}
	if p.Input >= 0 {
		ids[p.Input] = r.malloc(p.Buffers[p.Input].Bytes)
	}
	r.free(u8)
	// The head's anchors and strides for this shape replace the last ones.
	var head []allocator.ID
	for _, b := range residents(p, schedule.RoleHead) {
		id := r.malloc(p.Buffers[b].Bytes)
		ids[b] = id
		head = append(head, id)
	}
	for _, id := range r.head {
		r.free(id)
	}
	r.head = head
	inputFree := -1
	if p.StepEnd < len(p.Events) {
		if ev := p.Events[p.StepEnd]; ev.Free && ev.Buf == p.Input {
			inputFree = p.StepEnd
		}
	}
	// The forward's outputs (the raw maps that the loop binds to
	// train_out) stay bound until the next batch's forward returns.
	isOut := make(map[ir.ValueID]bool, len(p.Graph.Outputs))
	for _, v := range p.Graph.Outputs {
		isOut[v] = true
	}
	var outs []allocator.ID
	for i, ev := range p.Events {
		switch {
		case ev.Free && i == inputFree:
			continue // im stays bound until the next batch
		case ev.Free && ev.Phase == schedule.Cleanup && isOut[p.Buffers[ev.Buf].Value]:
			outs = append(outs, ids[ev.Buf])
			continue
		case ev.Free:
			r.free(ids[ev.Buf])
		default:
			ids[ev.Buf] = r.malloc(p.Buffers[ev.Buf].Bytes)
		}
		if i+1 == p.ForwardEnd {
			for _, id := range r.valOut {
				r.free(id)
			}
			r.valOut = nil
			if r.loss != nil && r.loop.ValLoss(p.Outputs) {
				r.loss.Forward(runTape{r}, schedule.LossInput{Batch: e.Batch, Outputs: p.Outputs,
					Boxes: slices.Max(append([]int64{0}, e.BoxCounts...)), BoxCounts: e.BoxCounts, Validation: true})
			}
		}
		if r.oom {
			return nil
		}
	}
	r.valOut = outs
	r.valHeld = []allocator.ID{targets}
	if p.Input >= 0 {
		r.valHeld = append(r.valHeld, ids[p.Input])
	}
	if last {
		// run() returns: its locals go, and the copy is float32 again.
		for _, id := range append(append(append(r.valHeld, r.valOut...), r.valSmall...), r.head...) {
			r.free(id)
		}
		r.valHeld, r.valOut, r.valSmall, r.head = nil, nil, nil, nil
		if half {
			r.convert(r.ref, copyRole, copyIDs, 4)
		}
	}
	return nil
}

// runTape records a loss's allocations on the run's allocator.
type runTape struct{ r *runner }

func (t runTape) Alloc(bytes int64, what string) schedule.Buf { return schedule.Buf(t.r.malloc(bytes)) }
func (t runTape) Free(b schedule.Buf)                         { t.r.free(allocator.ID(b)) }

// ckpt saves the checkpoint: half deep copies of the model and the EMA,
// which torch.save writes from the device and del ckpt frees.
func (r *runner) ckpt() {
	p := r.ref
	copies := [][]allocator.ID{}
	for _, ro := range []schedule.Role{schedule.RoleModel, schedule.RoleCopy} {
		ids := r.deepcopy(p, ro)
		if len(ids) == 0 {
			continue
		}
		r.convert(p, ro, ids, 2)
		copies = append(copies, ids)
	}
	for _, ids := range copies {
		for _, id := range ids {
			r.free(id)
		}
	}
}

// MaxRunEvents is the most events a run may have: each train event replays
// a whole step, so this bounds a run's time to minutes.
const MaxRunEvents = 20000

// maxRunBatch and maxMeanBoxes bound a planned run's batch and its mean box
// count, whose per-image counts PlanRun draws: far beyond any device.
const (
	maxRunBatch  = 1 << 16
	maxMeanBoxes = 1 << 16
)

// RunPlan describes a synthetic training run, for PlanRun: Epochs epochs of Iterations train iterations at
// Batch, each epoch followed by its validation (ValImages images in
// batches of twice Batch, the last one smaller when it does not divide)
// and a checkpoint save.
type RunPlan struct {
	Epochs, Iterations int
	Batch              int64
	// Height and Width are the training image's; validation letterboxes to
	// rectangles of its larger side.
	Height, Width int64
	ValImages     int64
	// MeanBoxes is the mean of the per-image box counts, which follow a
	// geometric distribution: many images with few boxes, a few with many,
	// like COCO's (mean 7.3). Seed makes the counts.
	MeanBoxes float64
	Seed      uint64
	// TrainBoxes, when set, draws the box counts of every image of every
	// iteration of an epoch, as a dataset's sampler does (Iterations, when
	// not 0, takes the first so many); ValBatches, when set, are the
	// validation's batches (kind RunEventVal) in place of ValImages'.
	TrainBoxes func(rng *rand.Rand) [][]int64
	ValBatches []RunEvent
}

// valShapes are the aspect ratios (height to width) of the validation
// batches that PlanRun cycles through: landscape 4:3 and 3:2, square and
// portrait 4:3, the commonest among photographs such as COCO's.
var valShapes = [][2]int64{{3, 4}, {2, 3}, {1, 1}, {4, 3}}

// PlanRand is the stream a plan of seed draws its box counts from, the
// same for every plan of that seed.
func PlanRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x6f6e6e786d656d)) }

// planDataRun returns the events of a plan whose iterations and
// validation batches come from a dataset: each epoch a fresh draw of
// TrainBoxes, then ValBatches, then a ckpt.
func (m *Model) planDataRun(p RunPlan) ([]RunEvent, error) {
	rng := PlanRand(p.Seed)
	events := []RunEvent{{Kind: RunEventSetup}}
	for range p.Epochs {
		if p.TrainBoxes != nil {
			iters := p.TrainBoxes(rng)
			if p.Iterations > 0 {
				iters = iters[:min(len(iters), p.Iterations)]
			}
			events = append(events, thinEpoch(iters)...)
		}
		for _, v := range p.ValBatches {
			if v.Kind != RunEventVal || v.Batch < 1 || v.Height < 1 || v.Width < 1 {
				return nil, fmt.Errorf("onnxmem: plan run: validation batch %+v: want a val event of at least one image", v)
			}
		}
		events = append(events, collapseVal(p.ValBatches)...)
		events = append(events, RunEvent{Kind: RunEventCkpt})
		if len(events) > MaxRunEvents {
			return nil, fmt.Errorf("onnxmem: plan run: %d epochs of the dataset are more than the %d events a run simulates: a run's memory repeats from its second epoch on, so one or two epochs say what a long run does", p.Epochs, MaxRunEvents)
		}
	}
	return events, nil
}

// firstIterations and densestIterations are how many of an epoch's first
// iterations, and of its densest, a plan keeps of an epoch longer than
// keptEpoch; and valShapesKept the validation batches above which a plan
// keeps one batch of each run of a shape.
const (
	firstIterations   = 32
	densestIterations = 64
	keptEpoch         = 4 * (firstIterations + densestIterations)
	valShapesKept     = 64
)

// thinEpoch returns the train events of an epoch of iterations, each the
// box counts of its images. An epoch longer than keptEpoch keeps its
// first firstIterations (where the allocator's cache settles), each that
// is denser than every one before it (the most boxes an image of the batch
// carries sizes the loss's assigner: a new most makes new blocks, and
// reserved memory grows), the densestIterations densest (the earlier of
// equals) and its last (a short batch has block sizes of its own), in
// their order; each kept event counts the iterations left out after it
// (Omitted).
//
// Worked example: COCO's 118,287 training images at batch 16 are 7,393
// iterations an epoch; the plan keeps some 110 of them, and the run's
// peaks, which follow its densest batches, are the whole epoch's: two
// detectors at batch 8 and 16 under AMP on the built-in COCO-like data
// peak within 0.1% of the whole epoch's allocated and at its reserved
// exactly (docs/limitations.md; onnxmem's TestThinnedRun checks one).
func thinEpoch(iters [][]int64) []RunEvent {
	if len(iters) <= keptEpoch {
		events := make([]RunEvent, len(iters))
		for i, counts := range iters {
			events[i] = RunEvent{Kind: RunEventTrain, BoxCounts: counts}
		}
		return events
	}
	densest := func(counts []int64) int64 { return slices.Max(append([]int64{0}, counts...)) }
	keep := make([]bool, len(iters))
	most := int64(-1)
	for i, counts := range iters {
		if d := densest(counts); d > most || i < firstIterations || i == len(iters)-1 {
			keep[i], most = true, max(most, d)
		}
	}
	order := make([]int, len(iters))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(densest(iters[b]), densest(iters[a])) })
	for _, i := range order[:densestIterations] {
		keep[i] = true
	}
	var events []RunEvent
	for i, counts := range iters {
		if keep[i] {
			events = append(events, RunEvent{Kind: RunEventTrain, BoxCounts: counts})
		} else {
			events[len(events)-1].Omitted++
		}
	}
	return events
}

// collapseVal returns the validation batches of an epoch; more than
// valShapesKept of them keep one batch of each run of equal batch size and
// shape (the dataloader sorts the images by aspect ratio, so a shape's
// batches come together), the one with the densest image, the others
// counted in its Omitted: a batch that repeats the one before it replays
// its allocations from the cache, with the same peak.
func collapseVal(vals []RunEvent) []RunEvent {
	if len(vals) <= valShapesKept {
		return vals
	}
	var out []RunEvent
	densest := func(e RunEvent) int64 { return slices.Max(append([]int64{0}, e.BoxCounts...)) }
	for _, v := range vals {
		if n := len(out); n > 0 && out[n-1].Batch == v.Batch && out[n-1].Height == v.Height && out[n-1].Width == v.Width {
			omitted := out[n-1].Omitted + 1
			if densest(v) > densest(out[n-1]) {
				out[n-1] = v
			}
			out[n-1].Omitted = omitted
			continue
		}
		out = append(out, v)
	}
	return out
}

// PlanRun returns the events of a plan: a setup, then per epoch its train
// events, its val events (in the shapes that the model family's
// validation gives images of common aspect ratios) and a ckpt.
func (m *Model) PlanRun(p RunPlan) ([]RunEvent, error) {
	switch {
	case p.Epochs < 1 || p.Iterations < 0 || p.ValImages < 0:
		return nil, fmt.Errorf("onnxmem: plan run: %d epochs of %d iterations, %d validation images: want at least one epoch and no negative count", p.Epochs, p.Iterations, p.ValImages)
	case p.Batch < 1 || p.Batch > maxRunBatch:
		return nil, fmt.Errorf("onnxmem: plan run: batch %d: want 1 to %d", p.Batch, maxRunBatch)
	case !(p.MeanBoxes >= 0) || p.MeanBoxes > maxMeanBoxes:
		return nil, fmt.Errorf("onnxmem: plan run: %g boxes an image on average: want 0 to %d", p.MeanBoxes, maxMeanBoxes)
	}
	if p.TrainBoxes != nil || p.ValBatches != nil {
		return m.planDataRun(p)
	}
	// Each factor is bounded before the product, so that it cannot wrap.
	valBatches := p.ValImages/(2*p.Batch) + min(1, p.ValImages%(2*p.Batch))
	if p.Epochs > MaxRunEvents || p.Iterations > MaxRunEvents || valBatches > MaxRunEvents ||
		1+int64(p.Epochs)*(int64(p.Iterations)+valBatches+1) > MaxRunEvents {
		return nil, fmt.Errorf("onnxmem: plan run: %d epochs of %d iterations and %d validation batches are more than the %d events a run simulates: a run's memory repeats from its second epoch on, so a few epochs say what a long run does", p.Epochs, p.Iterations, valBatches, MaxRunEvents)
	}
	pr, err := m.prepare(m.Family)
	if err != nil {
		return nil, err
	}
	loop := family.Loop(pr.fam, pr.graph)
	if loop == nil {
		return nil, fmt.Errorf("onnxmem: plan run: the %s family knows no training script to run", m.Family)
	}
	rng := PlanRand(p.Seed)
	counts := func(n int64) []int64 {
		c := make([]int64, n)
		for i := range c {
			// Geometric on 0, 1, 2, ... with mean MeanBoxes.
			q := p.MeanBoxes / (1 + p.MeanBoxes)
			if q > 0 {
				c[i] = int64(math.Floor(math.Log(1-rng.Float64()) / math.Log(q)))
			}
		}
		return c
	}
	side := max(p.Height, p.Width)
	events := []RunEvent{{Kind: RunEventSetup}}
	for range p.Epochs {
		for range p.Iterations {
			events = append(events, RunEvent{Kind: RunEventTrain, BoxCounts: counts(p.Batch)})
		}
		for i, left := 0, p.ValImages; left > 0; i++ {
			n := min(left, 2*p.Batch)
			left -= n
			r := valShapes[i%len(valShapes)]
			h, w := loop.ValShape(side, r[0], r[1])
			events = append(events, RunEvent{Kind: RunEventVal, Batch: n, Height: h, Width: w, BoxCounts: counts(n)})
		}
		events = append(events, RunEvent{Kind: RunEventCkpt})
	}
	return events, nil
}
