package sim

import (
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// flopsNet builds a five-layer graph whose FLOPs at 2×3×16×16 are counted by
// hand in TestCost:
//
//	0  x·0.5 (no parameter before it: no backward); Conv-BN-SiLU 3→8, 3×3 s2  → 2×8×8×8
//	1  MaxPool 2×2 s2                                                          → 2×8×4×4
//	2  Conv 8→4 1×1 with bias: a graph output                                  → 2×4×4×4
//	3  nearest upsample ×2 of layer 2; AvgPool 3×3 s1 of layer 0; their concat  → 2×12×8×8
//	4  the concat plus itself, reshaped to the shape computed by
//	   Shape·[1,1,1,1] (shape arithmetic: free): a graph output;
//	   a Sigmoid of layer 2 that reaches no output (forward only)
func flopsNet(t *testing.T) *Model {
	t.Helper()
	b := onnxbuild.New("flops")
	x := b.Input("images", 3)
	l0 := b.Layer(0)
	half := onnxbuild.T{Name: l0.Node("Mul", []string{x.Name, l0.Floats(0.5)}, 1)[0], C: 3}
	y0 := l0.Block(half, 8, 3, 2)
	y1 := b.Layer(1).MaxPool(y0, 2, 2, 0)
	y2 := b.Layer(2).Conv(y1, 4, 1, 1, onnxbuild.Bias())
	l3 := b.Layer(3)
	y3 := l3.Concat(l3.Upsample(y2, 2), l3.AvgPool(y0, 3, 1, 1))
	l4 := b.Layer(4)
	sum := l4.Add(y3, y3)
	shape := l4.Node("Shape", []string{sum.Name}, 1)[0]
	dims := l4.Node("Mul", []string{shape, l4.Ints(1, 1, 1, 1)}, 1)[0]
	y4 := onnxbuild.T{Name: l4.Node("Reshape", []string{sum.Name, dims}, 1)[0], C: sum.C}
	l4.Op("Sigmoid", y2)
	b.Output(y4, y2)
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	m, err := LoadBytes("flops", data)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCost(t *testing.T) {
	m := flopsNet(t)
	// Forward FLOPs by layer, at batch 2 and 16×16.
	const (
		scale = 2 * 3 * 16 * 16 // x·0.5: one per element
		conv0 = 2 * (2 * 8 * 8 * 8) * (3 * 3 * 3)
		bn0   = 4 * (2 * 8 * 8 * 8) // training mode
		silu0 = 2 * (2 * 8 * 8 * 8) // Sigmoid and Mul
		pool1 = (2 * 8 * 4 * 4) * (2 * 2)
		conv2 = 2*(2*4*4*4)*8 + 2*4*4*4 // with the bias
		avg3  = (2 * 8 * 8 * 8) * (3 * 3)
		add4  = 2 * 12 * 8 * 8
		sig4  = 2 * 4 * 4 * 4
		l0    = scale + conv0 + bn0 + silu0
		fwd   = l0 + pool1 + conv2 + avg3 + add4 + sig4
		// No backward for x·0.5 (nothing to differentiate) nor for the
		// Sigmoid whose output the loss never reads.
		bwd = 2 * (fwd - scale - sig4)
	)
	sc := Options{Batch: 2, Height: 16, Width: 16}
	for _, tc := range []struct {
		name      string
		segments  int
		plan      []Range
		recompute int64
	}{
		{"no checkpoint", 0, nil, 0},
		{"segments 1", 1, nil, 0},
		// checkpoint_sequential of 5 layers: 2 segments of 2 checkpoint
		// layers 0-1; 4 segments of 1 checkpoint layers 0, 1 and 2.
		{"segments 2", 2, nil, l0 + pool1},
		{"segments 4", 4, nil, l0 + pool1 + conv2},
		{"plan 3-5", 0, []Range{{From: 3, To: 5}}, avg3 + add4 + sig4},
		{"plan 0-1 and 2-3", 0, []Range{{From: 0, To: 1}, {From: 2, To: 3}}, l0 + conv2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := sc
			sc.Segments, sc.Checkpoint = tc.segments, tc.plan
			for _, prec := range []struct{ amp, half bool }{{false, false}, {true, false}, {false, true}} {
				sc.AMP, sc.Half = prec.amp, prec.half
				c, err := m.Cost(sc)
				if err != nil {
					t.Fatal(err)
				}
				want := Cost{Forward: fwd, Backward: bwd, Recompute: tc.recompute}
				if c != want {
					t.Errorf("amp %v half %v: %+v, want %+v", prec.amp, prec.half, c, want)
				}
				if c.Total() != fwd+bwd+tc.recompute {
					t.Errorf("Total %d, want %d", c.Total(), fwd+bwd+tc.recompute)
				}
				if got, want := c.Overhead(), float64(tc.recompute)/float64(fwd+bwd); got != want {
					t.Errorf("Overhead %v, want %v", got, want)
				}
			}
		})
	}
}

func TestCostScalesWithBatch(t *testing.T) {
	m := flopsNet(t)
	one, err := m.Cost(Options{Batch: 1, Height: 32, Width: 32, Segments: 2})
	if err != nil {
		t.Fatal(err)
	}
	four, err := m.Cost(Options{Batch: 4, Height: 32, Width: 32, Segments: 2})
	if err != nil {
		t.Fatal(err)
	}
	if four.Forward != 4*one.Forward || four.Backward != 4*one.Backward || four.Recompute != 4*one.Recompute {
		t.Errorf("batch 4 %+v is not 4 × batch 1 %+v", four, one)
	}
}

func TestCostErrors(t *testing.T) {
	m := flopsNet(t)
	for _, sc := range []Options{
		{Batch: 0, Height: 16, Width: 16},
		{Batch: 1, Height: 16, Width: 16, AMP: true, Half: true},
		{Batch: 1, Height: 16, Width: 16, Segments: 2, Checkpoint: []Range{{From: 0, To: 1}}},
	} {
		if _, err := m.Cost(sc); err == nil || err.Error() != sc.Supported().Error() {
			t.Errorf("%+v: error %v, want Supported's %v", sc, err, sc.Supported())
		}
	}
	// An op on data without a FLOP rule. Infer knows every op Cost does, so
	// this only happens when ir learns a new op first.
	s := &ir.Shapes{Dims: [][]int64{{2, 3}}}
	n := &ir.Node{Name: "/m.0/FancyOp", OpType: "FancyOp", Inputs: []ir.ValueID{0}, Outputs: []ir.ValueID{0}}
	if _, err := schedule.FLOPs(n, s); err == nil || !strings.Contains(err.Error(), "no FLOP rule for op FancyOp") {
		t.Errorf("FancyOp: error %v", err)
	}
}

// TestCostOverheadEmpty checks that an empty step has no overhead rather
// than NaN.
func TestCostOverheadEmpty(t *testing.T) {
	if o := (Cost{}).Overhead(); o != 0 {
		t.Errorf("Overhead of nothing: %v", o)
	}
}

// TestCostYOLOv9C checks the forward of yolov9-c's training graph at 640,
// batch 1, against the scale of the published figures: the YOLOv9 repository
// prints 238.9 GFLOPs for this dual-branch model (2 × the MACs that thop
// counts) and 102.1 for the fused, single-branch inference model. The count
// here includes batch norms and element-wise ops.
func TestCostYOLOv9C(t *testing.T) {
	m, err := Load(onnxbuild.Shared(t, "yolov9/yolov9-c-train.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Cost(Options{Batch: 1, Height: 640, Width: 640})
	if err != nil {
		t.Fatal(err)
	}
	g := float64(c.Forward) / 1e9
	t.Logf("yolov9-c-train, batch 1, 640: forward %.1f GFLOPs, backward %.1f", g, float64(c.Backward)/1e9)
	if g < 100 || g > 400 {
		t.Errorf("forward %.1f GFLOPs, want 100 to 400", g)
	}
	if c.Backward < c.Forward || c.Backward > 2*c.Forward {
		t.Errorf("backward %d outside [forward, 2×forward] of %d", c.Backward, c.Forward)
	}
	k2, err := m.Cost(Options{Batch: 1, Height: 640, Width: 640, Segments: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Two segments checkpoint the first 19 of 39 layers: the backbone at the
	// largest resolutions, a good part of the forward but not all of it.
	if k2.Recompute <= 0 || k2.Recompute >= k2.Forward || k2.Overhead() > 1.0/3 {
		t.Errorf("segments 2: %+v, overhead %.3f", k2, k2.Overhead())
	}
}
