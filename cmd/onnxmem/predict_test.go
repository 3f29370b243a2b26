package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/internal/sim"
)

func TestPredict(t *testing.T) {
	m, err := sim.Load(smallModel(t))
	if err != nil {
		t.Fatal(err)
	}
	// outcome is the field predict adds for a scenario of yolov9-s: the
	// prediction, or the error for one that Supported refuses.
	outcome := func(sc sim.Options) (key, value string) {
		r, err := m.Simulate(sc)
		if err != nil {
			return "error", string(marshal(errText(err)))
		}
		return "predicted", string(marshal(simPredicted(r)))
	}
	// withOutcome adds outcome(sc) to the fields of a line.
	withOutcome := func(fields map[string]string, sc sim.Options) map[string]string {
		key, value := outcome(sc)
		fields[key] = value
		return fields
	}
	fp32 := sim.Options{Batch: 2, Height: 640, Width: 640}
	if key, value := outcome(fp32); key != "predicted" {
		t.Fatalf("yolov9-s at batch 2: %s", value)
	}
	_, pred := outcome(fp32)
	amp, seg, both, train := fp32, fp32, fp32, fp32
	amp.AMP, seg.Segments = true, 4
	// A train step is predicted with the family's loss.
	train.Train, train.Boxes, train.Optimizer, train.EMA = true, 16, sim.SGD, true
	both.AMP, both.Segments = true, 2
	// AMP and checkpoint segments are simulated.
	if key, value := outcome(both); key != "predicted" {
		t.Fatalf("yolov9-s at batch 2, amp, 2 segments: %s", value)
	}
	missing := filepath.Join(shared, "yolov9/nope-train.onnx")
	_, loadErr := sim.Load(missing)
	if loadErr == nil {
		t.Fatalf("%s exists", missing)
	}

	in := strings.Join([]string{
		// An unknown field is an error; its text passes through.
		`{"model": "yolov9/yolov9-s-train.onnx", "kind": "model_step", "batch": 2, "img": 640, "amp": false, "segments": 0,` +
			` "extra": {"n": 1.50e3, "s": "<a&b>", "l": [1, 2.0]}, "measured": {"peak": 123}}`,
		``,
		`   `,
		`{"model": "yolov9/yolov9-s-train.onnx", "kind": "train_step", "batch": 2, "img": 640, "amp": false, "segments": 0, "boxes_per_img": 16, "optimizer": "SGD", "ema": true}`,
		`{"model": "yolov9/yolov9-s-train.onnx", "kind": "model_step", "batch": 2, "img": 640, "amp": true, "segments": 0}`,
		`{"model": "yolov9/yolov9-s-train.onnx", "kind": "model_step", "batch": 2, "img": 640, "amp": false, "segments": 4}`,
		`{"model": "yolov9/yolov9-s-train.onnx", "kind": "model_step", "batch": 2, "img": 640, "amp": true, "segments": 2}`,
		`{"model": "yolov9/nope-train.onnx", "kind": "model_step", "batch": 2, "img": 640}`,
		`{"model": "yolov9/yolov9-s-train.onnx", "kind": "model_step", "batch": 2}`,
		`{"model": "yolov9/yolov9-s-train.onnx", "kind": "model_step", "batch": 2.5, "img": 640}`,
		`{"kind": "bogus"}`,
		// A stale prediction is replaced.
		`{"model": "yolov9/yolov9-s-train.onnx", "kind": "model_step", "batch": 2, "img": 640, "predicted": {"peak": 1}, "error": "old"}`,
		`not json`,
		`[1, 2]`,
	}, "\n") // no final newline: the last line counts all the same

	code, stdout, stderr := runCmd(t, in, "predict", "-alone", "-root", shared)
	if code != 0 || stderr != "" {
		t.Fatalf("exit code %d, stderr %q; want 0 and none", code, stderr)
	}
	s := func(v string) string { return string(marshal(v)) }
	want := []map[string]string{{
		"model": `"yolov9/yolov9-s-train.onnx"`, "kind": `"model_step"`, "batch": "2", "img": "640", "amp": "false", "segments": "0",
		"extra": `{"n":1.50e3,"s":"<a&b>","l":[1,2.0]}`, "measured": `{"peak":123}`,
		"error": s(`onnxmem: model_step line: unknown field "extra" (a model_step line takes cfg, model, measured, family, deterministic, alloc_conf, batch, img, img_h, img_w, seq, inputs, amp, amp_dtype, half, segments, checkpoint, nc, empty_cache)`),
	}, withOutcome(map[string]string{
		"model": `"yolov9/yolov9-s-train.onnx"`, "kind": `"train_step"`, "batch": "2", "img": "640", "amp": "false", "segments": "0",
		"boxes_per_img": "16", "optimizer": `"SGD"`, "ema": "true",
	}, train), withOutcome(map[string]string{
		"model": `"yolov9/yolov9-s-train.onnx"`, "kind": `"model_step"`, "batch": "2", "img": "640", "amp": "true", "segments": "0",
	}, amp), withOutcome(map[string]string{
		"model": `"yolov9/yolov9-s-train.onnx"`, "kind": `"model_step"`, "batch": "2", "img": "640", "amp": "false", "segments": "4",
	}, seg), withOutcome(map[string]string{
		"model": `"yolov9/yolov9-s-train.onnx"`, "kind": `"model_step"`, "batch": "2", "img": "640", "amp": "true", "segments": "2",
	}, both), {
		"model": `"yolov9/nope-train.onnx"`, "kind": `"model_step"`, "batch": "2", "img": "640",
		"error": s(loadErr.Error()),
	}, {
		"model": `"yolov9/yolov9-s-train.onnx"`, "kind": `"model_step"`, "batch": "2",
		"error": s(`onnxmem: missing field "img" (or "img_h" and "img_w", or a text model's "seq", or "inputs")`),
	}, {
		"model": `"yolov9/yolov9-s-train.onnx"`, "kind": `"model_step"`, "batch": "2.5", "img": "640",
		"error": s(`onnxmem: field "batch": 2.5 is not an integer`),
	}, {
		"kind":  `"bogus"`,
		"error": s(`onnxmem: unknown kind "bogus" (want model, model_step, train_step, eval_step, max_batch or train_run)`),
	}, {
		"model": `"yolov9/yolov9-s-train.onnx"`, "kind": `"model_step"`, "batch": "2", "img": "640",
		"predicted": pred,
	}, {
		"error": s("onnxmem: line 13: invalid JSON: invalid character 'o' in literal null (expecting 'u')"),
		"line":  "13", "raw": `"not json"`,
	}, {
		"error": s("onnxmem: line 14: not a JSON object"),
		"line":  "14", "raw": `"[1, 2]"`,
	}}

	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	var got []map[string]string
	for _, l := range lines {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &obj); err != nil {
			t.Fatalf("output line %q: %v", l, err)
		}
		m := map[string]string{}
		for k, v := range obj {
			m[k] = string(v)
		}
		got = append(got, m)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("predict output differs (-want +got):\n%s", d)
	}
	// Keys are written sorted, values compacted, nothing HTML-escaped.
	if !strings.HasPrefix(lines[0], `{"amp":false,"batch":2,"error":"onnxmem: model_step line: unknown field \"extra\"`) ||
		!strings.Contains(lines[0], `,"extra":{"n":1.50e3,"s":"<a&b>","l":[1,2.0]},"img":640,"kind":"model_step","measured":`) {
		t.Errorf("first line not in sorted key order with verbatim values:\n%s", lines[0])
	}
}

