package schedule

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/ir"
)

// TestAttentionNoFlash checks the fused attention's buffers under
// autocast with and without the flash kernel (Config.NoFlash, a card below
// sm 8.0): q, k and v of [2 4 16 16] in float16. The flash kernel draws
// two 8-byte seeds and a logsumexp of 2·4·16 rows; memory-efficient
// attention draws no seed and pads each head's 16 rows to 32. In the
// backward both copy the output's gradient, an expanded sum's seed here
// (float16, 4,096 bytes); then the flash kernel takes one float32
// buffer, q's gradient accumulator and the rows' delta (2·4·16·16·4 +
// 128·4 + 256 bytes), memory-efficient attention the delta and, on half
// inputs, a float32 accumulator of q's gradient (from its source).
func TestAttentionNoFlash(t *testing.T) {
	var sdpa oneOp
	for _, tc := range oneOps {
		if tc.op == "ScaledDotProductAttention" {
			sdpa = tc
		}
	}
	g, s, _, _, _ := oneOpGraph(t, sdpa)
	for _, tc := range []struct {
		noFlash bool
		want    []string
	}{
		{false, []string{"forward stats 8", "forward stats 8", "forward stats 512", "backward copy 4096", "backward grad 8960"}},
		{true, []string{"forward stats 1024", "backward copy 4096", "backward stats 512", "backward grad 8192"}},
	} {
		p, err := Build(g, s, Config{Precision: AMP, NoFlash: tc.noFlash})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range p.Events {
			buf := p.Buffers[e.Buf]
			if e.Free || buf.Node < 0 || g.Nodes[buf.Node].Name != "/op/ScaledDotProductAttention" {
				continue
			}
			if buf.Kind == Stats || buf.Kind == Copy || (buf.Kind == Grad && e.Phase == Backward && buf.Value == ir.NoValue) {
				got = append(got, fmt.Sprintf("%s %s %d", e.Phase, buf.Kind, buf.Bytes))
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("NoFlash %v: the attention's own buffers differ (-want +got):\n%s", tc.noFlash, diff)
		}
	}
}

// TestAttentionLearnedBias checks the fused attention with a bias computed
// from parameters (TinyViT's relative position bias, its attn_mask): q, k
// and v of [2 4 12 16] and a [4 12 12] bias. Memory-efficient attention
// runs it in float32 and under autocast alike (flash takes no mask: no
// seeds), padding the bias's rows of 12 to 16 elements in a tensor it
// saves (4·12·16 elements, float16 under autocast), with the logsumexp's
// rows padded to 32; its backward writes the bias's gradient at the
// broadcast size with rows aligned to 16 (2·4·12·16 elements), freed once
// summed back, beside the rows' delta (and, under autocast, q's float32
// gradient accumulator).
func TestAttentionLearnedBias(t *testing.T) {
	g, s, _, _, _ := oneOpGraphAt(t, oneOp{op: "ScaledDotProductAttention", build: func(m onnxbuild.Scope, _, a, c, d onnxbuild.T) []string {
		p := m.Param("bias", 4, 12, 12)
		bias := m.Node("Mul", []string{p, p}, 1)[0]
		return m.Node("ScaledDotProductAttention", []string{a.Name, c.Name, d.Name, bias}, 1)
	}}, ir.Binding{Batch: 2, Height: 12, Width: 16})
	for _, tc := range []struct {
		prec Precision
		want []string
	}{
		{FP32, []string{"forward activation 3072", "forward stats 1024", "backward grad 6144", "backward stats 384"}},
		{AMP, []string{"forward activation 1536", "forward stats 1024", "backward grad 3072", "backward stats 384", "backward grad 6144"}},
	} {
		p, err := Build(g, s, Config{Precision: tc.prec})
		if err != nil {
			t.Fatal(err)
		}
		got := attentionBuffers(p, func(b Buffer) bool { return b.Value == ir.NoValue && b.Kind != Copy })
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%v: the attention's own buffers differ (-want +got):\n%s", tc.prec, diff)
		}
	}
}

