package onnxmem

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"

	"github.com/onnxmem/onnxmem/family/yolov9/dataset"
	"github.com/onnxmem/onnxmem/internal/cards"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// RunEvent is a run's "setup", "train" (an iteration, Skipped when
// GradScaler skipped its step), "val" (a batch at Batch×Height×Width) or
// "ckpt"; BoxCounts are its images' boxes; Omitted, like events left out.
type RunEvent struct {
	Kind                 string
	BoxCounts            []int64
	Batch, Height, Width int64
	Skipped              bool
	Omitted              int
}

// RunStep is the allocator's counters after an event, and their peaks.
type RunStep struct {
	Event                                   int
	Kind                                    string
	Allocated, Reserved, Peak, PeakReserved int64
}

// GPUMem is Reserved as the training loop prints it.
func (s RunStep) GPUMem() string { return gpuMem(s.Reserved) }

// RunResult is a run's counters after each event (up to OOMEvent), peaks;
// with GPUs rank 0's, the other ranks' and NCCL's bytes on each card.
type RunResult struct {
	Scenario           Scenario
	Steps              []RunStep
	Peak, PeakReserved int64
	OOM                bool
	OOMEvent           int
	Others             *RunResult
	NCCL               int64
}

// Run simulates a run of the train step sc as the family's script runs it.
func (m *Model) Run(sc Scenario, events []RunEvent) (*RunResult, error) {
	r, _, err := runEvents(m, sc, events, (*sim.Model).Run)
	return r, err
}

// runEvents is Model.Run with each rank simulated by run (sim.Model.Run, or
// sim.RunPlaced for a search's probe); it also returns the larger
// num_alloc_retries of rank 0 and the others.
func runEvents(m *Model, sc Scenario, events []RunEvent, run func(*sim.Model, sim.Options, []sim.RunEvent) (*sim.RunResult, error)) (*RunResult, int64, error) {
	switch sc.Step {
	case "":
		sc.Step = TrainStep
	case TrainStep:
	default:
		return nil, 0, fmt.Errorf("onnxmem: run: Step %s: a run trains; give TrainStep, or leave Step empty", sc.Step)
	}
	e, sc, o, err := m.decode(sc)
	if err != nil {
		return nil, 0, err
	}
	evs := make([]sim.RunEvent, len(events))
	for i, ev := range events {
		evs[i] = sim.RunEvent(ev)
	}
	out, retries, err := runRank(e, o, evs, sc, run)
	if err != nil || sc.GPUs < 1 {
		return out, retries, err
	}
	out.NCCL = cards.NCCL
	if sc.GPUs > 1 {
		o.Rank = 1 // every rank but 0 runs the same
		var others int64
		if out.Others, others, err = runRank(e, o, evs, sc, run); err != nil {
			return nil, 0, err
		}
		retries = max(retries, others)
		out.Others.NCCL = cards.NCCL
	}
	return out, retries, nil
}

// runRank simulates the run of one rank (o.Rank).
func runRank(e *sim.Model, o sim.Options, evs []sim.RunEvent, sc Scenario, run func(*sim.Model, sim.Options, []sim.RunEvent) (*sim.RunResult, error)) (*RunResult, int64, error) {
	r, err := run(e, o, evs)
	if err != nil {
		return nil, 0, err
	}
	out := &RunResult{Scenario: sc, Steps: make([]RunStep, len(r.Steps)), Peak: r.Peak, PeakReserved: r.PeakReserved,
		OOM: r.OOM, OOMEvent: r.OOMEvent}
	for i, s := range r.Steps {
		out.Steps[i] = RunStep(s)
	}
	return out, r.Retries, nil
}

// fits reports whether every rank's run ran to its end under its limit.
func (r *RunResult) fits() bool { return !r.OOM && (r.Others == nil || !r.Others.OOM) }