// TestPredictInProcess checks predict -sequence, a measuring harness's
// mode: a model's model_step lines that follow each other run one after
// another in one process (the figures of sim.Process), and any other line,
// or another model's, starts the next model step in a process of its own.
// By default (and with -alone) every line gets the answer it gets alone,
// whatever came before it: even after a line of an absurd size.
func TestPredictInProcess(t *testing.T) {
	m, err := sim.Builtin("yolov9-s")
	if err != nil {
		t.Fatal(err)
	}
	step := func(b int64, seg int) sim.Options {
		return sim.Options{Batch: b, Height: 640, Width: 640, AMP: true, Segments: seg}
	}
	chain := m.NewProcess()
	var want []int64
	for _, sc := range []sim.Options{step(64, 2), step(1, 4)} {
		r, err := chain.Simulate(sc)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, r.PeakReserved)
	}
	alone, err := m.Simulate(step(1, 4))
	if err != nil {
		t.Fatal(err)
	}
	if alone.PeakReserved == want[1] {
		t.Fatalf("batch 1 reserves %d alone and after batch 64: pick scenarios that history moves", alone.PeakReserved)
	}
	want = append(want, alone.PeakReserved, alone.PeakReserved)
	line := func(b int64, seg int) string {
		return fmt.Sprintf(`{"model": null, "cfg": "yolov9-s", "kind": "model_step", "batch": %d, "img": 640, "amp": true, "segments": %d}`, b, seg)
	}
	in := strings.Join([]string{
		line(64, 2), line(1, 4), // one process
		`{"model": null, "cfg": "yolov9-s", "kind": "model", "measured": {}}`, line(1, 4), // another line between
		line(64, 2), `{"model": null, "cfg": "yolov9-t", "kind": "model_step", "batch": 1, "img": 320}`, line(1, 4), // another model between
	}, "\n")
	code, stdout, stderr := runCmd(t, in, "predict", "-sequence")
	if code != 0 || stderr != "" {
		t.Fatalf("exit code %d, stderr %q", code, stderr)
	}
	var got []int64
	for i, l := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		var obj struct {
			Kind      string
			Cfg       string
			Predicted *predicted
		}
		if err := json.Unmarshal([]byte(l), &obj); err != nil || (obj.Kind == "model_step" && obj.Predicted == nil) {
			t.Fatalf("line %d: %s (%v)", i+1, l, err)
		}
		if obj.Kind == "model_step" && obj.Cfg == "yolov9-s" && i != 4 {
			got = append(got, obj.Predicted.PeakReserved)
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("reserved peaks of the yolov9-s model steps but the fifth line (-want +got):\n%s", d)
	}
	// A line in error, found before or in the simulation, leaves the
	// process as it was.
	for _, bad := range []string{
		`{"model": null, "cfg": "yolov9-s", "kind": "model_step", "batch": 1, "img": 640, "amp": true, "amp_dtype": "int8"}`,
		`{"model": null, "cfg": "yolov9-s", "kind": "model_step", "batch": 1, "img": 640, "segments": 999}`,
	} {
		_, stdout, _ = runCmd(t, line(64, 2)+"\n"+bad+"\n"+line(1, 4), "predict", "-sequence")
		lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		var last struct{ Predicted *predicted }
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Predicted == nil || last.Predicted.PeakReserved != want[1] || !strings.Contains(lines[1], `"error"`) {
			t.Errorf("after %s: batch 1 answers %s, want %d as without it", bad, lines[len(lines)-1], want[1])
		}
	}
	huge := `{"model": null, "cfg": "yolov9-s", "kind": "model_step", "batch": 1, "img": 1000000}`
	for _, args := range [][]string{{"predict"}, {"predict", "-alone"}} {
		code, stdout, _ = runCmd(t, line(64, 2)+"\n"+huge+"\n"+line(1, 4), args...)
		var last struct{ Predicted *predicted }
		lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); code != 0 || err != nil || last.Predicted == nil || last.Predicted.PeakReserved != alone.PeakReserved {
			t.Errorf("%v: batch 1 after batch 64 and an image of 10⁶ answers %s, want its reserved peak alone, %d", args, lines[len(lines)-1], alone.PeakReserved)
		}
	}
	if code, _, stderr := runCmd(t, line(1, 4), "predict", "-alone", "-sequence"); code != 2 || !strings.Contains(stderr, "give one") {
		t.Errorf("-alone -sequence: exit code %d, %q; want a usage error", code, stderr)
	}
}

