package sim

import (
	"fmt"

	"github.com/onnxmem/onnxmem/allocator"
)

// Snapshot is the measured step as torch.cuda.memory._snapshot() records
// it with _record_memory_history enabled just before the step: the
// allocator's events in order (every block handed out and freed, every
// segment reserved and released, an out-of-memory), each with the ONNX node
// that the event belongs to, and the segments with their blocks when the
// step ends. Addresses are the simulated ones (segments placed top down
// below 2^50, as cudaMalloc's fall on the H200).
//
// Worked example: a 2.6 M-parameter detector's model step at batch 2 and
// 320×320 records 9,536 events; it opens with the first conv's output, 3.1
// MiB, taken from the cache that the warm-up step left (an "alloc" event,
// no "segment_alloc") and named after its node; the events carry the
// requests' sizes, as PyTorch's trace does, so replayed they reach
// Result.PeakRequested, and the 79 segments at the end hold
// Result.ReservedAfter.
type Snapshot struct {
	Result   *Result
	Events   []SnapshotEvent
	Segments []allocator.Segment
}

// SnapshotEvent is one event of the allocator's history.
type SnapshotEvent struct {
	// Action is "alloc", "free_completed", "segment_alloc", "segment_free"
	// or "oom", as PyTorch's trace names them.
	Action     string
	Addr, Size int64
	// Node is the ONNX node the step was running ("" for the step's own
	// bookkeeping), Op its op type, Phase the step's phase.
	Node, Op, Phase string
}

// Snapshot simulates a scenario and records its measured step's allocator
// history. Allocator options (AllocConf) are not recorded yet: their pages
// and expandable segments have no events here.
func (m *Model) Snapshot(sc Options) (*Snapshot, error) {
	if sc.AllocConf != "" {
		return nil, fmt.Errorf("onnxmem: snapshot: allocator options %q: only PyTorch's default allocator's history is recorded yet", sc.AllocConf)
	}
	p, err := m.program(sc)
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{}
	next := 0 // the event being replayed
	var alloc *allocator.Allocator
	r, _ := run(p, sc, func(a *allocator.Allocator) {
		alloc = a
		a.Observe = func(action string, addr, size int64) {
			ev := SnapshotEvent{Action: action, Addr: addr, Size: size}
			if next < len(p.Events) {
				e := p.Events[next]
				ev.Phase = e.Phase.String()
				if e.Node >= 0 {
					n := &p.Graph.Nodes[e.Node]
					ev.Node, ev.Op = n.Name, n.OpType
				}
			}
			snap.Events = append(snap.Events, ev)
		}
	}, func(i int, _ allocator.Stats) {
		next = i + 1
		if i+1 == len(p.Events) && alloc != nil {
			snap.Segments = alloc.Segments()
		}
	})
	snap.Result = r
	return snap, nil
}
