package schedule_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/ir"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/schedule"
)

// fakeWorkspace gives each cuDNN pass a workspace of a size that names it.
func fakeWorkspace(c schedule.ConvCall) int64 {
	return map[string]int64{"fwd": 1001, "bwd-data": 1002, "bwd-filter": 1003}[c.Which]
}

// twoBlocks is input (8 channels) → Conv-BN-SiLU → Conv-BN-SiLU → output,
// in layers 0 and 1.
func twoBlocks() *onnxbuild.Builder {
	b := onnxbuild.New("blocks")
	x := b.Input("x", 8)
	b.Output(b.Layer(1).Block(b.Layer(0).Block(x, 16, 3, 1), 16, 3, 1))
	return b
}

// TestBlockStep checks the whole step of two YOLOv9 Conv blocks against the
// sequences of calibration/README.md section 2, with the SiLU in place as
// both YOLOv9 (initialize_weights) and torchvision (Conv2dNormActivation)
// build it after a batch norm (section 9). Forward, per block: the conv
// output, the conv's workspace, the batch-norm output and its two fp32
// statistics (4·C bytes each), silu_'s clone of the batch-norm output (the
// block's output is the batch norm's storage), and no free (every
// intermediate is saved). Backward, per op: SiLU +dX −dY −saved input; batch
// norm +dX +dW +dB −dY −saved input −mean −invstd; conv +dX with its
// backward-data workspace, +dW with its backward-filter workspace, −dY,
// −saved input. The first conv reads the input batch, which needs no
// gradient: no dX and no backward-data pass.
func TestBlockStep(t *testing.T) {
	g := load(t, twoBlocks())
	const (
		conv0, bn0, act0 = "/model.0/conv/Conv_output_0", "/model.0/bn/BatchNormalization_output_0", "/model.0/act/Mul_output_0"
		conv1, bn1, act1 = "/model.1/conv/Conv_output_0", "/model.1/bn/BatchNormalization_output_0", "/model.1/act/Mul_output_0"
	)
	forward := func(ws bool) []string {
		var out []string
		for _, v := range [][3]string{{conv0, bn0, act0}, {conv1, bn1, act1}} {
			out = append(out, "+activation "+v[0])
			if ws {
				out = append(out, "+workspace 1001", "-workspace 1001")
			}
			out = append(out, "+activation "+v[1], "+stats 64", "+stats 64", "+activation "+v[1])
		}
		return out
	}
	backward := func(ws bool) []string {
		w := func(n int) []string {
			if !ws {
				return nil
			}
			return []string{fmt.Sprintf("+workspace %d", n), fmt.Sprintf("-workspace %d", n)}
		}
		out := []string{
			"+scalar 4", // d(loss)/d(output): one element, expanded, kept by the graph's root
			"+grad " + bn1, "-activation " + bn1,
			"+grad " + conv1, "+param-grad model.1.bn.weight", "+param-grad model.1.bn.bias",
			"-grad " + bn1, "-activation " + conv1, "-stats 64", "-stats 64",
			"+grad " + act0}
		out = append(out, w(1002)...)
		out = append(out, "+param-grad model.1.conv.weight")
		out = append(out, w(1003)...)
		out = append(out, "-grad "+conv1, "-activation "+bn0,
			"+grad "+bn0, "-grad "+act0, "-activation "+bn0,
			"+grad "+conv0, "+param-grad model.0.bn.weight", "+param-grad model.0.bn.bias",
			"-grad "+bn0, "-activation "+conv0, "-stats 64", "-stats 64",
			"+param-grad model.0.conv.weight")
		out = append(out, w(1003)...)
		return append(out, "-grad "+conv0, "-scalar 4")
	}
	for _, ws := range []bool{false, true} {
		t.Run(fmt.Sprintf("workspace=%v", ws), func(t *testing.T) {
			cfg := schedule.Config{}
			if ws {
				cfg.Workspace = fakeWorkspace
			}
			p := program(t, g, 2, cfg)
			diff(t, "forward", events(p, 0, p.ForwardEnd, nil), forward(ws))
			// One output: loss = out.sum(), a single 4-byte scalar.
			diff(t, "loss", events(p, p.ForwardEnd, p.BackwardStart, nil), []string{"+scalar 4"})
			diff(t, "backward", events(p, p.BackwardStart, p.BackwardEnd, nil), backward(ws))
			diff(t, "cleanup", events(p, p.BackwardEnd, len(p.Events), nil), []string{"-scalar 4", "-activation " + bn1, "-input x"})
		})
	}
}