// TestPredictCalibration runs the whole calibration file: one line out per
// line in, each with a prediction or an error.
func TestPredictCalibration(t *testing.T) {
	path := sharedFile(t, "groundtruth/calibration.jsonl")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd(t, string(data), "predict", "-root", shared)
	if code != 0 || stderr != "" {
		t.Fatalf("exit code %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if in := strings.Count(strings.TrimSpace(string(data)), "\n") + 1; len(lines) != in {
		t.Fatalf("%d lines out for %d in", len(lines), in)
	}
	nPredicted := 0
	for _, l := range lines {
		var obj struct {
			Kind       string
			Batch, Img int64
			Amp        bool
			Segments   int
			Predicted  *predicted
			Error      string
		}
		if err := json.Unmarshal([]byte(l), &obj); err != nil {
			t.Fatal(err)
		}
		sc := sim.Options{Batch: obj.Batch, Height: obj.Img, Width: obj.Img, AMP: obj.Amp, Segments: obj.Segments}
		simulated := (obj.Kind == "model_step" || obj.Kind == "train_step") && sc.Supported() == nil || obj.Kind == "eval_step"
		switch {
		case simulated && (obj.Predicted == nil || obj.Predicted.Peak <= 0 || obj.Error != ""):
			t.Errorf("no prediction: %s", l)
		case !simulated && (obj.Predicted != nil || obj.Error == ""):
			t.Errorf("want an error: %s", l)
		}
		if obj.Predicted != nil {
			nPredicted++
		}
	}
	if nPredicted == 0 {
		t.Error("no line predicted")
	}
}

// TestPredictFields checks the fields beyond the basic ones: each is
// honoured (the line's answer is that of the scenario it names) or refused
// with an error that names it.
func TestPredictFields(t *testing.T) {
	s, err := sim.Builtin("yolov9-s")
	if err != nil {
		t.Fatal(err)
	}
	nc20, err := sim.BuiltinClasses("yolov9-s", 20)
	if err != nil {
		t.Fatal(err)
	}
	gelanT, err := sim.Builtin("gelan-t")
	if err != nil {
		t.Fatal(err)
	}
	sFile, err := sim.Load(sharedFile(t, "yolov9/yolov9-s-train.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	rn18, err := sim.Load(sharedFile(t, "torchvision/resnet18-train.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	simulate := func(m *sim.Model, sc sim.Options) string {
		r, err := m.Simulate(sc)
		if err != nil {
			t.Fatal(err)
		}
		return string(marshal(simPredicted(r)))
	}
	mb := func(m *sim.Model, sc sim.Options, capacity int64) string {
		n, r, err := m.MaxBatch(sc, capacity, maxBatchSearch)
		if err != nil {
			t.Fatal(err)
		}
		return string(marshal(prediction{r: r, maxBatch: &n}.json()))
	}
	fp := func(m *sim.Model, sc sim.Options) string {
		f, err := m.Footprint(sc)
		if err != nil {
			t.Fatal(err)
		}
		return string(marshal(prediction{footprint: f, layers: m.Layers()}.json()))
	}
	run := func(m *sim.Model, sc sim.Options, ev []sim.RunEvent) string {
		r, err := m.Run(sc, ev)
		if err != nil {
			t.Fatal(err)
		}
		return string(marshal(prediction{run: r}.json()))
	}
	runSc := sim.Options{Batch: 2, Height: 320, Width: 320, AMP: true, Train: true, EMA: true}
	runEv := []sim.RunEvent{{Kind: "setup"}, {Kind: "train", BoxCounts: []int64{3, 0}}, {Kind: "train", BoxCounts: []int64{5, 5}},
		{Kind: "val", Batch: 3, Height: 256, Width: 320, BoxCounts: []int64{1, 2, 3}}, {Kind: "val", Batch: 1, Height: 320, Width: 320}, {Kind: "ckpt"}}
	base := sim.Options{Batch: 2, Height: 384, Width: 640}
	half, amp, eval := base, base, base
	half.Half, amp.AMP = true, true
	eval.Eval = true
	const capacity = 4 << 30
	for _, tc := range []struct {
		line string
		want string // the predicted object, or the error's start
	}{
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img_h":384,"img_w":640}`, simulate(s, base)},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img":640,"img_h":384,"img_w":640,"deterministic":true}`, simulate(s, base)},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img":640,"img_h":384,"img_w":640,"half":true}`, simulate(s, half)},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img_h":384,"img_w":640,"amp":true,"amp_dtype":"float16"}`, simulate(s, sim.Options{Batch: 2, Height: 384, Width: 640, AMP: true, AMPDType: "float16"})},
		{`{"kind":"eval_step","model":"yolov9-s","batch":2,"img_h":384,"img_w":640,"amp":false,"half":true,"segments":0}`, simulate(s, eval)},
		{`{"kind":"model_step","model":null,"cfg":"yolov9-s","nc":20,"batch":2,"img_h":384,"img_w":640}`, simulate(nc20, base)},
		{`{"kind":"max_batch","step":"model_step","cfg":"yolov9-s","model":null,"img":640,"amp":true,"segments":0,"capacity_bytes":4294967296}`,
			mb(s, sim.Options{Height: 640, Width: 640, AMP: true}, capacity)},
		// fraction alone: set_per_process_memory_fraction's limit on the
		// H200, int(0.1 × 150109880320) = 15010988032.
		{`{"kind":"max_batch","step":"model_step","cfg":"yolov9-s","model":null,"img":640,"fraction":0.1}`,
			mb(s, sim.Options{Height: 640, Width: 640}, 15010988032)},
		{`{"kind":"max_batch","step":"model_step","cfg":"yolov9-s","model":null,"img":640,"fraction":1.5}`, `onnxmem: max_batch: fraction 1.5`},
		{`{"kind":"max_batch","step":"model_step","cfg":"yolov9-s","model":null,"img":640,"fraction":-0.1,"capacity_bytes":15010988032}`, `onnxmem: max_batch: fraction -0.1`},
		{`{"kind":"max_batch","step":"model_step","cfg":"yolov9-s","model":null,"img":640,"fraction":0.1,"capacity_bytes":15010988032}`,
			mb(s, sim.Options{Height: 640, Width: 640}, 15010988032)},
		{`{"kind":"max_batch","step":"model_step","cfg":"yolov9-s","model":null,"img":640}`, `onnxmem: missing field "capacity_bytes" (or "fraction"`},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img":640,"img_h":384,"img_w":600}`, `onnxmem: img 640 with img_h 384 and img_w 600`},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img_h":384}`, `onnxmem: img_h 384 and img_w 0`},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img":640,"amp":true,"amp_dtype":"bfloat16"}`,
			simulate(s, sim.Options{Batch: 2, Height: 640, Width: 640, AMP: true, AMPDType: "bfloat16"})},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img":640,"amp":true,"amp_dtype":"float8"}`, `onnxmem: amp_dtype "float8"`},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img":640,"amp":false,"amp_dtype":"bfloat16"}`, `onnxmem: autocast type bfloat16 without amp`},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img":640,"alloc_conf":"expandable_segments:True"}`,
			simulate(s, sim.Options{Batch: 2, Height: 640, Width: 640, AllocConf: "expandable_segments:True"})},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img":640,"alloc_conf":"expandable:True"}`, `onnxmem: alloc conf: allocator: `},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img":640,"alloc_conf":"per_process_memory_fraction:0.5"}`, `onnxmem: alloc conf "per_process_memory_fraction:0.5"`},
		// nc with a file: the file when its head has nc classes, else the
		// built-in cfg with nc classes, else an error.
		{`{"kind":"model_step","model":"yolov9/yolov9-s-train.onnx","batch":2,"img":640,"nc":20}`, `onnxmem: model "yolov9/yolov9-s-train.onnx" predicts 80 classes, and nc is 20`},
		{`{"kind":"model_step","model":"yolov9/yolov9-s-train.onnx","cfg":"yolov9-s","batch":2,"img_h":384,"img_w":640,"nc":20}`, simulate(nc20, base)},
		{`{"kind":"model_step","model":"yolov9/yolov9-s-train.onnx","cfg":"yolov9-s","batch":2,"img_h":384,"img_w":640,"nc":80}`, simulate(sFile, base)},
		{`{"kind":"model_step","model":"torchvision/resnet18-train.onnx","batch":2,"img":224,"nc":1000}`, `onnxmem: model "torchvision/resnet18-train.onnx": its family (generic) reads no classes`},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img_h":384,"img_w":640,"nc":20}`, simulate(nc20, base)},
		{`{"kind":"train_step","model":"yolov9-s","batch":2,"img":640,"boxes_per_img":4,"trainer":"train"}`, `onnxmem: yolov9-s: yolov9: trainer train: train.py trains a single head`},
		{`{"kind":"train_step","model":"gelan-t","batch":2,"img":640,"boxes_per_img":4,"trainer":"train_dual"}`, `onnxmem: gelan-t: yolov9: trainer train_dual: train_dual.py trains a dual head`},
		{`{"kind":"train_step","model":"gelan-t","batch":2,"img":640,"boxes_per_img":4,"trainer":"train"}`, simulate(gelanT, sim.Options{Batch: 2, Height: 640, Width: 640, Train: true, Boxes: 4})},
		{`{"kind":"train_step","model":"yolov9-s","batch":2,"img":640,"boxes_per_img":4,"trainer":"train_dual","optimizer":"AdamW","ema":true}`, simulate(s, sim.Options{Batch: 2, Height: 640, Width: 640, Train: true, Boxes: 4, Optimizer: sim.AdamW, EMA: true})},
		// train_dual.py's own spelling, --optimizer LION, and any case.
		{`{"kind":"train_step","model":"yolov9-s","batch":2,"img":640,"boxes_per_img":4,"optimizer":"LION"}`, simulate(s, sim.Options{Batch: 2, Height: 640, Width: 640, Train: true, Boxes: 4, Optimizer: sim.Lion})},
		{`{"kind":"train_step","model":"yolov9-s","batch":2,"img":640,"boxes_per_img":4,"optimizer":"adamw"}`, simulate(s, sim.Options{Batch: 2, Height: 640, Width: 640, Train: true, Boxes: 4, Optimizer: sim.AdamW})},
		{`{"kind":"train_step","model":"yolov9-s","batch":2,"img":640,"boxes_per_img":4,"optimizer":"RMSprop"}`, `onnxmem: unknown optimizer "RMSprop"`},
		{`{"kind":"train_step","model":"yolov9-s","batch":2,"img":640,"boxes_per_img":4,"prev_pred_alive":true}`,
			simulate(s, sim.Options{Batch: 2, Height: 640, Width: 640, Train: true, Boxes: 4, PrevPredAlive: true})},
		{`{"kind":"train_step","model":"yolov9-s","batch":2,"img":640,"boxes_per_img":[3,14]}`,
			simulate(s, sim.Options{Batch: 2, Height: 640, Width: 640, Train: true, BoxCounts: []int64{3, 14}})},
		{`{"kind":"train_step","model":"yolov9-s","batch":3,"img":640,"boxes_per_img":[3,4]}`, `onnxmem: 2 box counts for a batch of 3`},
		{`{"kind":"train_step","model":"yolov9-s","batch":2,"img":640,"amp":true,"boxes_per_img":4,"warm_steps":1}`,
			simulate(s, sim.Options{Batch: 2, Height: 640, Width: 640, AMP: true, Train: true, Boxes: 4, WarmSteps: 1})},
		{`{"kind":"train_step","model":"yolov9-s","batch":2,"img":640,"boxes_per_img":4,"warm_steps":2}`, `onnxmem: warm steps 2 without float16 amp`},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img":640,"warm_steps":2}`, `onnxmem: model_step line: unknown field "warm_steps"`},
		{`{"kind":"train_step","model":"yolov9-s","batch":2,"img":640,"boxes_per_img":4,"half":true}`, `onnxmem: train steps train float32 parameters, with or without amp: half does not apply`},
		{`{"kind":"train_step","model":"yolov9-s","batch":2,"img":640,"boxes_per_img":4,"half":false}`, simulate(s, sim.Options{Batch: 2, Height: 640, Width: 640, Train: true, Boxes: 4})},
		{`{"kind":"train_step","model":"yolov9-s","batch":2,"img":640,"boxes_per_img":"many"}`, `onnxmem: field "boxes_per_img": "many" is neither`},
		{`{"kind":"max_batch","step":"train_step","model":"yolov9-s","img":640,"boxes_per_img":[3,4],"capacity_bytes":1000000000}`, `onnxmem: max_batch: boxes_per_img is a list`},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img":640,"boxes_per_img":4}`, `onnxmem: model_step line: unknown field "boxes_per_img"`},
		{`{"kind":"train_step","model":"yolov9-s","batch":2,"img":640}`, `onnxmem: missing field "boxes_per_img": the yolov9 family's loss assigns each image's boxes`},
		{`{"kind":"train_step","model":"torchvision/resnet18-train.onnx","batch":2,"img":224,"optimizer":"SGD"}`,
			simulate(rn18, sim.Options{Batch: 2, Height: 224, Width: 224, Train: true, Optimizer: sim.SGD})},
		{`{"kind":"eval_step","model":"yolov9-s","batch":2,"img":640,"half":false}`, simulate(s, sim.Options{Batch: 2, Height: 640, Width: 640, Eval: true, EvalFloat: true})},
		{`{"kind":"max_batch","step":"model_step","model":"yolov9-s","img":640,"batch":4,"capacity_bytes":1}`, `onnxmem: max_batch line: unknown field "batch"`},
		{`{"kind":"max_batch","step":"train","model":"yolov9-s","img":640,"capacity_bytes":1}`, `onnxmem: max_batch: unknown step "train"`},
		{`{"kind":"max_batch","step":"model_step","model":"yolov9-s","img":640}`, `onnxmem: missing field "capacity_bytes"`},
		{`{"kind":"max_batch","step":"model_step","model":"yolov9-t","img":64,"capacity_bytes":9000000000000000000}`, `onnxmem: max_batch: batch 65536, the most predict searches, still fits`},
		{`{"kind":"train_run","model":"yolov9-s","batch":2,"img":640,"events":[]}`, `onnxmem: run: the events must start with one setup event`},
		{`{"kind":"train_run","cfg":"yolov9-s","model":null,"batch":2,"img":320,"amp":true,"optimizer":"SGD","ema":true,"events":[{"setup":{}},` +
			`{"train":{"boxes_per_img":[3,0]}},{"train":{"boxes_per_img":5}},{"val":{"batch":3,"img_h":256,"img_w":320,"boxes_per_img":[1,2,3]}},{"val":{"batch":1,"img":320}},{"ckpt":{}}]}`,
			run(s, runSc, runEv)},
		{`{"kind":"train_run","model":"yolov9-s","batch":2,"img":320,"amp":true,"ema":true,"events":[{"setup":{}},{"train":{"boxes_per_img":[1,2],"skipped":true}},{"train":{"boxes_per_img":[1,2]}}]}`,
			run(s, runSc, []sim.RunEvent{{Kind: "setup"}, {Kind: "train", BoxCounts: []int64{1, 2}, Skipped: true}, {Kind: "train", BoxCounts: []int64{1, 2}}})},
		{`{"kind":"train_run","model":"yolov9-s","batch":2,"img":320,"amp":true,"ema":true,"warm_steps":1,"events":[{"setup":{}},{"train":{"boxes_per_img":[1,2]}}]}`,
			run(s, sim.Options{Batch: 2, Height: 320, Width: 320, AMP: true, Train: true, EMA: true, WarmSteps: 1}, []sim.RunEvent{{Kind: "setup"}, {Kind: "train", BoxCounts: []int64{1, 2}}})},
		{`{"kind":"train_run","model":"yolov9-s","batch":2,"img":320,"amp":true,"warm_steps":2,"events":[{"setup":{}},{"train":{"boxes_per_img":[1,2],"skipped":true}}]}`, `onnxmem: run: warm steps 2 with events marked skipped`},
		{`{"kind":"train_run","model":"yolov9-s","batch":2,"img":640,"events":[{"setup":{}},{"train":{}}]}`, `onnxmem: train_run: event 1 (train): missing field "boxes_per_img"`},
		{`{"kind":"train_run","model":"yolov9-s","batch":2,"img":640,"events":[{"setup":{}},{"train":{"boxes_per_img":[1,2],"lr":0.1}}]}`, `onnxmem: train_run: event 1 (train): unknown field "lr"`},
		{`{"kind":"train_run","model":"yolov9-s","batch":2,"img":640,"events":[{"setup":{}},{"epoch":{}}]}`, `onnxmem: train_run: event 1: unknown kind "epoch"`},
		{`{"kind":"train_run","model":"yolov9-s","batch":2,"img":640,"events":[{"setup":{}},{"val":{"batch":4}}]}`, `onnxmem: train_run: event 1 (val): give img_h and img_w`},
		{`{"kind":"train_run","model":"yolov9-s","batch":2,"img":640,"boxes_per_img":4,"events":[{"setup":{}}]}`, `onnxmem: train_run line: unknown field "boxes_per_img"`},
		{`{"kind":"train_run","model":"yolov9-s","batch":2,"img":640,"events":[{"setup":{}},{"setup":{}}]}`, `onnxmem: run: event 1: setup comes once, first`},
		{`{"kind":"model_step","batch":2,"img":640}`, `onnxmem: missing field "model"`},
		{`{"kind":"model","model":"yolov9-s","params":9804512,"param_bytes":39218048,"buffer_bytes":162072,"alloc_after_load":39840256,"n_layers":30}`, fp(s, sim.Options{})},
		{`{"kind":"model","model":null,"cfg":"yolov9-s","nc":20}`, fp(nc20, sim.Options{})},
		{`{"kind":"model","model":"yolov9-s","alloc_conf":"expandable_segments:True"}`, fp(s, sim.Options{AllocConf: "expandable_segments:True"})},
		{`{"kind":"model","model":"yolov9-s","batch":2}`, `onnxmem: model line: unknown field "batch"`},
		{`{"kind":"model_step","model":"../groundtruth/../yolov9/yolov9-s-train.onnx","batch":2,"img":640}`, `onnxmem: model "../groundtruth/../yolov9/yolov9-s-train.onnx": give a path inside -root`},
		{`{"kind":"model_step","model":"/etc/passwd","batch":2,"img":640}`, `onnxmem: model "/etc/passwd": give a path inside -root`},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img_h":384,"img_w":640,"checkpoint":[[0,5],[9,12]]}`,
			simulate(s, sim.Options{Batch: 2, Height: 384, Width: 640, Checkpoint: []sim.Range{{From: 0, To: 6}, {From: 9, To: 13}}})},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img":640,"checkpoint":[[0,100]]}`, `onnxmem: checkpoint range 0-100: yolov9-s has 30 top-level layers`},
		{`{"kind":"model_step","model":"yolov9-s","batch":2,"img":640,"checkpoint":[[5,1]]}`, `onnxmem: field "checkpoint": range [5 1]`},
	} {
		checkPredictLine(t, shared, tc.line, tc.want)
	}
}

