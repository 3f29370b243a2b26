package yolov9_test

import (
	"path/filepath"
	"testing"

	"github.com/onnxmem/onnxmem/family/yolov9"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// lastIndexOf returns the position of the last event described as want
// among the forward's events, or -1. A block's SiLU runs in place
// (initialize_weights), so its output is the storage that batch norm
// allocated, and autograd's clone of the batch norm's output, named alike,
// is freed before it where nothing saves it.
func lastIndexOf(p *schedule.Program, want string) int {
	ev := events(p, 0, p.ForwardEnd, nil)
	for i := len(ev) - 1; i >= 0; i-- {
		if ev[i] == want {
			return i
		}
	}
	return -1
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
		out0 = "-activation /model.0/bn/BatchNormalization_output_0" // the block's output: silu_ ran in place
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
			free, l3 := lastIndexOf(p, out0), lastIndexOf(p, in3)
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
	// Each block's output is the storage its batch norm allocated, which
	// its SiLU overwrote in place.
	want := []string{"+activation /model.1/Concat_output_0", "-activation /model.1/cv2/bn/BatchNormalization_output_0",
		"-activation /model.1/cv1/bn/BatchNormalization_output_0", "-activation /model.1/AveragePool_output_0",
		"-activation /model.0/bn/BatchNormalization_output_0"}
	diff(t, "events of the concat", got, want)
}

// elan is layer 0, a 1×1 block, and layer 1, a module whose blocks cv1, cv2
// and cv3 run in a chain and whose cv4 reads the concat of the last parts of
// them (cv1, cv2, cv3 with parts = 3; cv2, cv3 with parts = 2).
func elan(parts int) *onnxbuild.Builder {
	b := onnxbuild.New("elan")
	l0 := b.Layer(0).Block(b.Input("x", 8), 16, 1, 1)
	m := b.Layer(1)
	y := []onnxbuild.T{m.Sub("cv1").Block(l0, 8, 1, 1)}
	y = append(y, m.Sub("cv2").Block(y[0], 8, 3, 1))
	y = append(y, m.Sub("cv3").Block(y[1], 8, 3, 1))
	b.Output(m.Sub("cv4").Block(m.Concat(y[3-parts:]...), 16, 1, 1))
	return b
}

// TestConcatHolds checks YOLOv9's ELAN idiom: the list y of a concat of
// three or more parts keeps each part alive until the module returns, past
// the conv that reads the concat; the parts of a two-part concat die with it.
// cv3's output is the one part that nothing saves, so its free shows the hold.
func TestConcatHolds(t *testing.T) {
	for _, c := range []struct {
		parts  int
		freeAt string
	}{{3, "/model.1/cv4/act/Mul"}, {2, "/model.1/Concat"}} {
		p := program(t, load(t, elan(c.parts)), 2, schedule.Config{})
		part := "-activation /model.1/cv3/bn/BatchNormalization_output_0" // its SiLU ran in place
		at := "(not freed)"
		for _, e := range p.Events[:p.ForwardEnd] {
			if describe(p, e) != part {
				continue
			}
			at = "(after the last node)"
			if e.Node >= 0 {
				at = p.Graph.Nodes[e.Node].Name
			}
		}
		if at != c.freeAt {
			t.Errorf("%d parts: cv3's output freed at node %q in the forward, want %q", c.parts, at, c.freeAt)
		}
	}
}

// TestInvariants builds the tiny model and every YOLOv9 training export of
// the shared data at batch 2 and checks the invariants of checkBalanced.
func TestInvariants(t *testing.T) {
	t.Run("tiny", func(t *testing.T) {
		for _, batch := range []int64{1, 2} {
			program(t, load(t, onnxbuild.Tiny()), batch, schedule.Config{Workspace: fakeWorkspace})
		}
	})
	files, _ := filepath.Glob(filepath.Join(onnxbuild.Shared(t, "yolov9"), "*-train.onnx"))
	if len(files) == 0 {
		t.Fatal("no *-train.onnx in the shared yolov9 folder")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			g := loadFile(t, path)
			for _, cfg := range []schedule.Config{
				{Workspace: fakeWorkspace},
				{Workspace: fakeWorkspace, Precision: schedule.AMP, Checkpoint: schedule.Sequential(12, 3)},
				{Workspace: fakeWorkspace, Eval: &schedule.Eval{Head: yolov9.Head{}}, CuBLASWorkspace: 1 << 20},
			} {
				programAt(t, g, ir.Binding{Batch: 2, Height: 640, Width: 640}, cfg)
			}
		})
	}
}

