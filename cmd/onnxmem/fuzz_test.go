package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
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
