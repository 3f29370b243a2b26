package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/family/yolov9/models"
	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/onnxmem"
)

var update = flag.Bool("update", false, "rewrite golden files")

// shared is the shared folder beside the repository, from this directory.
const shared = "../../../shared"

// sharedFile returns a file of the shared folder. When it is missing the test
// is skipped, or fails on CI, where the folder must be there.
func sharedFile(t *testing.T, rel string) string {
	t.Helper()
	p := filepath.Join(shared, rel)
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("shared test data missing on CI: %v (the shared folder must sit beside the repository)", err)
		}
		t.Skipf("shared test data missing: %v", err)
	}
	return p
}

// smallModel is the graph the tests simulate: small and quick.
func smallModel(t *testing.T) string {
	return sharedFile(t, "yolov9/yolov9-s-train.onnx")
}

// runCmd runs the program with args and stdin, returning the exit code and
// the outputs.
func runCmd(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("%s differs (-want +got; run go test -update if the change is right):\n%s", path, d)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"-img", "320"}, `unknown command "-img"`},
		{[]string{"help", "bogus"}, `help: unknown command "bogus"`},
		{[]string{"help", "sweep", "report"}, "help takes at most one command"},
		{[]string{"report", "a.onnx", "b.onnx"}, "want one model, got 2 arguments: a.onnx b.onnx"},
		{[]string{"report", "-batch", "0"}, `invalid value "0" for flag -batch`},
		{[]string{"sweep"}, "no model given"},
		{[]string{"sweep", "-step", "model", "-nope", "m.onnx"}, "flag provided but not defined: -nope"},
		{[]string{"sweep", "-step", "model", "-img", "0", "m.onnx"}, `invalid value "0" for flag -img`},
		{[]string{"sweep", "-step", "model", "-img", "x", "m.onnx"}, `invalid value "x" for flag -img`},
		{[]string{"maxbatch", "-eval", "-amp", "m.onnx"}, "-amp does not apply to -eval"},
		{[]string{"maxbatch", "-eval", "-segments", "2", "m.onnx"}, "-segments does not apply to -eval"},
		{[]string{"maxbatch", "-eval", "-train", "m.onnx"}, "-train does not apply to -eval"},
		{[]string{"maxbatch", "-eval", "-for-batch", "8", "m.onnx"}, "-for-batch finds checkpoint segments, and validation checkpoints nothing: drop -eval"},
		{[]string{"maxbatch", "-eval-float", "m.onnx"}, "-eval-float applies to the validation step: add -eval"},
		{[]string{"sweep", "-step", "model", "-img", "640x", "m.onnx"}, `invalid value "640x" for flag -img: want a side of at least 1 pixel such as 640, or HEIGHTxWIDTH such as 384x640`},
		{[]string{"sweep", "-step", "model", "-img", "384x0", "m.onnx"}, `invalid value "384x0" for flag -img`},
		{[]string{"sweep", "-step", "model", "-img", "384x640x2", "m.onnx"}, `invalid value "384x640x2" for flag -img`},
		{[]string{"sweep", "-step", "model", "-batches", "1,x", "m.onnx"}, `invalid value "1,x" for flag -batches: batch size "x"`},
		{[]string{"sweep", "-step", "model", "-batches", "", "m.onnx"}, `invalid value "" for flag -batches`},
		{[]string{"sweep", "-step", "model", "m.onnx", "-batches", "0"}, `invalid value "0" for flag -batches`},
		{[]string{"sweep", "-step", "model", "-svg"}, "flag needs an argument: -svg"},
		{[]string{"timeline"}, "no model given"},
		{[]string{"timeline", "-step", "model", "-batch", "-3", "m.onnx"}, `invalid value "-3" for flag -batch`},
		{[]string{"maxbatch", "m.onnx", "n.onnx"}, "want one model"},
		{[]string{"maxbatch", "-budget", "0", "m.onnx"}, `invalid value "0" for flag -budget`},
		{[]string{"maxbatch", "-budget", "NaN", "m.onnx"}, `invalid value "NaN" for flag -budget`},
		{[]string{"maxbatch", "-limit", "0", "m.onnx"}, `invalid value "0" for flag -limit`},
		{[]string{"predict", "x.jsonl"}, "predict reads stdin and takes no arguments"},
		{[]string{"knobs"}, "no model given"},
		{[]string{"knobs", "-step", "model", "-batch", "0", "m.onnx"}, `invalid value "0" for flag -batch`},
		{[]string{"knobs", "-step", "model", "-budget", "-1", "m.onnx"}, `invalid value "-1" for flag -budget`},
		{[]string{"knobs", "-step", "model", "-segments", "2", "m.onnx"}, "flag provided but not defined: -segments"},
		{[]string{"sweep", "-amp", "-half", "yolov9-t"}, "-amp and -half exclude each other"},
		{[]string{"maxbatch", "-segments", "-1", "yolov9-t"}, "-segments must be 0 or more"},
		{[]string{"timeline", "-amp", "-half", "yolov9-t"}, "-amp and -half exclude each other"},
		{[]string{"devices", "m.onnx"}, "devices takes no arguments, got: m.onnx"},
		{[]string{"devices", "-budget", "24"}, "flag provided but not defined: -budget"},
		{[]string{"maxbatch", "-device", "rtx4090", "-budget", "24", "m.onnx"}, "-device and -budget exclude each other"},
		{[]string{"maxbatch", "-budget", "24", "m.onnx", "-device", "a100-40"}, "-device and -budget exclude each other"},
		{[]string{"maxbatch", "-device", "rtx9090", "m.onnx"}, `unknown device "rtx9090": want one of h200, h100-80, a100-80`},
		{[]string{"maxbatch", "-device", "", "m.onnx"}, `unknown device ""`},
		{[]string{"maxbatch", "m.onnx", "-device"}, "flag needs an argument: -device"},
		{[]string{"maxbatch", "-boxes", "8", "m.onnx"}, "-boxes applies to train steps: add -train"},
		{[]string{"maxbatch", "-optimizer", "Adam", "m.onnx"}, "-optimizer applies to train steps: add -train"},
		{[]string{"maxbatch", "-ema=false", "m.onnx"}, "-ema applies to train steps: add -train"},
		{[]string{"maxbatch", "-train", "-optimizer", "RMSprop", "m.onnx"}, `invalid value "RMSprop" for flag -optimizer: want SGD, Adam, AdamW, Lion or none`},
		{[]string{"maxbatch", "-train", "-boxes", "-1", "m.onnx"}, "-boxes must be 0 or more"},
		{[]string{"report", "-step", "model", "-warm-steps", "2", "m.onnx"}, "-warm-steps applies to train steps: add -train"},
		{[]string{"maxbatch", "-train", "-warm-steps", "0", "m.onnx"}, "-warm-steps must be 1 or more: the last iteration makes the optimizer's state"},
		{[]string{"maxbatch", "-train", "-warm-steps", "2", "m.onnx"}, "-warm-steps 2 needs -amp"},
		{[]string{"explain", "-train", "-warm-steps", "3", "yolov9-t"}, "-warm-steps 3 needs -amp"},
		{[]string{"maxbatch", "-train", "-boxes", "x", "m.onnx"}, `invalid value "x" for flag -boxes`},
		{[]string{"export-model", "-width", "0", "yolov9-t"}, "-width 0: want a multiplier above 0"},
		{[]string{"export-model", "-depth", "NaN", "yolov9-t"}, "-depth NaN: want a multiplier above 0"},
		{[]string{"sweep", "-step", "model", "-segments", "31", "-checkpoint", "0-3", "yolov9-t"}, "-segments and -checkpoint exclude each other"},
		{[]string{"sweep", "-step", "model", "-checkpoint", "5-1", "yolov9-t"}, `range "5-1"`},
		{[]string{"maxbatch", "-train", "-half", "m.onnx"}, "-half does not apply to -train"},
		{[]string{"maxbatch", "-train", "-amp", "-half", "m.onnx"}, "-amp and -half exclude each other"},
		{[]string{"maxbatch", "-for-batch", "-3", "m.onnx"}, "-for-batch must be at least 1"},
		{[]string{"maxbatch", "-for-batch", "0", "m.onnx"}, "-for-batch must be at least 1"},
		{[]string{"maxbatch", "-for-batch", "x", "m.onnx"}, `invalid value "x" for flag -for-batch`},
		{[]string{"maxbatch", "-for-batch", "8", "-segments", "2", "m.onnx"}, "-for-batch tries the segments itself: drop -segments"},
		{[]string{"maxbatch", "-for-batch", "8", "-limit", "100", "m.onnx"}, "-limit bounds the search for the largest batch"},
		{[]string{"maxbatch", "-for-batch", "8", "-device", "bogus", "m.onnx"}, `unknown device "bogus"`},
		{[]string{"maxbatch", "-for-batch", "8"}, "no model given"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCmd(t, "", tc.args...)
			if code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if stdout != "" {
				t.Errorf("stdout not empty: %q", stdout)
			}
			if !strings.HasPrefix(stderr, "onnxmem: ") || !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q does not start with \"onnxmem: \" and contain %q", stderr, tc.want)
			}
			if strings.Count(stderr, "onnxmem: ") != 1 {
				t.Errorf("stderr %q: want the prefix once", stderr)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, c := range commands() {
		if c.name == "help" {
			continue
		}
		for _, args := range [][]string{{c.name, "-h"}, {c.name, "--help"}, {"help", c.name}} {
			code, stdout, stderr := runCmd(t, "", args...)
			if code != 0 || stderr != "" {
				t.Errorf("%q: exit code %d, stderr %q; want 0 and none", args, code, stderr)
			}
			if !strings.HasPrefix(stdout, "usage: onnxmem "+c.name) || !strings.Contains(stdout, "\nexample:\n  onnxmem "+c.name) {
				t.Errorf("%q: usage lacks syntax or example:\n%s", args, stdout)
			}
		}
	}
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, stdout, stderr := runCmd(t, "", args...)
		if code != 0 || stderr != "" {
			t.Errorf("%q: exit code %d, stderr %q; want 0 and none", args, code, stderr)
		}
		for _, c := range commands() {
			if !strings.Contains(stdout, "\n  "+c.name+" ") {
				t.Errorf("%q: list lacks %s:\n%s", args, c.name, stdout)
			}
		}
	}
}

