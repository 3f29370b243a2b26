package schedule_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/schedule"
)

// classifier is a torchvision-style network on 3 channels: conv1, bn1 and
// an in-place relu; a residual block (conv, bn, out += identity, relu);
// global average pooling and flatten; fc (Linear to 10), an in-place
// Hardswish and Dropout(0.2), and head (Linear to 4).
func classifier() *onnxbuild.Builder {
	b := onnxbuild.New("classifier")
	x := b.Input("x", 3)
	r := b.Module("relu").Op("Relu", b.Module("bn1").BatchNorm(b.Module("conv1").Conv(x, 8, 3, 1)))
	blk := b.Module("layer1").Index(0)
	a := blk.Add(blk.Sub("bn1").BatchNorm(blk.Sub("conv1").Conv(r, 8, 3, 1)), r)
	r2 := blk.Sub("relu").Op("Relu", a)
	f := b.Module("avgpool").Flatten(b.Module("avgpool").GlobalAvgPool(r2))
	h := b.Module("act").Op("HardSwish", b.Module("fc").Linear(f, 10))
	b.Output(b.Module("head").Linear(b.Module("drop").Dropout(h, 0.2), 4))
	return b
}

// TestClassifierInPlace checks the ops of a torchvision classifier as the
// generic family runs them, at batch 2 in float32 (calibration: the rules of
// tools/autograd/derivatives.yaml and the codegen of in-place variants):
//
//   - relu_ after a norm, out += identity and the relu after it allocate
//     nothing; relu_'s backward makes the input's gradient
//     (threshold_backward on the saved result);
//   - GlobalAveragePool, x.mean((-1, -2), keepdim=True), allocates its output
//     and saves nothing; its backward makes a gradient of the input's size;
//   - Gemm (linear) allocates its output, then its thread's cuBLAS and
//     cuBLASLt workspaces, once (Program.Persistent);
//   - hardswish_ needs the input it overwrites: the codegen clones it
//     (original_self) before the op, and the clone is saved;
//   - dropout_ makes float noise of the input's size, which mul_ saves;
//   - the last Gemm's backward takes a contiguous copy of the expanded
//     gradient of out.sum() for each of its two mm, then sums the gradient
//     into the bias's; the weight's gradient, the transpose of a contiguous
//     mm, is its .grad.
func TestClassifierInPlace(t *testing.T) {
	g := load(t, classifier())
	p := program(t, g, 2, schedule.Config{CuBLASWorkspace: 1 << 25, CuBLASLtWorkspace: 1 << 20})
	fwd := func(node string) []string { return events(p, 0, p.ForwardEnd, atNode(p, node)) }
	bwd := func(node string) []string { return events(p, p.BackwardStart, p.BackwardEnd, atNode(p, node)) }
	for _, n := range []string{"/relu/Relu", "/layer1/layer1.0/Add", "/layer1/layer1.0/relu/Relu", "/avgpool/Flatten"} {
		diff(t, n+" forward", fwd(n), nil)
	}
	diff(t, "relu_ backward", bwd("/relu/Relu"), []string{"+grad /bn1/BatchNormalization_output_0",
		"-grad /layer1/layer1.0/Add_output_0", "-activation /bn1/BatchNormalization_output_0"})
	diff(t, "avgpool forward", fwd("/avgpool/GlobalAveragePool"), []string{"+activation /avgpool/GlobalAveragePool_output_0"})
	diff(t, "avgpool backward", bwd("/avgpool/GlobalAveragePool"), []string{"+grad /layer1/layer1.0/relu/Relu_output_0", "-grad /avgpool/Flatten_output_0"})
	diff(t, "fc forward", fwd("/fc/Gemm"), []string{"+activation /fc/Gemm_output_0"})
	diff(t, "hardswish_ forward", fwd("/act/HardSwish"), []string{"+activation /fc/Gemm_output_0"})
	diff(t, "dropout_ forward", fwd("/drop/Dropout"), []string{"+mask 80"})
	diff(t, "head backward", bwd("/head/Gemm"), []string{"+grad /drop/Dropout_output_0", "+copy 32", "-copy 32",
		"+param-grad head.weight", "+copy 32", "-copy 32", "+param-grad head.bias", "-activation /fc/Gemm_output_0"})
	diff(t, "fc backward", bwd("/fc/Gemm"), []string{"+grad /avgpool/Flatten_output_0", "+param-grad fc.weight",
		"+param-grad fc.bias", "-grad /fc/Gemm_output_0", "-activation /avgpool/GlobalAveragePool_output_0"})
	// The workspaces: the forward's at the first Gemm, after its output;
	// the autograd thread's at the first mm of the backward, after the
	// gradient and the copy that mm takes.
	var once []string
	for j, b := range p.Persistent {
		at := p.Events[p.PersistentAt[j]-1]
		once = append(once, fmt.Sprintf("%d after %s in %s", p.Buffers[b].Bytes, describe(p, at), at.Phase))
	}
	diff(t, "workspaces", once, []string{
		"33554432 after +activation /fc/Gemm_output_0 in forward",
		"1048576 after +activation /fc/Gemm_output_0 in forward",
		"33554432 after +copy 32 in backward"})
}

