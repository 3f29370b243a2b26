package schedule_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/schedule"
)

// TestViewGradientSum checks how the gradients of a tensor two ops read
// are summed when the first to arrive is a view of another gradient: a =
// block(x) feeds a conv and, through two reshapes run after it, an Add
// whose sum a last conv reads. The reshapes' backward runs first and gives
// a (the block's output) a view of the Add's gradient, which keeps its
// base (a ViewInfo), so InputBuffer cannot sum the conv's gradient into it
// in place (can_accumulate_inplace: storage use_count 2): the sum is a
// third tensor, as DaViT's blocks make it on the device (calibration §35).
// Without the reshapes the Add's gradient itself arrives first and takes
// the sum in place.
func TestViewGradientSum(t *testing.T) {
	build := func(views bool) *onnxbuild.Builder {
		b := onnxbuild.New("viewgrad")
		x := b.Input("x", 8)
		a := b.Layer(0).Block(x, 16, 3, 1)
		c := b.Layer(1).Conv(a, 16, 3, 1)
		r := a
		if views {
			m := b.Layer(2)
			flat := m.Node("Reshape", []string{a.Name, m.Ints(0, 16, -1)}, 1)[0]
			back := m.Node("Reshape", []string{flat, m.Ints(0, 16, 16, 16)}, 1)[0]
			r = onnxbuild.T{Name: back, C: 16}
		}
		b.Output(b.Layer(4).Conv(b.Layer(3).Add(r, c), 16, 1, 1))
		return b
	}
	for _, c := range []struct {
		views bool
		want  int // gradients of a allocated
	}{
		{false, 1}, // the conv's dX, summed into the Add's gradient
		{true, 2},  // the conv's dX and the sum
	} {
		g := load(t, build(c.views))
		p := program(t, g, 2, schedule.Config{Workspace: fakeWorkspace})
		n := 0
		for _, e := range events(p, p.BackwardStart, p.BackwardEnd, nil) {
			if e == "+grad /model.0/act/Mul_output_0" {
				n++
			}
		}
		if n != c.want {
			t.Errorf("views %v: %d gradients of the block's output allocated, want %d: %v", c.views, n, c.want, events(p, p.BackwardStart, p.BackwardEnd, nil))
		}
	}
}