// TestEvalDecode checks the eval step of a real head: no gradient, no
// saved tensor, batch norm's statistics (which cuDNN returns on the running
// statistics too, calibration §23's traces) dropped before the next tensor
// is made, and the decode's outputs, 4 box coordinates and the classes per
// anchor, alive until the step ends.
func TestEvalDecode(t *testing.T) {
	g := loadFile(t, onnxbuild.Shared(t, filepath.Join("yolov9", "yolov9-s-train.onnx")))
	s, err := g.Infer(ir.Binding{Batch: 4, Height: 320, Width: 320})
	if err != nil {
		t.Fatal(err)
	}
	var outs []schedule.Output
	for _, v := range g.Outputs {
		outs = append(outs, schedule.Output{Dims: s.Dims[v], DType: s.DTypes[v]})
	}
	a, branches := yolov9.Anchors(outs)
	if a != 40*40+20*20+10*10 || branches != 2 {
		t.Fatalf("head: %d anchors in %d branches, want 2100 in 2", a, branches)
	}
	p, err := schedule.Build(g, s, schedule.Config{Eval: &schedule.Eval{Head: yolov9.Head{}}, Holder: yolov9.Family{}})
	if err != nil {
		t.Fatal(err)
	}
	checkBalanced(t, p)
	var decoded, stats int
	want := int64(4 * (4 + 80) * a * 2) // B × (4 + nc) × anchors, float16
	for _, e := range p.Events {
		buf := p.Buffers[e.Buf]
		switch {
		case buf.Kind == schedule.Stats && !e.Free:
			stats++
		case buf.Kind == schedule.Stats:
			stats--
		case !e.Free && stats > 0:
			t.Fatalf("eval step keeps a batch norm's statistics while it makes a %s", buf.Kind)
		}
		switch {
		case buf.Kind == schedule.Grad || buf.Kind == schedule.ParamGrad:
			t.Fatalf("eval step allocates a %s", buf.Kind)
		case e.Phase != schedule.Forward && e.Phase != schedule.Cleanup:
			t.Fatalf("eval step has a %s phase", e.Phase)
		case !e.Free && buf.Bytes == want && e.Phase == schedule.Forward:
			decoded++
		}
	}
	if decoded != branches {
		t.Errorf("%d decoded outputs of %d bytes, want %d", decoded, want, branches)
	}
}

// TestSiLUInPlace checks a block's act(bn(conv(x))) as the official model
// runs it, its SiLU in place (initialize_weights sets inplace = True): in a
// training forward autograd clones the batch norm's output before silu_
// overwrites it and keeps the clone for the backward; under no_grad (the
// eval step) there is no clone. Either way SiLU allocates no output: the
// block's output is the batch norm's storage (../shared/groundtruth/traces
// free that block when a Conv's output is dropped and keep the one
// allocated after it; calibration/silu_saved.py).
func TestSiLUInPlace(t *testing.T) {
	b := onnxbuild.New("silu")
	b.Output(b.Layer(1).Block(b.Layer(0).Block(b.Input("x", 8), 8, 3, 1), 8, 3, 1))
	g := load(t, b)
	for _, c := range []struct {
		name string
		cfg  schedule.Config
		want []string
	}{
		{"train", schedule.Config{}, []string{"+activation /model.0/bn/BatchNormalization_output_0"}},
		{"no_grad", schedule.Config{Eval: &schedule.Eval{Head: yolov9.Head{}}}, nil},
	} {
		p := program(t, g, 2, c.cfg)
		diff(t, c.name+": events of layer 0's SiLU", events(p, 0, p.ForwardEnd, atNode(p, "/model.0/act/Mul")), c.want)
	}
}