// TestClassifierOutOfPlace checks the same ops run out of place, as a
// Holder without InPlace runs them: relu and hardswish allocate their
// outputs, native_dropout its bool mask and then its output; the inputs
// that nothing saves go as soon as their op has run.
func TestClassifierOutOfPlace(t *testing.T) {
	g := load(t, classifier())
	p := program(t, g, 2, schedule.Config{Holder: schedule.LayerLoopOnly})
	fwd := func(node string) []string { return events(p, 0, p.ForwardEnd, atNode(p, node)) }
	diff(t, "relu forward", fwd("/relu/Relu"), []string{"+activation /relu/Relu_output_0", "-activation /bn1/BatchNormalization_output_0"})
	diff(t, "add forward", fwd("/layer1/layer1.0/Add"), []string{"+activation /layer1/layer1.0/Add_output_0",
		"-activation /layer1/layer1.0/bn1/BatchNormalization_output_0"})
	diff(t, "hardswish forward", fwd("/act/HardSwish"), []string{"+activation /act/HardSwish_output_0"})
	diff(t, "dropout forward", fwd("/drop/Dropout"), []string{"+mask 20", "+activation /drop/Dropout_output_0", "-activation /act/HardSwish_output_0"})
	diff(t, "dropout backward", events(p, p.BackwardStart, p.BackwardEnd, atNode(p, "/drop/Dropout")),
		[]string{"+grad /act/HardSwish_output_0", "-grad /drop/Dropout_output_0", "-mask 20"})
	if len(p.Persistent) != 0 {
		t.Errorf("%d workspaces made with a workspace size of 0", len(p.Persistent))
	}
}

// TestClassifierAutocast checks the Gemms under autocast: the bias and the
// weight are cast (cached; only the weight's cast is saved, so the bias's
// goes when autocast exits), the output is float16; the backward makes
// float16 gradients of the casts, which ToCopyBackward turns into the
// float32 .grad after the node, the weight's before the bias's.
func TestClassifierAutocast(t *testing.T) {
	g := load(t, classifier())
	p := program(t, g, 2, schedule.Config{Precision: schedule.AMP})
	diff(t, "head forward", events(p, 0, p.ForwardEnd, atNode(p, "/head/Gemm")),
		[]string{"+cast head.bias", "+cast head.weight", "+activation /head/Gemm_output_0"})
	diff(t, "head backward", events(p, p.BackwardStart, p.BackwardEnd, atNode(p, "/head/Gemm")), []string{
		"+grad /drop/Dropout_output_0", "+copy 16", "-copy 16", "+grad head.weight", "+copy 16", "-copy 16", "+grad head.bias",
		"-activation /fc/Gemm_output_0", "-cast head.weight",
		"+param-grad head.weight", "-grad head.weight", "+param-grad head.bias", "-grad head.bias"})
}

