package schedule_test

import (
	"slices"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/schedule"
)

// indexOf returns the position of the first event described as want among
// the forward's events, or -1.
func indexOf(p *schedule.Program, want string) int {
	return slices.Index(events(p, 0, p.ForwardEnd, nil), want)
}

// TestRangeReturns checks what a checkpointed range keeps: layer 0's output
// is read by layers 1 and 2, and nothing saves it inside a range. When the
// range is layers 0–2 it reads it last inside the range, which returns
// without it: it is freed before layer 3 runs. When the range is layers 0–1,
// layer 2 reads it after the range, and the layer loop keeps it to the end
// of the forward (../shared/groundtruth/traces/trace-yolov9-c-b8-amp-k2.json
// shows both: layer 13's output, read by layers 14 and 18, freed as the first
// range returns, and layer 10's, read by layer 21, at the end).
func TestRangeReturns(t *testing.T) {
	b := onnxbuild.New("ranges")
	l0 := b.Layer(0).Block(b.Input("x", 8), 8, 3, 1)
	l1 := b.Layer(1).Block(l0, 8, 3, 1)
	l2 := b.Layer(2).Concat(l1, l0)
	b.Output(b.Layer(3).Block(l2, 8, 3, 1))
	g := load(t, b)
	const (
		out0 = "-activation /model.0/act/Mul_output_0"
		in3  = "+activation /model.3/conv/Conv_output_0"
	)
	for _, tc := range []struct {
		name      string
		ranges    []schedule.Range
		freedInFw bool // freed in the forward at all
		before3   bool // freed before layer 3 runs
	}{
		{"range 0-2", []schedule.Range{{From: 0, To: 3}}, true, true},
		{"range 0-1", []schedule.Range{{From: 0, To: 2}}, true, false},
		{"no checkpoint: saved by layer 1's conv", nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := program(t, g, 2, schedule.Config{Checkpoint: tc.ranges})
			free, l3 := indexOf(p, out0), indexOf(p, in3)
			if (free >= 0) != tc.freedInFw || (free >= 0 && free < l3) != tc.before3 {
				t.Errorf("layer 0's output freed at forward event %d, layer 3 starts at %d:\n%v", free, l3, events(p, 0, p.ForwardEnd, nil))
			}
		})
	}
}

// TestLocalChunk checks ADown's local variable: x = avg_pool2d(x); x1, x2 =
// x.chunk(2, 1) keeps the pooled map until the module returns. Under a
// checkpoint nothing saves it, and it is freed after the module's concat,
// not when the max pool has read the second chunk; then the module's
// argument, which the layer loop holds until the module returns.
func TestLocalChunk(t *testing.T) {
	b := onnxbuild.New("adown")
	l0 := b.Layer(0).Block(b.Input("x", 8), 16, 3, 1)
	s := b.Layer(1)
	x1, x2 := s.Chunk2(s.AvgPool(l0, 2, 1, 0))
	y1 := s.Sub("cv1").Block(x1, 8, 3, 2)
	y2 := s.Sub("cv2").Block(s.MaxPool(x2, 3, 2, 1), 8, 1, 1)
	b.Output(s.Concat(y1, y2))
	p := program(t, load(t, b), 2, schedule.Config{Checkpoint: []schedule.Range{{From: 0, To: 2}}})
	got := events(p, 0, p.ForwardEnd, atNode(p, "/model.1/Concat"))
	want := []string{"+activation /model.1/Concat_output_0", "-activation /model.1/cv2/act/Mul_output_0",
		"-activation /model.1/cv1/act/Mul_output_0", "-activation /model.1/AveragePool_output_0",
		"-activation /model.0/act/Mul_output_0"}
	diff(t, "events of the concat", got, want)
}