// checkPredictLine runs predict -root root on one line and checks its
// answer: the predicted object want, or an error starting with want when
// want starts "onnxmem: ".
func checkPredictLine(t *testing.T, root, line, want string) {
	t.Helper()
	code, stdout, stderr := runCmd(t, line, "predict", "-root", root)
	if code != 0 || stderr != "" {
		t.Fatalf("%s: exit code %d, stderr %q", line, code, stderr)
	}
	var obj struct {
		Predicted json.RawMessage
		Error     string
	}
	if err := json.Unmarshal([]byte(stdout), &obj); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	if strings.HasPrefix(want, "onnxmem: ") {
		if !strings.HasPrefix(obj.Error, want) || obj.Predicted != nil {
			t.Errorf("%s: error %q, predicted %s; want an error starting %q", line, obj.Error, obj.Predicted, want)
		}
		return
	}
	if obj.Error != "" || string(obj.Predicted) != want {
		t.Errorf("%s:\n got %s %s\nwant %s", line, obj.Predicted, obj.Error, want)
	}
}

// TestPredictClassesInOneRun checks that lines of one built-in model with
// other classes, in one run of predict, each get their own model: the
// model is kept by name and classes, not by name alone.
func TestPredictClassesInOneRun(t *testing.T) {
	line := func(nc int) string {
		return fmt.Sprintf(`{"kind":"model_step","model":"yolov9-s","batch":2,"img":320,"nc":%d}`, nc)
	}
	code, stdout, stderr := runCmd(t, line(80)+"\n"+line(20)+"\n"+line(80)+"\n", "predict", "-alone")
	if code != 0 || stderr != "" {
		t.Fatalf("exit code %d, stderr %q", code, stderr)
	}
	var peaks []int64
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var obj struct {
			Predicted struct{ Peak int64 }
			Error     string
		}
		if err := json.Unmarshal([]byte(l), &obj); err != nil || obj.Error != "" {
			t.Fatalf("%s: %v", l, err)
		}
		peaks = append(peaks, obj.Predicted.Peak)
	}
	if len(peaks) != 3 || peaks[0] == peaks[1] || peaks[0] != peaks[2] {
		t.Errorf("peaks of nc 80, 20, 80: %v; want the first and last equal, the second another", peaks)
	}
}