func TestMissingModelFile(t *testing.T) {
	for _, cmd := range []string{"report", "sweep", "timeline", "maxbatch", "knobs"} {
		code, stdout, stderr := runCmd(t, "", cmd, "nope.onnx")
		want := "onnxmem: open nope.onnx: no such file or directory\n"
		if code != 1 || stdout != "" || stderr != want {
			t.Errorf("%s nope.onnx: exit code %d, stdout %q, stderr %q; want 1, none, %q", cmd, code, stdout, stderr, want)
		}
	}
}

// TestDefaultModel runs onnxmem with no arguments where no file exists: the
// report is on the built-in yolov9-c and needs no shared data.
func TestDefaultModel(t *testing.T) {
	t.Chdir(t.TempDir())
	code, stdout, stderr := runCmd(t, "", "report", "-step", "model", "-batches", "1,2", "-batch", "2")
	if code != 0 || stderr != "" {
		t.Fatalf("exit code %d, stderr %q; want 0 and none", code, stderr)
	}
	want := "model  yolov9-c (built in, node for node its export)\n       the default model; pass MODEL.onnx or a built-in name for another\n"
	if !strings.HasPrefix(stdout, want) {
		t.Errorf("report begins\n%s\nwant\n%s", stdout[:min(len(stdout), 200)], want)
	}
}

