package allocator_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/allocator"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// replayOp is one request of a recorded replay: a malloc of Bytes into
// slot Slot, or (Free) the free of the allocation in Slot.
type replayOp struct {
	Free  bool
	Slot  int32
	Bytes int64
}

// yolov9EOps returns the allocator's requests of a yolov9-e train step at
// batch 64 under AMP, as sim.Run makes them: parameters, the warm-up
// step and the measured step (the input and the workspaces made once left
// out).
func yolov9EOps(b *testing.B) ([]replayOp, int) {
	b.Helper()
	sc := sim.Options{Batch: 64, Height: 640, Width: 640, AMP: true, Train: true, Boxes: 16, EMA: true}
	m, err := sim.Builtin("yolov9-e")
	if err != nil {
		b.Fatal(err)
	}
	p, err := m.Program(sc)
	if err != nil {
		b.Fatal(err)
	}
	var ops []replayOp
	for _, r := range p.Resident {
		ops = append(ops, replayOp{Slot: r, Bytes: p.Buffers[r].Bytes})
	}
	for pass := 0; pass < 2; pass++ {
		if pass == 1 {
			// The warm-up's parameter gradients are freed (zero_grad).
			for _, g := range p.ParamGrads {
				ops = append(ops, replayOp{Free: true, Slot: g})
			}
		}
		for _, e := range p.Events {
			ops = append(ops, replayOp{Free: e.Free, Slot: e.Buf, Bytes: p.Buffers[e.Buf].Bytes})
		}
	}
	return ops, len(p.Buffers)
}

// BenchmarkReplay replays the requests of a yolov9-e train step (about
// 45,000) through a reused allocator: the cost of the simulation's core.
func BenchmarkReplay(b *testing.B) {
	ops, n := yolov9EOps(b)
	ids := make([]allocator.ID, n)
	a := allocator.New()
	b.ReportMetric(float64(len(ops)), "requests/op")
	b.ResetTimer()
	for b.Loop() {
		a.Reset(allocator.Config{})
		for _, op := range ops {
			if op.Free {
				a.Free(ids[op.Slot])
			} else {
				ids[op.Slot] = a.Malloc(op.Bytes)
			}
		}
	}
}