// TestPredictRootSymlinks checks that -root is a root: a symbolic link
// inside it that points out of it is refused, one that stays inside is
// followed.
func TestPredictRootSymlinks(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	model := filepath.Join(outside, "gelan-t.onnx")
	if code, _, stderr := runCmd(t, "", "export-model", "-o", model, "gelan-t"); code != 0 {
		t.Fatalf("export-model: exit code %d: %s", code, stderr)
	}
	if err := os.Symlink(model, filepath.Join(root, "out.onnx")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "sub", "in.onnx"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("sub", "in.onnx"), filepath.Join(root, "link.onnx")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "dir")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ model, err string }{
		{"out.onnx", "path escapes from parent"},
		{"dir/gelan-t.onnx", "path escapes from parent"},
		{"link.onnx", ""},
		{"sub/in.onnx", ""},
	} {
		line := `{"kind":"model_step","model":"` + tc.model + `","batch":1,"img":64}`
		code, stdout, stderr := runCmd(t, line, "predict", "-root", root)
		if code != 0 || stderr != "" {
			t.Fatalf("%s: exit code %d, stderr %q", tc.model, code, stderr)
		}
		var obj struct {
			Predicted json.RawMessage
			Error     string
		}
		if err := json.Unmarshal([]byte(stdout), &obj); err != nil {
			t.Fatalf("%s: %v", tc.model, err)
		}
		switch {
		case tc.err == "" && obj.Error != "":
			t.Errorf("%s: %s", tc.model, obj.Error)
		case tc.err != "" && !strings.Contains(obj.Error, tc.err):
			t.Errorf("%s: error %q, want one saying %q", tc.model, obj.Error, tc.err)
		case tc.err != "" && obj.Predicted != nil:
			t.Errorf("%s: predicted %s for a file outside -root", tc.model, obj.Predicted)
		}
	}
}