// TestScriptDefault checks that report and knobs call AMP train_dual.py's
// default for a YOLOv9 model only: a torchvision export's training script
// is not known.
func TestScriptDefault(t *testing.T) {
	const note = "train_dual.py's default"
	rn18 := sharedFile(t, "torchvision/resnet18-train.onnx")
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"report", "-step", "model", "-batches", "1", "-batch", "1", "yolov9-t"}, 2},
		{[]string{"report", "-step", "model", "-img", "224", "-batches", "1", "-batch", "1", rn18}, 0},
		{[]string{"knobs", "-step", "model", "-batch", "1", "yolov9-t"}, 1},
		{[]string{"knobs", "-step", "model", "-img", "224", "-batch", "1", rn18}, 0},
	} {
		code, stdout, stderr := runCmd(t, "", c.args...)
		if n := strings.Count(stdout, note); code != 0 || stderr != "" || n != c.want {
			t.Errorf("%v: exit code %d, stderr %q, the note %q %d times; want %d", c.args, code, stderr, note, n, c.want)
		}
	}
}

// TestBuiltinNames checks that every command takes a built-in name where it
// takes a file, that a file of that name wins, and that an unknown name says
// what is known.
func TestBuiltinNames(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, args := range [][]string{
		{"report", "-step", "model", "-batches", "1", "-batch", "1", "gelan-t"},
		{"sweep", "-batches", "1,2", "gelan-t"},
		{"timeline", "-batch", "1", "gelan-t"},
		{"maxbatch", "-step", "model", "-budget", "2", "gelan-t"},
		{"knobs", "-batch", "2", "gelan-t"},
	} {
		if code, _, stderr := runCmd(t, "", args...); code != 0 || stderr != "" {
			t.Errorf("%q: exit code %d, stderr %q; want 0 and none", args, code, stderr)
		}
	}
	code, _, stderr := runCmd(t, "", "sweep", "-step", "model", "yolov9-x")
	want := "onnxmem: yolov9-x is neither a file nor a built-in model (" + strings.Join(models.Names(), ", ") + ")\n"
	if code != 1 || stderr != want {
		t.Errorf("unknown name: exit code %d, stderr %q; want 1 and %q", code, stderr, want)
	}
	// A file named like a built-in model is read as a file.
	if err := os.WriteFile("gelan-t", []byte("not onnx"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd(t, "", "sweep", "-step", "model", "gelan-t"); code != 1 || !strings.HasPrefix(stderr, "onnxmem: gelan-t: ir:") {
		t.Errorf("file gelan-t: exit code %d, stderr %q; want 1 and the file's decoding error", code, stderr)
	}
}

// TestModels checks the list of built-in models against testdata.
func TestModels(t *testing.T) {
	code, stdout, stderr := runCmd(t, "", "models")
	if code != 0 || stderr != "" {
		t.Fatalf("exit code %d, stderr %q; want 0 and none", code, stderr)
	}
	golden(t, "models.txt", stdout)
	code, stdout, stderr = runCmd(t, "", "models", "-json")
	if code != 0 || stderr != "" {
		t.Fatalf("-json: exit code %d, stderr %q; want 0 and none", code, stderr)
	}
	var js struct {
		Default string        `json:"default"`
		Models  []builtinInfo `json:"models"`
	}
	if err := json.Unmarshal([]byte(stdout), &js); err != nil {
		t.Fatal(err)
	}
	if js.Default != defaultModel || len(js.Models) != len(models.Names()) {
		t.Errorf("-json: default %q and %d models, want %q and %d", js.Default, len(js.Models), defaultModel, len(models.Names()))
	}
}

// TestExportModel writes a built-in model with other classes and weights,
// and checks that the file predicts what models.Build's bytes do.
func TestExportModel(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t20.onnx")
	code, _, stderr := runCmd(t, "", "export-model", "-classes", "20", "-weights", "-o", path, "yolov9-t")
	if code != 0 || stderr != "" {
		t.Fatalf("exit code %d, stderr %q; want 0 and none", code, stderr)
	}
	data, err := models.Build("yolov9-t", models.Options{Classes: 20, Weights: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("%s: %d bytes differ from models.Build's %d", path, len(got), len(data))
	}
	code, stdout, stderr := runCmd(t, "", "export-model", "-o", "-", "gelan-t")
	if want, _ := models.Build("gelan-t", models.Options{}); code != 0 || stderr != "" || stdout != string(want) {
		t.Errorf("-o -: exit code %d, stderr %q, %d bytes; want 0, none and %d bytes", code, stderr, len(stdout), len(want))
	}
	// -nc is -classes by YOLO's name.
	code, stdout, stderr = runCmd(t, "", "export-model", "-nc", "20", "-o", "-", "gelan-t")
	if want, _ := models.Build("gelan-t", models.Options{Classes: 20}); code != 0 || stderr != "" || stdout != string(want) {
		t.Errorf("-nc 20: exit code %d, stderr %q, %d bytes; want 0, none and %d bytes", code, stderr, len(stdout), len(want))
	}
	// yolov9-t at width 2 is yolov9-s but for its name.
	code, stdout, stderr = runCmd(t, "", "export-model", "-width", "2", "-o", "-", "yolov9-t")
	wide, err := onnxmem.LoadBytes("wide", []byte(stdout))
	if code != 0 || err != nil {
		t.Fatalf("-width 2: exit code %d, stderr %q, %v", code, stderr, err)
	}
	s, err := onnxmem.Builtin("yolov9-s")
	if err != nil {
		t.Fatal(err)
	}
	sc := onnxmem.Scenario{Batch: 2, AMP: true}
	rw, err := wide.Simulate(sc)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s.Simulate(sc)
	if err != nil {
		t.Fatal(err)
	}
	if rw.Peak != rs.Peak {
		t.Errorf("yolov9-t -width 2 peaks at %d bytes, yolov9-s at %d", rw.Peak, rs.Peak)
	}
	if code, _, stderr := runCmd(t, "", "export-model", "-depth", "-1", "gelan-t"); code != 2 || !strings.Contains(stderr, "-depth -1: want a multiplier above 0") {
		t.Errorf("-depth -1: exit code %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, "", "export-model", "yolov9-x"); code != 1 || !strings.HasPrefix(stderr, "onnxmem: models: unknown model \"yolov9-x\"") {
		t.Errorf("unknown model: exit code %d, stderr %q", code, stderr)
	}
	if code, _, _ := runCmd(t, "", "export-model"); code != 2 {
		t.Errorf("no name: exit code %d, want 2", code)
	}
}

func TestProgress(t *testing.T) {
	m := smallModel(t)
	code, _, stderr := runCmd(t, "", "sweep", "-step", "model", "-batches", "1,2", m)
	if code != 0 || stderr != "" {
		t.Errorf("without -v: exit code %d, stderr %q; want 0 and none (stderr is no terminal)", code, stderr)
	}
	code, _, stderr = runCmd(t, "", "sweep", "-step", "model", "-v", "-batches", "1,2", m)
	want := "onnxmem: sweep: batch 1 done (1/2)\nonnxmem: sweep: batch 2 done (2/2)\n"
	if code != 0 || stderr != want {
		t.Errorf("with -v: exit code %d, stderr %q; want 0 and %q", code, stderr, want)
	}
	// The report's steps finish in any order, but the count runs up.
	code, _, stderr = runCmd(t, "", "report", "-step", "model", "-batches", "1,2", m)
	if code != 0 || stderr != "" {
		t.Errorf("report without -v: exit code %d, stderr %q; want 0 and none", code, stderr)
	}
	code, _, stderr = runCmd(t, "", "report", "-step", "model", "-v", "-batches", "1,2", m)
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	const total = 6 * (2 + 3) // six settings: two batch sizes and three devices each
	if code != 0 || len(lines) != total {
		t.Fatalf("report -v: exit code %d, %d lines of progress, want %d:\n%s", code, len(lines), total, stderr)
	}
	seen := map[string]bool{}
	for i, l := range lines {
		what, ok := strings.CutSuffix(l, fmt.Sprintf(" done (%d/%d)", i+1, total))
		if !ok || !strings.HasPrefix(what, "onnxmem: report: ") || seen[what] {
			t.Errorf("report -v: line %d: %q", i+1, l)
		}
		seen[what] = true
	}
	for _, what := range []string{"fp32 at batch 1", "amp k4 at batch 2", "fp32 k2 on rtx4090", "amp on a100-80", "amp k4 on a100-40"} {
		if !seen["onnxmem: report: "+what] {
			t.Errorf("report -v: no line for %s:\n%s", what, stderr)
		}
	}
}

func TestFlagsAfterModel(t *testing.T) {
	m := smallModel(t)
	code, before, stderr := runCmd(t, "", "sweep", "-step", "model", "-batches", "1", "-json", m)
	if code != 0 || stderr != "" {
		t.Fatalf("exit code %d, stderr %q", code, stderr)
	}
	code, after, stderr := runCmd(t, "", "sweep", "-step", "model", m, "-batches", "1", "-json")
	if code != 0 || stderr != "" || after != before {
		t.Errorf("flags after the model: exit code %d, stderr %q, output differs: %v", code, stderr, after != before)
	}
	// After "--" everything is an argument.
	code, _, stderr = runCmd(t, "", "sweep", "-step", "model", "-batches", "1", "--", "-json")
	if want := "onnxmem: -json is neither a file nor a built-in model (" + strings.Join(models.Names(), ", ") + ")\n"; code != 1 || stderr != want {
		t.Errorf("after --: exit code %d, stderr %q; want 1 and %q", code, stderr, want)
	}
}

// TestFamilyFlag checks -family: another family simulates the model, and an
// unknown one is an error that names the families.
func TestFamilyFlag(t *testing.T) {
	code, yolo, stderr := runCmd(t, "", "sweep", "-step", "model", "-json", "-batches", "8", "-img", "640", "-segments", "4", "yolov9-t")
	if code != 0 || stderr != "" {
		t.Fatalf("sweep: exit code %d, stderr %q", code, stderr)
	}
	code, gen, stderr := runCmd(t, "", "sweep", "-step", "model", "-json", "-batches", "8", "-img", "640", "-segments", "4", "-family", "generic", "yolov9-t")
	if code != 0 || stderr != "" {
		t.Fatalf("sweep -family generic: exit code %d, stderr %q", code, stderr)
	}
	if gen == yolo {
		t.Error("-family generic gives the same sweep as the detected yolov9 family")
	}
	code, stdout, stderr := runCmd(t, "", "sweep", "-step", "model", "-family", "yolov5", "yolov9-t")
	want := "onnxmem: yolov9-t: family: unknown family \"yolov5\": want one of yolov9, generic\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Errorf("-family yolov5: exit code %d, stdout %q, stderr %q; want 1, none, %q", code, stdout, stderr, want)
	}
}

// TestRunBounded checks that run and maxbatch refuse, at once and with a
// reason, work that would take hours or memory without end, or a limit no
// search can reach.
func TestRunBounded(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-epochs", "100000", "-iters", "100000", "yolov9-t"}, "more than the 20000 events a run simulates"},
		{[]string{"run", "-epochs", "9223372036854775807", "-iters", "9223372036854775807", "yolov9-t"}, "more than the 20000 events a run simulates"},
		{[]string{"run", "-batch", "4", "-val-images", "9223372036854775807", "yolov9-t"}, "more than the 20000 events a run simulates"},
		{[]string{"run", "-batch", "100000", "yolov9-t"}, "batch 100000: want 1 to 65536"},
		{[]string{"run", "-mean-boxes", "1e300", "yolov9-t"}, "boxes an image on average: want 0 to 65536"},
		{[]string{"run", "-events", "/dev/zero", "yolov9-t"}, "/dev/zero is not a regular file (a device)"},
		{[]string{"run", "-gpus", "3", "-batch", "16", "yolov9-t"}, "-batch 16 over -gpus 3: the batch must be a multiple of the GPUs"},
		{[]string{"run", "-gpus", "-1", "yolov9-t"}, "-gpus must be 0"},
		{[]string{"run", "-sync-bn", "yolov9-t"}, "-sync-bn needs -gpus"},
		{[]string{"maxbatch", "-step", "train", "-gpus", "2", "yolov9-t"}, "-gpus applies to a training run"},
		{[]string{"maxbatch", "-step", "model", "-limit", "9223372036854775807", "-budget", "8", "yolov9-t"}, "a search considers batches up to 1048576"},
		{[]string{"maxbatch", "-limit", "9223372036854775807", "-device", "t4", "yolov9-t"}, "a search considers batches up to 1048576"},
		{[]string{"export-model", "-classes", "1000000000", "-weights", "-o", "-", "yolov9-t"}, "models: yolov9-t: weights with data take more than the 2 GiB one protobuf ONNX file holds"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCmd(t, "", tc.args...)
			if code == 0 || stdout != "" || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit code %d, stdout %q, stderr %q; want an error saying %q", code, stdout, stderr, tc.want)
			}
		})
	}
}