// TestSqueezeExcitationMul checks the backward of scale * x with a
// broadcast scale (torchvision's SqueezeExcitation), as
// calibration/torchvision_ops.py measured it (se_mul): x's gradient first,
// then the scale's, a product of x's size, summed to the scale's shape;
// then the product and the saved operands go.
func TestSqueezeExcitationMul(t *testing.T) {
	b := onnxbuild.New("se")
	blk := b.Module("features").Index(0)
	x := blk.Sub("conv").Conv(b.Input("x", 3), 8, 3, 1)
	scale := blk.Sub("scale_activation").Op("HardSigmoid", blk.Sub("fc1").Conv(blk.Sub("avgpool").GlobalAvgPool(x), 8, 1, 1, onnxbuild.Bias()))
	b.Output(onnxbuild.T{Name: blk.Node("Mul", []string{scale.Name, x.Name}, 1)[0], C: 8})
	p := program(t, load(t, b), 2, schedule.Config{})
	const full = 2 * 8 * 16 * 16 * 4
	diff(t, "mul backward", events(p, p.BackwardStart, p.BackwardEnd, atNode(p, "/features/features.0/Mul")), []string{
		"+grad /features/features.0/conv/Conv_output_0", fmt.Sprintf("+grad %d", full),
		"+grad /features/features.0/scale_activation/HardSigmoid_output_0", fmt.Sprintf("-grad %d", full),
		"-activation /features/features.0/conv/Conv_output_0", "-activation /features/features.0/scale_activation/HardSigmoid_output_0"})
}

// TestDepthwiseOrder checks the backward of depthwise convs: one that
// PyTorch runs with its own kernels (every float32 one) makes the weight's
// gradient before the input's, as calibration/torchvision_steps.json
// measured; one that runs through cuDNN (float16, 32 or more channels,
// stride 1) makes the input's first.
func TestDepthwiseOrder(t *testing.T) {
	b := onnxbuild.New("dw")
	stem := b.Module("stem").Conv(b.Input("x", 3), 32, 3, 1)
	b.Output(b.Module("dw").Conv(stem, 32, 3, 1, onnxbuild.Group(32)))
	g := load(t, b)
	for _, c := range []struct {
		prec schedule.Precision
		want []string
	}{
		{schedule.FP32, []string{"+param-grad dw.weight", "+grad /stem/Conv_output_0"}},
		{schedule.AMP, []string{"+grad /stem/Conv_output_0", "+grad dw.weight"}},
	} {
		p := program(t, g, 2, schedule.Config{Precision: c.prec})
		var got []string
		for _, e := range events(p, p.BackwardStart, p.BackwardEnd, atNode(p, "/dw/Conv")) {
			if strings.HasPrefix(e, "+grad") || strings.HasPrefix(e, "+param-grad") {
				got = append(got, e)
			}
		}
		diff(t, c.prec.String(), got[:2], c.want)
	}
}

// TestMeanPool checks x.mean([2, 3]), how shufflenet and mnasnet pool
// (ReduceMean, keepdims 0): like adaptive_avg_pool2d to 1×1 it allocates
// its output and saves nothing, and its backward (mean_backward: the
// gradient expanded, divided by the count) makes a gradient of the input's
// size.
func TestMeanPool(t *testing.T) {
	b := onnxbuild.New("meanpool")
	x := b.Input("x", 3)
	r := b.Module("relu").Op("Relu", b.Module("conv").Conv(x, 8, 3, 1))
	m := b.Module("pool").Op("ReduceMean", r, onnxbuild.IntsAttr("axes", 2, 3), onnxbuild.IntAttr("keepdims", 0))
	b.Output(b.Module("fc").Linear(m, 4))
	g := load(t, b)
	p := program(t, g, 2, schedule.Config{})
	fwd := events(p, 0, p.ForwardEnd, atNode(p, "/pool/ReduceMean"))
	bwd := events(p, p.BackwardStart, p.BackwardEnd, atNode(p, "/pool/ReduceMean"))
	diff(t, "mean forward", fwd, []string{"+activation /pool/ReduceMean_output_0"})
	diff(t, "mean backward", bwd, []string{"+grad /relu/Relu_output_0", "-grad /pool/ReduceMean_output_0"})
}