// TestPredictLongLine checks that a line longer than predict reads is
// answered with an error line, and the lines around it as usual.
func TestPredictLongLine(t *testing.T) {
	ok := `{"kind":"model_step","model":"gelan-t","batch":1,"img":64}`
	in := ok + "\n" + strings.Repeat(" ", maxLine+1) + "\n" + ok + "\n"
	code, stdout, stderr := runCmd(t, in, "predict")
	if code != 0 || stderr != "" {
		t.Fatalf("exit code %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines out for 3 in:\n%s", len(lines), stdout)
	}
	for i, l := range lines {
		var obj struct {
			Predicted json.RawMessage
			Error     string
		}
		if err := json.Unmarshal([]byte(l), &obj); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if long := i == 1; long != strings.Contains(obj.Error, "longer than") || long == (obj.Predicted != nil) {
			t.Errorf("line %d: %s", i+1, l)
		}
	}
}

// TestPredictInferenceExport checks that a line naming an inference export
// gets the prediction of the model's training export, with "simulated_as"
// naming the built-in model that stood for it, and that the commands say
// so on stderr.
func TestPredictInferenceExport(t *testing.T) {
	sharedFile(t, "yolov9/gelan-t-infer.onnx")
	in := `{"kind":"train_step","model":"yolov9/gelan-t-infer.onnx","batch":2,"img":320,"boxes_per_img":3}` + "\n" +
		`{"kind":"train_step","model":"yolov9/gelan-t-train.onnx","batch":2,"img":320,"boxes_per_img":3}` + "\n"
	code, out, stderr := runCmd(t, in, "predict", "-root", shared)
	if code != 0 || stderr != "" {
		t.Fatalf("exit code %d, stderr %q", code, stderr)
	}
	lines := outputLines(t, out)
	if len(lines) != 2 || string(lines[0]["simulated_as"]) != `"gelan-t"` || lines[1]["simulated_as"] != nil {
		t.Fatalf("simulated_as: %s and %s; want \"gelan-t\" and none", lines[0]["simulated_as"], lines[1]["simulated_as"])
	}
	if a, b := string(lines[0]["predicted"]), string(lines[1]["predicted"]); a != b || a == "" {
		t.Errorf("the inference export predicts %s, its training export %s", a, b)
	}
	// With nc, the stand-in is built with nc classes.
	in = `{"kind":"model_step","model":"yolov9/gelan-t-infer.onnx","batch":2,"img":320,"nc":20}` + "\n" +
		`{"kind":"model_step","model":null,"cfg":"gelan-t","batch":2,"img":320,"nc":20}` + "\n"
	_, out, _ = runCmd(t, in, "predict", "-alone", "-root", shared)
	nc := outputLines(t, out)
	if len(nc) != 2 || string(nc[0]["predicted"]) != string(nc[1]["predicted"]) || string(nc[0]["simulated_as"]) != `"gelan-t"` {
		t.Errorf("nc 20 beside an inference export: %s; want the 20-class gelan-t's %s, simulated_as gelan-t", out, nc[1]["predicted"])
	}
	code, _, stderr = runCmd(t, "", "sweep", "-step", "model", "-batches", "1", filepath.Join(shared, "yolov9", "gelan-t-infer.onnx"))
	if code != 0 || !strings.Contains(stderr, "gelan-t-infer.onnx is an inference export") || !strings.Contains(stderr, "simulating the built-in gelan-t with 80 classes") {
		t.Errorf("sweep of an inference export: exit code %d, stderr %q; want the stand-in named", code, stderr)
	}
}

