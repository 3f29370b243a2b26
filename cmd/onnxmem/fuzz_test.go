package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/onnxmem/onnxmem/internal/measured"
)

// FuzzPredictLine answers one predict line: whatever the line, the answer
// is a JSON object with "predicted" or "error", and no panic escapes. The
// seeds are lines of every kind, good and bad.
func FuzzPredictLine(f *testing.F) {
	for _, s := range []string{
		`{"kind":"model_step","model":"yolov9-t","batch":2,"img":320,"amp":true,"segments":2}`,
		`{"kind":"train_step","model":"gelan-t","batch":2,"img":320,"boxes_per_img":[1,4],"trainer":"train"}`,
		`{"kind":"eval_step","model":"yolov9-t","batch":4,"img_h":256,"img_w":320}`,
		`{"kind":"max_batch","step":"model_step","model":"yolov9-t","img":320,"capacity_bytes":1000000000}`,
		`{"kind":"train_run","model":"yolov9-t","batch":2,"img":320,"events":[{"setup":{}},{"train":{"boxes_per_img":[1,2]}},{"val":{"batch":4,"img":320}},{"ckpt":{}}]}`,
		`{"kind":"model_step","model":"yolov9-t","batch":2,"img":320,"checkpoint":[[0,3]]}`,
		`{"kind":"model_step","model":"yolov9-t","batch":-1,"img":320}`,
		`{"kind":"model","model":"gelan-t","family":"generic","alloc_conf":"expandable_segments:True"}`,
		`{"kind":"model_step","model":"yolov9-t","batch":2,"inputs":{"images":[2,3,320,256]}}`,
		`{"kind":"max_batch","step":"model_step","model":"yolov9-t","inputs":{"images":[0,3,320,320]},"capacity_bytes":1000000000}`,
		`not json`, `[1,2]`, `{}`,
	} {
		f.Add([]byte(s))
	}
	p := &predictor{root: ".", models: map[string]loaded{}}
	f.Fuzz(func(t *testing.T, line []byte) {
		out := p.predict(line, 1)
		b, err := json.Marshal(out)
		if err != nil {
			t.Fatalf("%s: the answer does not encode: %v", line, err)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			t.Fatalf("%s: the answer is not an object: %s", line, b)
		}
		_, hasP := obj["predicted"]
		_, hasE := obj["error"]
		if hasP == hasE {
			t.Fatalf("%s: the answer has both or neither of predicted and error: %s", line, b)
		}
		// guarded turns a panic into an error line; the fuzzer wants none.
		if hasE && strings.Contains(string(obj["error"]), "internal error") {
			t.Fatalf("%s: a panic: %s", line, obj["error"])
		}
	})
}

// FuzzParseRanges reads -checkpoint's ranges: an error, or ranges in order,
// disjoint and not empty, that rangesFlag writes back to the same ranges.
func FuzzParseRanges(f *testing.F) {
	for _, s := range []string{"0-5,9-12", "3", "5-1", "1,1", "0-9223372036854775807", "-1", " 2 - 3 ,7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rs, err := parseRanges(s)
		if err != nil {
			return
		}
		for i, r := range rs {
			if r.From < 0 || r.To <= r.From || (i > 0 && r.From < rs[i-1].To) {
				t.Fatalf("%q: ranges %v", s, rs)
			}
		}
		back, err := parseRanges(rangesFlag(rs))
		if err != nil || !slices.Equal(back, rs) {
			t.Fatalf("%q: %v written %q read back as %v, %v", s, rs, rangesFlag(rs), back, err)
		}
	})
}

// FuzzImageSize reads -img: an error, or sides of at least 1 pixel that
// String writes back to the same size.
func FuzzImageSize(f *testing.F) {
	for _, s := range []string{"640", "384x640", "384×640", "0", "x", "640x", "1x1", "-3x4", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var img imageSize
		if err := img.Set(s); err != nil {
			return
		}
		if img.H < 1 || img.W < 1 {
			t.Fatalf("%q: %dx%d", s, img.H, img.W)
		}
		var back imageSize
		if err := back.Set(img.String()); err != nil || back != img {
			t.Fatalf("%q: %v written %q read back as %v, %v", s, img, img.String(), back, err)
		}
	})
}