// TestImageDefault checks -img's default: 640 for an export with dynamic
// height and width, the export's own size for one that fixed it (a
// torchvision export at 224), and -img given wins.
func TestImageDefault(t *testing.T) {
	vit := measured.Path("tv/vit_b_16-train.onnx")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sweep", "-step", "model", "-batches", "1", vit}, "image 224x224"},
		{[]string{"sweep", "-step", "model", "-batches", "1", "yolov9-t"}, "image 640x640"},
		{[]string{"sweep", "-step", "model", "-batches", "1", "-img", "320", "yolov9-t"}, "image 320x320"},
	} {
		code, out, stderr := runCmd(t, "", tc.args...)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit code %d, stderr %q, output %q; want %q", tc.args, code, stderr, out, tc.want)
		}
	}
	if code, _, stderr := runCmd(t, "", "sweep", "-step", "model", "-batches", "1", "-img", "640", vit); code != 1 || !strings.Contains(stderr, "the export fixes its input at 224×224") {
		t.Errorf("-img 640 on a 224 export: exit code %d, stderr %q", code, stderr)
	}
}

// TestGenericTrainLabel checks that a generic-family model's train step
// says the loss it runs, cross-entropy on its logits, and not YOLOv9's.
func TestGenericTrainLabel(t *testing.T) {
	rn18 := sharedFile(t, "torchvision/resnet18-train.onnx")
	for _, args := range [][]string{
		{"explain", "-train", "-img", "224", "-batch", "2", rn18},
		{"knobs", "-train", "-img", "224", "-batch", "2", rn18},
		{"report", "-train", "-img", "224", "-batches", "2", "-batch", "2", rn18},
	} {
		code, stdout, stderr := runCmd(t, "", args...)
		if code != 0 || stderr != "" {
			t.Fatalf("%v: exit code %d, stderr %q", args, code, stderr)
		}
		if strings.Contains(stdout, "YOLOv9") || strings.Contains(stdout, "train_dual") || !strings.Contains(stdout, "cross-entropy") {
			t.Errorf("%v: the step is labelled\n%s\nwant the generic loss, cross-entropy, and no YOLOv9", args, stdout[:min(len(stdout), 300)])
		}
	}
}