// RunPlan is a run of Epochs of Data (a YOLO data yaml), of MeanBoxes and
// ValImages, or of BuiltinData, rank 0's over GPUs; Seed draws it if Drawn.
// Workers (0: 8) and CloseMosaic are the script's --workers, --close-mosaic.
type RunPlan struct {
	Epochs, Iterations         int
	Batch, Height, Width       int64
	ValImages                  int64
	MeanBoxes                  float64
	Seed                       uint64
	Data                       string
	GPUs, Workers, CloseMosaic int
}

// PlanRun returns the events of a run: a setup, per epoch its iterations,
// its validation batches and the checkpoint save.
func (m *Model) PlanRun(p RunPlan) ([]RunEvent, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	d, err := p.data()
	if err != nil {
		return nil, err
	}
	return m.planRun(p, d)
}

// builtin reports whether p trains on BuiltinData.
func (p RunPlan) builtin() bool {
	return p.Data == "" && p.Iterations == 0 && p.MeanBoxes == 0 && p.ValImages == 0
}

// Drawn reports whether Seed draws p's boxes; else they are the loader's.
func (p RunPlan) Drawn() bool {
	// A data file's run on one GPU is the official dataloader's own
	// stream (dataset.Loader: its shuffle and augmentation draws
	// reproduced, draw for draw): the images of each batch and their boxes
	// follow from the data, the batch and the workers, and no seed changes
	// them. The built-in data, a synthetic run and the ranks of DDP
	// (DistributedSampler, RANK 0 on: -gpus 1 too) are drawn.
	return p.Data == "" || p.GPUs > 0
}

// check reports why p is not a plan: a field that does not apply to it.
func (p RunPlan) check() error {
	switch {
	case p.Workers < 0:
		return fmt.Errorf("onnxmem: plan run: Workers %d: want the dataloader's workers, 1 or more (0: %d); with --workers 0 the main process loads, which onnxmem does not simulate", p.Workers, dataset.DefaultWorkers)
	case p.CloseMosaic < 0:
		return fmt.Errorf("onnxmem: plan run: CloseMosaic %d: want train_dual.py's --close-mosaic, 0 or more", p.CloseMosaic)
	case (p.Workers > 0 || p.CloseMosaic > 0) && p.Drawn():
		return fmt.Errorf("onnxmem: plan run: Workers %d, CloseMosaic %d: the dataloader's settings decide the boxes of a data file's run on one GPU without DDP, which this plan is not; leave them 0", p.Workers, p.CloseMosaic)
	case p.Seed != 0 && !p.Drawn():
		return fmt.Errorf("onnxmem: plan run: Seed %d with Data %s: a data file's run on one GPU is the dataloader's own stream, which no seed changes; leave Seed 0", p.Seed, p.Data)
	}
	return nil
}

// Dataset names p's dataset: Data, BuiltinData or "" (synthetic).
func (p RunPlan) Dataset() string {
	if p.builtin() {
		return BuiltinData
	}
	return p.Data
}