// TestClassesFlag checks -nc: a built-in model built with the classes (the
// peak of BuiltinOptions' model, the name saying nc), a file whose head
// has other classes refused, and a family that reads no classes refused.
func TestClassesFlag(t *testing.T) {
	m, err := sim.BuiltinClasses("yolov9-t", 20)
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCmd(t, "", "sweep", "-step", "model", "-json", "-batches", "2", "-img", "320", "-nc", "20", "yolov9-t")
	var js sweepJSON
	if code != 0 || stderr != "" || json.Unmarshal([]byte(out), &js) != nil || len(js.Results) != 1 {
		t.Fatalf("sweep -nc 20: exit code %d, stderr %q, output %q", code, stderr, out)
	}
	if js.Model != "yolov9-t nc=20" {
		t.Errorf("model %q, want \"yolov9-t nc=20\"", js.Model)
	}
	base, err := sim.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	r80, err := base.Simulate(sim.Options{Batch: 2, Height: 320, Width: 320})
	if err != nil {
		t.Fatal(err)
	}
	r20, err := m.Simulate(sim.Options{Batch: 2, Height: 320, Width: 320})
	if err != nil {
		t.Fatal(err)
	}
	if js.Results[0].Peak != r20.Peak || r20.Peak == r80.Peak {
		t.Errorf("sweep -nc 20 peak %d; want the 20-class model's %d, not the 80-class %d", js.Results[0].Peak, r20.Peak, r80.Peak)
	}
	code, out, stderr = runCmd(t, "", "maxbatch", "-json", "-train", "-budget", "4", "-img", "320", "-nc", "20", "yolov9-t")
	var mb maxBatchJSON
	if code != 0 || json.Unmarshal([]byte(out), &mb) != nil || mb.Result == nil {
		t.Fatalf("maxbatch -train -nc 20: exit code %d, stderr %q", code, stderr)
	}
	if n, _, err := m.MaxBatch(sim.Options{Height: 320, Width: 320, Train: true, Boxes: 16, EMA: true}, 4<<30, 1024); err != nil || n != mb.MaxBatch {
		t.Errorf("maxbatch -train -nc 20: %d, want the 20-class model's %d (%v)", mb.MaxBatch, n, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sweep", "-step", "model", "-nc", "20", sharedFile(t, "yolov9/yolov9-t-train.onnx")}, "-nc 20: yolov9-t-train predicts 80 classes: give a built-in model's name"},
		{[]string{"sweep", "-step", "model", "-nc", "3", sharedFile(t, "torchvision/resnet18-train.onnx")}, "-nc 3: resnet18-train's family (generic) reads no classes"},
		{[]string{"sweep", "-step", "model", "-nc", "0", "yolov9-t"}, "-nc 0: a head predicts at least 1 class"},
	} {
		if code, _, stderr := runCmd(t, "", tc.args...); code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit code %d, stderr %q; want 1 and %q", tc.args, code, stderr, tc.want)
		}
	}
}

// outputLines decodes predict's output, one JSON object a line.
func outputLines(t *testing.T, out string) []map[string]json.RawMessage {
	t.Helper()
	var lines []map[string]json.RawMessage
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &obj); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, obj)
	}
	return lines
}