// TestSiLUFused checks that Sigmoid·Mul of one tensor runs as one SiLU: the
// sigmoid is never allocated, and the Sigmoid node emits nothing.
func TestSiLUFused(t *testing.T) {
	p := program(t, load(t, twoBlocks()), 2, schedule.Config{})
	for _, buf := range p.Buffers {
		if buf.Value != ir.NoValue && strings.HasSuffix(p.Graph.Values[buf.Value].Name, "Sigmoid_output_0") {
			t.Errorf("buffer of kind %s for %s", buf.Kind, p.Graph.Values[buf.Value].Name)
		}
	}
	for _, e := range p.Events {
		if e.Node >= 0 && p.Graph.Nodes[e.Node].OpType == "Sigmoid" {
			t.Errorf("%s at node %s", describe(p, e), p.Graph.Nodes[e.Node].Name)
		}
	}
}

// sliceConv is layer 0, a 1×1 block to 16 channels, and layer 1, a 3×3 block
// on its upper 8 channels (a Slice along the channels).
func sliceConv() *onnxbuild.Builder {
	b := onnxbuild.New("slice")
	l0 := b.Layer(0).Block(b.Input("x", 8), 16, 1, 1)
	l1 := b.Layer(1)
	b.Output(l1.Sub("cv").Block(l1.Slice(l0, 8, 16), 8, 3, 1))
	return b
}

// TestSliceCopy checks the contiguous copies of calibration/README.md
// section 4: at batch 2 a channel slice is strided, so the conv reading it
// copies it before allocating its output and frees the copy after its
// workspace, and its backward holds a second copy through both passes; at
// batch 1 the slice is contiguous and there is no copy.
func TestSliceCopy(t *testing.T) {
	g := load(t, sliceConv())
	const (
		conv  = "/model.1/cv/conv/Conv"
		out   = "/model.1/cv/conv/Conv_output_0"
		slice = "/model.1/Slice_output_0"
		in    = "/model.0/bn/BatchNormalization_output_0" // layer 0's output: its SiLU ran in place
	)
	for _, c := range []struct {
		batch    int64
		fwd, bwd []string
	}{
		{2,
			[]string{"+copy 16384", "+activation " + out, "+workspace 1001", "-workspace 1001", "-copy 16384"},
			[]string{"+copy 16384", "+grad " + slice, "+workspace 1002", "-workspace 1002",
				"+param-grad model.1.cv.conv.weight", "+workspace 1003", "-workspace 1003", "-copy 16384",
				"-grad " + out, "-activation " + in}},
		{1,
			[]string{"+activation " + out, "+workspace 1001", "-workspace 1001"},
			[]string{"+grad " + slice, "+workspace 1002", "-workspace 1002",
				"+param-grad model.1.cv.conv.weight", "+workspace 1003", "-workspace 1003",
				"-grad " + out, "-activation " + in}},
	} {
		p := program(t, g, c.batch, schedule.Config{Workspace: fakeWorkspace})
		what := fmt.Sprintf("batch %d", c.batch)
		diff(t, what+" forward", events(p, 0, p.ForwardEnd, atNode(p, conv)), c.fwd)
		diff(t, what+" backward", events(p, p.BackwardStart, p.BackwardEnd, atNode(p, conv)), c.bwd)
	}
}

// TestMaxPoolIndices checks that max pooling allocates its output and then
// int64 indices of the output's shape, which its backward frees after the
// incoming gradient and the saved input.
func TestMaxPoolIndices(t *testing.T) {
	b := onnxbuild.New("pool")
	l0 := b.Layer(0).Block(b.Input("x", 8), 16, 1, 1)
	b.Output(b.Layer(2).Block(b.Layer(1).MaxPool(l0, 2, 2, 0), 16, 1, 1))
	p := program(t, load(t, b), 2, schedule.Config{})
	const node = "/model.1/MaxPool"
	const indices = 2 * 16 * 8 * 8 * 8 // output elements × 8 bytes
	diff(t, "forward", events(p, 0, p.ForwardEnd, atNode(p, node)),
		[]string{"+activation /model.1/MaxPool_output_0", fmt.Sprintf("+indices %d", indices)})
	diff(t, "backward", events(p, p.BackwardStart, p.BackwardEnd, atNode(p, node)),
		// The saved input is layer 0's output, the batch norm's storage
		// that its SiLU overwrote in place.
		[]string{"+grad /model.0/act/Mul_output_0", "-grad /model.1/MaxPool_output_0", "-activation /model.0/bn/BatchNormalization_output_0", fmt.Sprintf("-indices %d", indices)})
}

// TestOutputsLiveUntilCleanup checks that the graph outputs, which the
// caller holds, are freed only after the backward, last output first.
func TestOutputsLiveUntilCleanup(t *testing.T) {
	p := program(t, load(t, onnxbuild.Tiny()), 2, schedule.Config{})
	var got []string
	for _, e := range p.Events {
		buf := p.Buffers[e.Buf]
		if e.Free && buf.Kind == schedule.Activation && slices.Contains(p.Graph.Outputs, buf.Value) {
			got = append(got, fmt.Sprintf("%s in %s", describe(p, e), e.Phase))
		}
	}
	diff(t, "frees of the outputs", got, []string{
		"-activation /model.6/m.1/Conv_output_0 in cleanup",
		"-activation /model.6/m.0/Conv_output_0 in cleanup",
	})
}
