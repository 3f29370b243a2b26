package schedule_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// sharedLoss returns the gradients of three outputs in two buffers, the
// first shared by outputs 0 and 2, which are not adjacent.
type sharedLoss struct{}

func (sharedLoss) Forward(schedule.Tape, schedule.LossInput) []schedule.Buf { return nil }

func (sharedLoss) Backward(t schedule.Tape, in schedule.LossInput, _ []schedule.Buf) []schedule.Buf {
	a, b := t.Alloc(1<<20, "a"), t.Alloc(1<<20, "b")
	return []schedule.Buf{a, b, a}
}

// TestLossSharedGradients checks that a gradient buffer shared by outputs
// that are not adjacent is freed once, after the backward no longer needs it.
func TestLossSharedGradients(t *testing.T) {
	b := onnxbuild.New("three")
	x := b.Layer(0).Block(b.Input("x", 3), 8, 3, 1)
	b.Output(b.Layer(1).Conv(x, 4, 1, 1), b.Layer(2).Conv(x, 4, 1, 1), b.Layer(3).Conv(x, 4, 1, 1))
	g := load(t, b)
	s, err := g.Infer(ir.Binding{Batch: 2, Height: 16, Width: 16})
	if err != nil {
		t.Fatal(err)
	}
	p, err := schedule.Build(g, s, schedule.Config{Train: &schedule.Train{Loss: sharedLoss{}, Optimizer: schedule.SGD}})
	if err != nil {
		t.Fatal(err)
	}
	frees := map[int32]int{}
	for _, e := range p.Events {
		if e.Free && p.Buffers[e.Buf].Bytes == 1<<20 {
			frees[e.Buf]++
		}
	}
	if len(frees) != 2 {
		t.Errorf("the loss's gradient buffers are freed %v, want two buffers", frees)
	}
	for buf, n := range frees {
		if n != 1 {
			t.Errorf("buffer %d freed %d times", buf, n)
		}
	}
}
