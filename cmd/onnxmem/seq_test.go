package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestSequence checks that a text model takes its sequence length in every
// way a user gives it: predict's "seq" or "inputs", -seq on the commands, and a
// refusal naming the token input and the flag when it is missing.
func TestSequence(t *testing.T) {
	bert := measured.Path("hf/bert-train.onnx")
	m, err := sim.Load(bert)
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Simulate(sim.Options{Batch: 2, Seq: 128, AMP: true})
	if err != nil {
		t.Fatal(err)
	}
	want := string(marshal(simPredicted(r)))
	root := filepath.Dir(filepath.Dir(bert))
	for _, tc := range []struct{ line, want string }{
		{`{"kind":"model_step","model":"hf/bert-train.onnx","batch":2,"seq":128,"amp":true}`, want},
		{`{"kind":"model_step","model":"hf/bert-train.onnx","batch":2,"img":640}`, `onnxmem: bert-train: ir: graph input "input_ids": dim 1 ("sequence") is symbolic`},
		{`{"kind":"model_step","model":"hf/bert-train.onnx","batch":2,"seq":-4}`, `onnxmem: field "seq": -4`},
		// Any input's dims by name, as -input takes them.
		{`{"kind":"model_step","model":"hf/bert-train.onnx","batch":2,"inputs":{"input_ids":[2,128]},"amp":true}`, want},
		{`{"kind":"model_step","model":"hf/bert-train.onnx","batch":2,"inputs":{"input_ids":[4,128]}}`, `onnxmem: field "inputs": input_ids: dim 0 is 4 and "batch" 2`},
		{`{"kind":"model_step","model":"hf/bert-train.onnx","batch":2,"seq":64,"inputs":{"input_ids":[2,128]}}`, `onnxmem: field "inputs": input_ids: sequence 128 and "seq" 64`},
		{`{"kind":"model_step","model":"hf/bert-train.onnx","batch":2,"inputs":{"ids":[2,128]}}`, `onnxmem: field "inputs": ids: the model has no input ids; its inputs: input_ids`},
		{`{"kind":"model_step","model":"hf/bert-train.onnx","batch":2,"inputs":[2,128]}`, `onnxmem: field "inputs": [2,128] is not an object`},
	} {
		checkPredictLine(t, root, tc.line, tc.want)
	}
	code, stdout, stderr := runCmd(t, "", "sweep", "-seq", "128", "-batches", "2,4", "-amp", bert)
	if code != 0 || !strings.Contains(stdout, "sequence 128") {
		t.Errorf("sweep -seq 128: exit code %d, stdout %q, stderr %q; want a table that names sequence 128", code, stdout, stderr)
	}
	// -input NAME=DIMS: the batch and the sequence of a token input, an
	// image's sides; refusals name the input or the dim.
	for _, tc := range []struct {
		args []string
		want string // in stdout, or the error's start in stderr
	}{
		{[]string{"timeline", "-input", "input_ids=4x256", bert}, "sequence 256, batch 4"},
		{[]string{"sweep", "-batches", "2", "-input", "input_ids=Bx64", bert}, "sequence 64"},
		{[]string{"timeline", "-input", "images=Bx3x384x640", "-step", "model", "yolov9-t"}, "image 384x640"},
		{[]string{"timeline", "-input", "ids=4x256", bert}, "onnxmem: -input ids=4x256: the model has no input ids; its inputs: input_ids"},
		{[]string{"sweep", "-input", "input_ids=4x256", bert}, "onnxmem: -input input_ids=4x256: this command varies the batch itself"},
		{[]string{"timeline", "-input", "input_ids=4x0", bert}, `onnxmem: -input input_ids=4x0: dim 1 is "0"`},
		{[]string{"timeline", "-input", "input_ids=4x256x2", bert}, "onnxmem: -input input_ids=4x256x2: 3 dims for input input_ids of rank 2"},
		{[]string{"timeline", "-batch", "2", "-input", "input_ids=4x256", bert}, "onnxmem: -input input_ids=4x256: batch 4, and -batch 2"},
		{[]string{"timeline", "-seq", "64", "-step", "model", "yolov9-t"}, "onnxmem: yolov9-t: ir: a sequence length of 64 for a graph with no token input"},
	} {
		code, stdout, stderr := runCmd(t, "", tc.args...)
		if strings.HasPrefix(tc.want, "onnxmem: ") {
			if code == 0 || !strings.HasPrefix(stderr, tc.want) {
				t.Errorf("%v: exit code %d, stderr %q; want an error starting %q", tc.args, code, stderr, tc.want)
			}
			continue
		}
		if code != 0 || !strings.Contains(stdout, tc.want) {
			t.Errorf("%v: exit code %d, stderr %q, stdout %.200q; want %q in it", tc.args, code, stderr, stdout, tc.want)
		}
	}
	code, _, stderr = runCmd(t, "", "report", bert)
	if code == 0 || !strings.Contains(stderr, `"input_ids"`) || !strings.Contains(stderr, "-seq") {
		t.Errorf("report without -seq: exit code %d, stderr %q; want a refusal naming input_ids and -seq", code, stderr)
	}
}
