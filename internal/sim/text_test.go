package sim_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestTwoTokenInputs checks a text model with several inputs of token ids,
// as BERT exports input_ids, token_type_ids and attention_mask: each id an
// embedding, the mask cast to float (arithmetic on integers, no memory
// rule needed), all resident for the step, and a train step over them.
func TestTwoTokenInputs(t *testing.T) {
	b := onnxbuild.New("twoinputs")
	ids, types, mask := b.TokenInput("input_ids"), b.TokenInput("token_type_ids"), b.TokenInput("attention_mask")
	w := b.Module("word")
	we := w.Node("Gather", []string{w.Param("weight", 100, 16), ids.Name}, 1)[0]
	ty := b.Module("type")
	te := ty.Node("Gather", []string{ty.Param("weight", 2, 16), types.Name}, 1)[0]
	head := b.Module("head")
	maskf := head.Node("Cast", []string{mask.Name}, 1, onnxbuild.IntAttr("to", 1))[0]
	keep := head.Node("Unsqueeze", []string{maskf, head.Ints(-1)}, 1)[0]
	sum := head.Node("Mul", []string{head.Node("Add", []string{we, te}, 1)[0], keep}, 1)[0]
	logits := head.Node("MatMul", []string{sum, head.Node("Transpose", []string{head.Param("weight", 50, 16)}, 1)[0]}, 1)[0]
	b.Output(onnxbuild.T{Name: logits})
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	m, err := sim.LoadBytes("twoinputs", data)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []sim.Options{{Batch: 2, Seq: 8}, {Batch: 2, Seq: 8, AMP: true}, {Batch: 2, Seq: 8, Train: true, Optimizer: sim.AdamW}} {
		r, err := m.Simulate(o)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		// The two ids (128 bytes each, 512 with the allocator's rounding)
		// and the three weights are resident before the step.
		if r.M0 < 512+512 {
			t.Errorf("%+v: m0 %d, want the two inputs resident", o, r.M0)
		}
	}
}