// TestSweepTimelineTrain checks that sweep and timeline take -train, as
// issue 33 found them refusing it, and label the train step.
func TestSweepTimelineTrain(t *testing.T) {
	for _, args := range [][]string{
		{"sweep", "-train", "-amp", "-img", "320", "-batches", "1,2", "yolov9-t"},
		{"timeline", "-train", "-boxes", "8", "-img", "320", "-batch", "2", "yolov9-t"},
	} {
		code, stdout, stderr := runCmd(t, "", args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "train step (forward, YOLOv9 loss") {
			t.Errorf("%v: exit code %d, stderr %q, output begins %q; want the train step", args, code, stderr, stdout[:min(len(stdout), 120)])
		}
	}
}

// TestImageRoundedToStride checks -img on a YOLOv9 model: train_dual.py's
// check_img_size trains at the size rounded up to a multiple of the stride
// 32, and warns; onnxmem simulates that size and says so on stderr, for a
// side that is a multiple already (384) nothing changes.
func TestImageRoundedToStride(t *testing.T) {
	for _, tc := range []struct{ img, want, note string }{
		{"641", "image 672x672", "-img 641: train_dual.py's check_img_size trains at 672"},
		{"600", "image 608x608", "-img 600: train_dual.py's check_img_size trains at 608"},
		{"384x641", "image 384x672", "trains at 384x672"},
		{"384x640", "image 384x640", ""},
	} {
		code, stdout, stderr := runCmd(t, "", "maxbatch", "-img", tc.img, "-step", "model", "-budget", "2", "-limit", "4", "yolov9-t")
		if code != 0 || !strings.Contains(stdout, tc.want) || (tc.note == "") != (stderr == "") || !strings.Contains(stderr, tc.note) {
			t.Errorf("-img %s: exit code %d, stdout %q, stderr %q; want %q and a note %q", tc.img, code, stdout, stderr, tc.want, tc.note)
		}
	}
}