// FuzzRunEvents decodes a run -events file: whatever its bytes, an error
// that starts "onnxmem: " or events of known kinds with sizes that are
// not negative, and no panic.
func FuzzRunEvents(f *testing.F) {
	for _, s := range []string{
		`[{"setup":{}},{"train":{"boxes_per_img":[3,0,12]}},{"val":{"batch":4,"img_h":384,"img_w":640}},{"ckpt":{}}]`,
		`[{"train":{"boxes_per_img":7,"skipped":true}}]`, `[]`, `{}`, `[{"val":{}}]`, `[{"train":{"boxes_per_img":[-1]}}]`, `nope`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		events, err := parseRunEvents(b, "fuzz.json", 4)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "onnxmem: ") {
				t.Fatalf("%q: error %q lacks the prefix", b, err)
			}
			return
		}
		for _, e := range events {
			if !slices.Contains([]string{"setup", "train", "val", "ckpt"}, e.Kind) || e.Batch < 0 || e.Height < 0 || e.Width < 0 || slices.ContainsFunc(e.BoxCounts, func(n int64) bool { return n < 0 }) {
				t.Fatalf("%q: event %+v", b, e)
			}
		}
	})
}

// FuzzSnapshotTrace reads a diff snapshot: whatever the pickle, an error
// that starts "onnxmem: " or the trace's events, and no panic.
func FuzzSnapshotTrace(f *testing.F) {
	f.Add([]byte("\x80\x02}q\x00."))
	f.Add([]byte("\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x0edevice_traces\x94]\x94]\x94as."))
	f.Add([]byte("not a pickle"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := readSnapshotTrace(bytes.NewReader(b), "fuzz.pickle"); err != nil && !strings.HasPrefix(err.Error(), "onnxmem: ") {
			t.Fatalf("%q: error %q lacks the prefix", b, err)
		}
	})
}

// FuzzShortenQuoted shortens the quoted names of any message: the result
// is valid UTF-8 where the message is, never longer than the message plus
// a note per quote, and a message without a long quoted name is unchanged.
func FuzzShortenQuoted(f *testing.F) {
	for _, s := range []string{`node "a" fails`, `"` + strings.Repeat("x", 300) + `"`, `"\"`, `a "b\" c" d`, `"é` + strings.Repeat("é", 90) + `"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := shortenQuoted(s)
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("%q: %q is not UTF-8", s, got)
		}
		if len(got) > len(s)+32*(strings.Count(s, `"`)/2+1) {
			t.Fatalf("%q: %q grew", s, got)
		}
		if !strings.Contains(s, `"`) && got != s {
			t.Fatalf("%q: changed to %q without a quote", s, got)
		}
	})
}

// FuzzInputSpec feeds -input's NAME=DIMS parser arbitrary specs on BERT's
// export: it must return an error or bind a sequence of at least 1 and a
// batch of at least 1, and never panic.
func FuzzInputSpec(f *testing.F) {
	for _, s := range []string{"input_ids=8x512", "input_ids=Bx128", "input_ids=8×512", "ids=1x1", "input_ids=", "=8x512",
		"input_ids=0x5", "input_ids=-1x5", "input_ids=9223372036854775807x9223372036854775807", "input_ids=8x512x3", "input_ids=Bx"} {
		f.Add(s)
	}
	bert := measured.Path("hf/bert-train.onnx")
	f.Fuzz(func(t *testing.T, spec string) {
		fs := newFlagSet("fuzz", "", "", "")
		img := fs.imgFlag()
		batch := fs.positive("batch", 16, "")
		if err := fs.bindInput(bert, spec); err != nil {
			if !strings.HasPrefix(err.Error(), "onnxmem: ") {
				t.Fatalf("%q: error %q lacks the package prefix", spec, err)
			}
			return
		}
		if img.Seq < 1 || *batch < 1 {
			t.Fatalf("%q: bound seq %d, batch %d", spec, img.Seq, *batch)
		}
	})
}