// TestAttentionMath checks scaled_dot_product_attention on 5-d q, k and
// v ([2 2 2 12 16], Twins' windows: batch, windows, heads, tokens, dims),
// which no fused kernel takes: the math kernel. In float32 it keeps q·√s
// and k·√s (6,144 bytes each) and the softmax of the 2·2·2·12 rows of 12
// scores (4,608 bytes), the scores themselves going as the softmax is
// made, after _safe_softmax's search for rows a mask emptied (the scores
// == -inf as a bool, 1,152 bytes, all() along each row, 96 bytes, and a
// zero scalar); v, contiguous here, is saved as it is. Under autocast it casts q,
// k and v up to float32 first (6,144 bytes each, float16 inputs), keeps
// the float32 copies of v, q·√s, k·√s and the softmax, and casts the
// softmax (2,304 bytes) and the float32 output (6,144 bytes) back down.
// Its backward makes, in float32 both ways, the softmax's and v's
// gradients, the scores', q·√s's and k·√s's, then k's and q's; under
// autocast the output's gradient cast up first and the three inputs'
// gradients cast down last.
func TestAttentionMath(t *testing.T) {
	g, s, _, _, _ := oneOpGraphAt(t, oneOp{op: "ScaledDotProductAttention", build: func(m onnxbuild.Scope, _, a, c, d onnxbuild.T) []string {
		shape := m.Ints(2, 2, 2, 12, 16)
		var in []string
		for _, x := range []onnxbuild.T{a, c, d} {
			in = append(in, m.Node("Reshape", []string{x.Name, shape}, 1)[0])
		}
		return m.Node("ScaledDotProductAttention", in, 1)
	}}, ir.Binding{Batch: 2, Height: 12, Width: 16})
	for _, tc := range []struct {
		prec Precision
		want []string
	}{
		{FP32, []string{"forward activation 6144", "forward activation 6144", "forward activation 4608", "forward activation 4608",
			"forward activation 1152", "forward activation 96", "forward scalar 4",
			"backward grad 4608", "backward grad 4608", "backward grad 6144", "backward grad 6144"}},
		{AMP, []string{"forward cast 6144", "forward cast 6144", "forward cast 6144", "forward activation 6144", "forward activation 6144",
			"forward activation 4608", "forward activation 4608", "forward activation 1152", "forward activation 96", "forward scalar 4",
			"forward cast 2304", "forward activation 6144",
			"backward grad 6144", "backward grad 4608", "backward grad 6144", "backward grad 4608", "backward grad 6144",
			"backward grad 6144", "backward grad 6144", "backward grad 6144"}},
	} {
		p, err := Build(g, s, Config{Precision: tc.prec})
		if err != nil {
			t.Fatal(err)
		}
		got := attentionBuffers(p, func(b Buffer) bool { return b.Value == ir.NoValue || b.Kind == Cast })
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%v: the math kernel's own buffers differ (-want +got):\n%s", tc.prec, diff)
		}
	}
}

// attentionBuffers lists, as "phase kind bytes", the buffers that the
// node /op/ScaledDotProductAttention of p allocates and keep accepts, in
// event order.
func attentionBuffers(p *Program, keep func(Buffer) bool) []string {
	var got []string
	for _, e := range p.Events {
		buf := p.Buffers[e.Buf]
		if e.Free || buf.Node < 0 || p.Graph.Nodes[buf.Node].Name != "/op/ScaledDotProductAttention" || !keep(buf) {
			continue
		}
		got = append(got, fmt.Sprintf("%s %s %d", e.Phase, buf.Kind, buf.Bytes))
	}
	return got
}

// TestAttentionPaddedHeadDim checks flash attention on a head dim that is
// not a multiple of 8: q, k and v of [2 4 12 12] under autocast (float16,
// 2,304 bytes each). pad_last_dim copies each to a head dim of 16 (3,072
// bytes), which the kernel saves instead of q, k and v; it draws its two
// seeds, writes a padded output (3,072 bytes, of which the node's output
// is a slice) and a logsumexp of 2·4·12 rows. The backward pads the
// output's gradient (3,072 bytes), copies it and the saved output
// contiguous (3,072 each), makes padded gradients of q, k and v, the
// rows' delta (384 bytes) and a float32 accumulator of q's gradient at the
// head dim rounded up to 32 (96 rows of 32, 12,288 bytes), then, after the
// node, narrows v's, k's and q's gradients to 2,304 bytes each. A head dim
// of 16 pads nothing (TestAttentionNoFlash).
func TestAttentionPaddedHeadDim(t *testing.T) {
	var sdpa oneOp
	for _, tc := range oneOps {
		if tc.op == "ScaledDotProductAttention" {
			sdpa = tc
		}
	}
	g, s, _, _, _ := oneOpGraphAt(t, sdpa, ir.Binding{Batch: 2, Height: 12, Width: 12})
	p, err := Build(g, s, Config{Precision: AMP})
	if err != nil {
		t.Fatal(err)
	}
	got := attentionBuffers(p, func(Buffer) bool { return true })
	want := []string{
		"forward activation 3072", "forward activation 3072", "forward activation 3072",
		"forward stats 8", "forward stats 8", "forward activation 3072", "forward stats 384",
		"backward grad 3072", "backward copy 3072", "backward copy 3072",
		"backward grad 3072", "backward grad 3072", "backward grad 3072", "backward stats 384", "backward grad 12288",
		"backward grad 2304", "backward grad 2304", "backward grad 2304",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the padded attention's buffers differ (-want +got):\n%s", diff)
	}
}