// data returns the dataset p trains on, nil for a synthetic plan.
func (p RunPlan) data() (*planData, error) {
	switch {
	case p.builtin():
		cocoData.once.Do(func() { cocoData.set = dataset.COCOLike() })
		return cocoData, nil
	case p.Data == "":
		return nil, nil
	}
	// A data file is read once a process while its yaml stays as it was:
	// a search over batch sizes, or seeds, plans many runs of it.
	st, err := os.Stat(p.Data)
	if err != nil {
		return nil, fmt.Errorf("onnxmem: plan run: %w", err)
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", p.Data, st.Size(), st.ModTime().UnixNano())
	v, _ := dataFiles.LoadOrStore(key, &planData{})
	d := v.(*planData)
	d.once.Do(func() { d.set, d.err = dataset.Load(p.Data) })
	if d.err != nil {
		dataFiles.Delete(key) // a later call reads it again
		return nil, fmt.Errorf("onnxmem: plan run: %w", d.err)
	}
	return d, nil
}

// dataFiles are the data files read, each a *planData, by path and the
// yaml's size and time.
var dataFiles sync.Map

// planRun is PlanRun on the dataset d (nil: synthetic).
func (m *Model) planRun(p RunPlan, d *planData) ([]RunEvent, error) {
	e, err := m.engine()
	if err != nil {
		return nil, err
	}
	sp := sim.RunPlan{Epochs: cmp.Or(p.Epochs, DefaultEpochs), Iterations: p.Iterations, Batch: p.Batch, Height: p.Height, Width: p.Width,
		ValImages: p.ValImages, MeanBoxes: p.MeanBoxes, Seed: cmp.Or(p.Seed, DefaultSeed)}
	if d != nil {
		if err := d.plan(&sp, m.Family, cmp.Or(p.Data, BuiltinData), p); err != nil {
			return nil, err
		}
	}
	evs, err := e.PlanRun(sp)
	if err != nil {
		return nil, err
	}
	out := make([]RunEvent, len(evs))
	for i, ev := range evs {
		out[i] = RunEvent(ev)
	}
	return out, nil
}

// valStride is the stride of YOLOv9's validation batches.
const valStride = dataset.Stride

// planData is the dataset of a run plan, with each epoch's per-image box
// counts drawn once for an image size and seed (the batch size only
// groups the drawn ones, so a search over batch sizes draws them once),
// and the dataloader streams made of it (one for each batch size and
// loader setting: a search runs one stream per batch it tries).
type planData struct {
	once    sync.Once // makes set (and err)
	set     *dataset.Set
	err     error
	mu      sync.Mutex // guards epochs and loaders, not the draws in them
	epochs  map[[2]uint64]*epochDraws
	loaders map[loaderKey]*loaderEpochs
}

// epochDraws is one image size's and seed's epochs, drawn in order from
// one stream, as the engine's plan draws them.
type epochDraws struct {
	mu     sync.Mutex
	rng    *rand.Rand
	counts [][]int64
}

// loaderEpochs is the epochs of one dataloader stream, in order.
type loaderEpochs struct {
	mu     sync.Mutex
	l      *dataset.Loader
	epochs [][][]int64
}

// epoch returns the box counts of epoch e's batches.
func (le *loaderEpochs) epoch(e int) [][]int64 {
	le.mu.Lock()
	defer le.mu.Unlock()
	for len(le.epochs) <= e {
		le.epochs = append(le.epochs, le.l.Epoch())
	}
	return le.epochs[e]
}

// loader returns the dataloader stream of d's training images at image
// size side and batch size batch, the log's workers (0: the default) and
// a new iterator each epoch when perEpoch (--close-mosaic), made once.
func (d *planData) loader(side int64, batch, workers int, perEpoch bool) *loaderEpochs {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := loaderKey{side, batch, workers, perEpoch}
	if d.loaders == nil {
		d.loaders = map[loaderKey]*loaderEpochs{}
	}
	if d.loaders[key] == nil {
		// create_dataloader takes at most the dataset's images a batch.
		b := min(batch, len(d.set.Train))
		d.loaders[key] = &loaderEpochs{l: d.set.NewLoader(b, dataset.Workers(workers, b), side, dataset.ScratchHigh, perEpoch)}
	}
	return d.loaders[key]
}

// loaderKey names one dataloader stream of a dataset.
type loaderKey struct {
	side           int64
	batch, workers int
	perEpoch       bool
}

// cocoData is the built-in dataset's, shared by every plan.
var cocoData = &planData{}

// epoch returns the per-image box counts of epoch e at image size side
// and seed.
func (d *planData) epoch(side int64, seed uint64, e int) []int64 {
	d.mu.Lock()
	key := [2]uint64{uint64(side), seed}
	if d.epochs == nil {
		d.epochs = map[[2]uint64]*epochDraws{}
	}
	dr := d.epochs[key]
	if dr == nil {
		dr = &epochDraws{rng: sim.PlanRand(seed)}
		d.epochs[key] = dr
	}
	d.mu.Unlock()
	dr.mu.Lock()
	defer dr.mu.Unlock()
	for len(dr.counts) <= e {
		dr.counts = append(dr.counts, d.set.EpochCounts(side, dataset.ScratchHigh, dr.rng))
	}
	return dr.counts[e]
}

// plan fills p's iterations and validation batches from the dataset, for
// a model of family fam; name says which dataset in errors.
func (d *planData) plan(p *sim.RunPlan, fam, name string, rp RunPlan) error {
	switch {
	case fam != "yolov9":
		return fmt.Errorf("onnxmem: plan run: data %s: a %s model; the dataset's sampler is YOLOv9's dataloader (-family yolov9 if the model is trained with it)", name, fam)
	case p.ValImages != 0 || p.MeanBoxes != 0:
		return fmt.Errorf("onnxmem: plan run: data %s: ValImages and MeanBoxes are the synthetic run's; the dataset gives both", name)
	case p.Batch < 1:
		return fmt.Errorf("onnxmem: plan run: batch %d: want at least 1", p.Batch)
	}
	side := max(p.Height, p.Width)
	batches, err := dataset.Batches(d.set.Val, 2*p.Batch, side, valStride)
	if err != nil {
		return fmt.Errorf("onnxmem: plan run: %w", err)
	}
	for _, b := range batches {
		p.ValBatches = append(p.ValBatches, sim.RunEvent{Kind: sim.RunEventVal, Batch: int64(len(b.Boxes)), Height: b.H, Width: b.W, BoxCounts: b.Boxes})
	}
	batch, seed, epoch := int(p.Batch), p.Seed, 0
	if !rp.Drawn() {
		// The dataloader's own stream: which images a batch holds and how
		// many boxes each keeps follow from the dataset, the batch and the
		// loader's settings alone.
		l := d.loader(side, batch, rp.Workers, rp.CloseMosaic > 0)
		p.TrainBoxes = func(*rand.Rand) [][]int64 {
			epoch++
			var out [][]int64 // the cached epoch's, copied: callers may change theirs
			for _, b := range l.epoch(epoch - 1) {
				out = append(out, slices.Clone(b))
			}
			return out
		}
		return nil
	}
	p.TrainBoxes = func(*rand.Rand) [][]int64 {
		epoch++
		counts := d.epoch(side, seed, epoch-1)
		if gpus := rp.GPUs; gpus > 1 {
			// DistributedSampler: rank 0 takes indices[0::GPUs] of the
			// shuffled epoch.
			var mine []int64
			for i := 0; i < len(counts); i += gpus {
				mine = append(mine, counts[i])
			}
			counts = mine
		}
		return dataset.Group(counts, batch)
	}
	return nil
}

// MaxBatchRun is MaxBatch for the whole run p, planned at each batch.
func (m *Model) MaxBatchRun(sc Scenario, p RunPlan, limit int64) (int64, *RunResult, error) {
	if sc.Step == "" {
		sc.Step = TrainStep // a run trains, as Run takes it
	}
	g := int64(max(sc.GPUs, 1))
	s := sc
	s.Batch = g // any multiple of the GPUs decodes
	_, _, o, err := m.decode(s)
	if err != nil {
		return 0, nil, err
	}
	capacity, err := limitOf(o, "max batch of a run")
	if err != nil {
		return 0, nil, err
	}
	if limit, err = searchLimit(limit); err != nil {
		return 0, nil, err
	}
	if limit < g {
		return 0, nil, fmt.Errorf("onnxmem: max batch of a run: limit %d below the %d GPUs: each rank trains one image at least", limit, g)
	}
	// Over GPUs the search is over each rank's batch, and every rank must
	// complete: the answer is that batch times the GPUs.
	n, r, err := m.maxBatchRun(sc, p, limit/g, g, capacity, o)
	return n * g, r, err
}

// maxBatchRun is MaxBatchRun over each rank's batch, at most limit.
func (m *Model) maxBatchRun(sc Scenario, p RunPlan, limit, g, capacity int64, o sim.Options) (int64, *RunResult, error) {
	p.GPUs = sc.GPUs
	if err := p.check(); err != nil {
		return 0, nil, err
	}
	d, err := p.data()
	if err != nil {
		return 0, nil, err
	}
	// A run's memory grows with its batch: doubling from 1 finds one that
	// does not complete, bisection the last that does.
	tried := map[int64]*RunResult{}
	retried := map[int64]int64{}
	// The search's probes place the segments top down; its answer is then
	// checked bottom up where it was at the limit, as Run answers
	// (verified).
	// at returns the run's scenario and events at batch b a rank.
	at := func(b int64) (Scenario, []RunEvent, error) {
		s, q := sc, p
		s.Batch, q.Batch, q.GPUs = b*g, b, sc.GPUs
		if q.Height == 0 && q.Width == 0 {
			q.Height, q.Width = o.Height, o.Width
		}
		events, err := m.planRun(q, d)
		return s, events, err
	}
	// try runs batch b with the segments placed one way (sim.RunPlaced).
	try := func(b int64, bottomUp bool) (*RunResult, int64, error) {
		s, events, err := at(b)
		if err != nil {
			return nil, 0, err
		}
		return runEvents(m, s, events, func(e *sim.Model, o sim.Options, evs []sim.RunEvent) (*sim.RunResult, error) {
			return sim.RunPlaced(e, o, evs, bottomUp)
		})
	}
	completes := func(b int64) (bool, error) {
		r, n, err := try(b, false)
		if err != nil {
			return false, err
		}
		tried[b], retried[b] = r, n
		return r.fits(), nil
	}
	verified := func(lo int64) (int64, *RunResult, error) {
		for ; lo > 0; lo-- {
			if _, ok := tried[lo]; !ok {
				if _, err := completes(lo); err != nil {
					return 0, nil, err
				}
			}
			if !tried[lo].fits() {
				continue
			}
			if retried[lo] == 0 {
				return lo, tried[lo], nil // it never touched the limit
			}
			// Placed bottom up; over GPUs each rank as Run checks it,
			// only where that rank touched the limit.
			var up *RunResult
			var err error
			if sc.GPUs > 1 {
				var s Scenario
				var events []RunEvent
				if s, events, err = at(lo); err == nil {
					up, err = m.Run(s, events)
				}
			} else {
				up, _, err = try(lo, true)
			}
			if err != nil {
				return 0, nil, err
			}
			if up.fits() {
				return lo, tried[lo], nil
			}
		}
		return 0, nil, nil
	}
	// The first try is a small batch; the allocated peak grows about in
	// proportion to the batch, so its peak gives a guess at the answer,
	// from which steps that double bracket it. Bisection then finds the
	// last batch that completes below the first that does not.
	lo, hi := int64(0), limit+1 // lo completes (0: none yet), hi does not (limit+1: none yet)
	probe := min(int64(8), limit)
	ok, err := completes(probe)
	if err != nil {
		return 0, nil, err
	}
	guess := probe
	if ok {
		lo = probe
		if r := tried[probe]; r.Peak > 0 {
			guess = max(probe+1, min(limit, probe*capacity/r.Peak))
		}
	} else {
		hi = probe
		guess = max(1, probe/2)
	}
	for step := max(1, guess/16); hi-lo > 1 && guess > lo && guess < hi; step *= 2 {
		ok, err := completes(guess)
		if err != nil {
			return 0, nil, err
		}
		if ok {
			lo, guess = guess, min(limit, guess+step)
			if lo == limit {
				return verified(lo)
			}
		} else {
			hi, guess = guess, max(1, guess-step)
		}
	}
	if hi == limit+1 { // every try completed: the limit is next
		ok, err := completes(limit)
		if err != nil {
			return 0, nil, err
		}
		if ok {
			return verified(limit)
		}
		hi = limit
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := completes(mid)
		if err != nil {
			return 0, nil, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return verified(lo)
}
