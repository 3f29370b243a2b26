package sim

import (
	"errors"
	"fmt"
	"slices"

	"github.com/onnxmem/onnxmem/allocator"
	"github.com/onnxmem/onnxmem/schedule"
)

// Process simulates scenarios measured one after another in one process,
// as a harness that sweeps batch sizes, or a notebook, runs them. Each runs
// as Simulate runs one (a warm-up step, then the measured step, the cache
// emptied where Options.EmptyCache says), but the caching allocator keeps
// what the earlier ones left: the segments that empty_cache could not
// release because a gradient of the last measured step lay in them (its
// .grad tensors stay until the next warm-up's zero_grad), and with
// EmptyCacheNever every segment reserved so far. That history moves the
// reserved peak, not the allocated bytes.
//
// ../shared/groundtruth measured each model's scenarios this way, one after
// another in one process per model; replayed in that order, the reserved
// peaks of its model steps follow to a median of 0.01% (0.14% for each
// scenario alone), and those of its torchvision steps to 0.00% (1.4%
// alone): TestGroundTruthHistory.
//
// Its one allocator places the segments top down (allocator.Placement):
// under a limit a scenario that Simulate answers as running out only when
// placed bottom up fits here.
//
// A Process is not safe for concurrent use.
type Process struct {
	m     *Model
	ps    session
	first *schedule.Program // the first scenario's program
	sc    Options           // the first scenario, its defaults set
	conf  allocator.Config
	steps int
	oom   int // the step that ran out of memory, or -1
	s     scratch
}

// ErrProcess is wrapped by the errors of a scenario that a Process cannot
// run next although it could run first: one with other parameters,
// workspaces, allocator options or way of emptying the cache than the
// process's first, or any after a step that ran out of memory.
var ErrProcess = errors.New("onnxmem: process")

// NewProcess starts a simulated process of m in which nothing has run yet.
func (m *Model) NewProcess() *Process {
	return &Process{m: m, oom: -1}
}

// Simulate predicts sc measured next in the process. Every scenario of a
// process must hold the same parameters as its first (the same resident
// tensors: model steps of one precision, say) and share its allocator
// options, limit and way of emptying the cache. Once a step has run out of
// memory the process ends: later scenarios are refused.
func (pr *Process) Simulate(sc Options) (*Result, error) {
	p, err := pr.m.program(sc)
	if err != nil {
		return nil, err
	}
	how, err := replayOf(sc, p)
	if err != nil {
		return nil, err
	}
	mode := how.mode
	if pr.steps == 0 {
		pr.conf = how.conf
		a := allocator.New()
		a.Reset(pr.conf)
		a.Capacity = how.capacity
		pr.ps = session{rp: replayer{a: a}, mode: mode}
		pr.first, pr.sc = p, sc.Defaults()
	} else {
		switch {
		case pr.oom >= 0:
			err = fmt.Errorf("step %d ran out of memory, which ends the process: start a new one", pr.oom)
		case sc.AllocConf != pr.sc.AllocConf || sc.Capacity != pr.sc.Capacity:
			err = fmt.Errorf("allocator options %q and limit %d, and the first scenario's %q and %d: a process has one allocator", sc.AllocConf, sc.Capacity, pr.sc.AllocConf, pr.sc.Capacity)
		case mode != pr.ps.mode:
			err = fmt.Errorf("empty cache %s, and the first scenario's %s: give the harness's one way to every scenario", mode, pr.ps.mode)
		case !sameResidents(pr.first, p):
			err = fmt.Errorf("the scenario holds other parameters than the first (%d resident tensors, %d): a process that reloads its model is not simulated; start a new one there", len(p.Resident), len(pr.first.Resident))
		case !sameOnce(pr.first, p):
			err = fmt.Errorf("the scenario's step keeps other workspaces for the process (cuBLAS handles) than the first's: start a new one there")
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrProcess, err)
		}
	}
	ids := make([]allocator.ID, len(p.Buffers))
	pr.ps.skips = how.skips
	pr.ps.warmUp(p, pr.conf, how.capacity, ids)
	r, _ := pr.s.measure(p, sc, pr.conf, &pr.ps.rp, ids, nil, nil, false)
	r.Retries = pr.ps.rp.a.Stats().Retries
	pr.ps.ended(p, ids)
	if r.OOM {
		pr.oom = pr.steps
	}
	pr.steps++
	return r, nil
}

// sameOnce reports whether p and q keep the same workspaces for the rest
// of the process (Program.Persistent): the same sizes, in the same order, which
// the process's first step made.
func sameOnce(p, q *schedule.Program) bool {
	if len(p.Persistent) != len(q.Persistent) {
		return false
	}
	for i, b := range p.Persistent {
		if p.Buffers[b].Bytes != q.Buffers[q.Persistent[i]].Bytes {
			return false
		}
	}
	return true
}

// sameResidents reports whether p and q load the same resident tensors:
// the same sizes, in the same order, with the same roles.
func sameResidents(p, q *schedule.Program) bool {
	if len(p.Resident) != len(q.Resident) || !slices.Equal(p.ResidentRoles, q.ResidentRoles) || !slices.Equal(p.ResidentLoad, q.ResidentLoad) {
		return false
	}
	for i, b := range p.Resident {
		if p.Buffers[b].Bytes != q.Buffers[q.Resident[i]].Bytes {
			return false
		}
	}
	return true
}
