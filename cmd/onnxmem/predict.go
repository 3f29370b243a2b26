package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/onnxmem/onnxmem/onnxmem"
)

func cmdPredict(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("predict",
		"onnxmem predict [-root DIR] < SCENARIOS.jsonl",
		"Predict reads scenarios as JSON Lines on stdin and writes one line for each\n(blank lines are skipped): the same object with \"predicted\" added, or with\n\"error\" when the scenario cannot be simulated. Model paths are relative to\n-root; a model that names no file there but a built-in model (onnxmem models)\nis that model.",
		"onnxmem predict -root ../shared < ../shared/groundtruth/calibration.jsonl")
	root := f.String("root", ".", "`dir`ectory the scenarios' model paths are relative to")
	pos, code, ok := f.parse(args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return f.usageError(stderr, "predict reads stdin and takes no arguments, got: %s", pos[0])
	}
	p := &predictor{root: *root, models: map[string]loaded{}}
	in := bufio.NewReader(stdin)
	out := bufio.NewWriter(stdout)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for n := 1; ; n++ {
		line, rerr := in.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			if err := enc.Encode(p.predict(line, n)); err != nil {
				return fail(stderr, err)
			}
			// One line out per line in, at once: a caller may wait for it.
			if err := out.Flush(); err != nil {
				return fail(stderr, err)
			}
		}
		if rerr == io.EOF {
			return 0
		}
		if rerr != nil {
			return fail(stderr, fmt.Errorf("reading stdin: %w", rerr))
		}
	}
}

// predictor answers scenarios, loading each model file once.
type predictor struct {
	root   string
	models map[string]loaded // by path
}

// loaded is a model or the error loading it gave.
type loaded struct {
	m   *onnxmem.Model
	err error
}

// predict answers one line: the scenario with "predicted" or "error" added
// (and a stale one of the two removed), or for a line that is not a JSON
// object, {"error", "line", "raw"}.
func (p *predictor) predict(line []byte, n int) map[string]json.RawMessage {
	line = bytes.TrimSpace(line)
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil || obj == nil {
		msg := fmt.Sprintf("onnxmem: line %d: not a JSON object", n)
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			msg = fmt.Sprintf("onnxmem: line %d: invalid JSON: %v", n, err)
		}
		return map[string]json.RawMessage{"error": marshal(msg), "line": marshal(n), "raw": marshal(string(line))}
	}
	delete(obj, "predicted")
	delete(obj, "error")
	r, err := p.simulate(obj)
	if err != nil {
		obj["error"] = marshal(errText(err))
	} else {
		obj["predicted"] = marshal(newPredicted(r))
	}
	return obj
}

// simulate predicts the scenario a line describes.
func (p *predictor) simulate(obj map[string]json.RawMessage) (*onnxmem.Result, error) {
	var kind, model string
	var sc onnxmem.Scenario
	var img int64
	if err := field(obj, "kind", &kind, true); err != nil {
		return nil, err
	}
	fields := []error{
		field(obj, "model", &model, true),
		field(obj, "batch", &sc.Batch, true),
		field(obj, "img", &img, true),
		field(obj, "family", &sc.Family, false),
	}
	switch kind {
	case "model_step":
		fields = append(fields, field(obj, "amp", &sc.AMP, false), field(obj, "segments", &sc.Segments, false))
	case "eval_step":
		// Validation always runs a half copy without gradients, whatever
		// the training's amp and segments.
		sc.Eval = true
	case "train_step":
		var opt string
		sc.Train = true
		fields = append(fields,
			field(obj, "amp", &sc.AMP, false),
			field(obj, "segments", &sc.Segments, false),
			field(obj, "boxes_per_img", &sc.Boxes, true),
			field(obj, "optimizer", &opt, false),
			field(obj, "ema", &sc.EMA, false))
		if opt != "" {
			sc.Optimizer = onnxmem.Optimizer(opt)
		}
	default:
		return nil, fmt.Errorf("onnxmem: unknown kind %q (want model_step, train_step or eval_step)", kind)
	}
	for _, e := range fields {
		if e != nil {
			return nil, e
		}
	}
	sc.Height, sc.Width = img, img
	if err := sc.Supported(); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(model) {
		if path := filepath.Join(p.root, model); !builtin(model) || fileExists(path) {
			model = path
		}
	}
	l, ok := p.models[model]
	if !ok {
		l.m, l.err = load(model)
		p.models[model] = l
	}
	if l.err != nil {
		return nil, l.err
	}
	return l.m.Simulate(sc)
}

// field decodes obj[name] into v. A missing or null field leaves v alone and
// is an error only when required.
func field(obj map[string]json.RawMessage, name string, v any, required bool) error {
	raw, ok := obj[name]
	if !ok || string(raw) == "null" {
		if required {
			return fmt.Errorf("onnxmem: missing field %q", name)
		}
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		want := "a string"
		switch v.(type) {
		case *bool:
			want = "true or false"
		case *int, *int64:
			want = "an integer"
		}
		return fmt.Errorf("onnxmem: field %q: %s is not %s", name, raw, want)
	}
	return nil
}

// marshal encodes a value that always encodes.
func marshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
