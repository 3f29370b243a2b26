package main

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/onnxmem"
)

// TestDevices checks the devices command against testdata and the JSON
// against onnxmem.Devices. It needs no shared data.
func TestDevices(t *testing.T) {
	code, stdout, stderr := runCmd(t, "", "devices")
	if code != 0 || stderr != "" {
		t.Fatalf("exit code %d, stderr %q; want 0 and none", code, stderr)
	}
	golden(t, "devices.txt", stdout)

	code, stdout, stderr = runCmd(t, "", "devices", "-json")
	if code != 0 || stderr != "" {
		t.Fatalf("-json: exit code %d, stderr %q; want 0 and none", code, stderr)
	}
	golden(t, "devices.json", stdout)
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	var js devicesJSON
	if err := dec.Decode(&js); err != nil {
		t.Fatal(err)
	}
	if len(js.Devices) != len(onnxmem.Devices()) {
		t.Fatalf("-json: %d devices, want %d", len(js.Devices), len(onnxmem.Devices()))
	}
	for i, d := range onnxmem.Devices() {
		if got := js.Devices[i]; got != newDeviceJSON(d) || got.Usable != got.Total-got.Context || got.Sources == "" {
			t.Errorf("-json: device %d is %+v, want %s with its sources", i, got, d.Name)
		}
	}
}

func TestSegmentCandidates(t *testing.T) {
	for _, tc := range []struct {
		layers int
		want   []int
	}{
		{0, []int{0}},
		{1, []int{0}},
		{2, []int{0, 2}},
		{3, []int{0, 2, 3}},
		{5, []int{0, 2, 3, 4, 5}},
		{8, []int{0, 2, 3, 4, 6, 8}},
		{30, []int{0, 2, 3, 4, 6, 8, 12, 16, 24, 30}},
		{48, []int{0, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48}},
	} {
		if got := segmentCandidates(tc.layers); !slices.Equal(got, tc.want) {
			t.Errorf("%d layers: %v, want %v", tc.layers, got, tc.want)
		}
	}
}

// TestTrainFlags checks the settings that -train, -boxes, -optimizer and
// -ema give; nothing is simulated.
func TestTrainFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want setting
	}{
		{nil, setting{}},
		{[]string{"-amp", "-segments", "2"}, setting{AMP: true, Segments: 2}},
		{[]string{"-train"}, setting{Train: true, Boxes: 16, Optimizer: "SGD", EMA: true}},
		{[]string{"-train", "-amp", "-boxes", "0", "-optimizer", "adamw", "-ema=false"},
			setting{AMP: true, Train: true, Boxes: 0, Optimizer: "AdamW", EMA: false}},
		{[]string{"-optimizer", "none", "-train", "-segments", "3"},
			setting{Segments: 3, Train: true, Boxes: 16, Optimizer: "none", EMA: true}},
		{[]string{"-train", "-amp", "-warm-steps", "1"},
			setting{AMP: true, Train: true, Boxes: 16, Optimizer: "SGD", EMA: true, WarmSteps: 1}},
	} {
		f := newFlagSet("test", "onnxmem test", "", "")
		set, train := f.settingFlags(), f.trainFlags()
		if err := f.Parse(tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		st, err := set()
		if err == nil {
			st, err = train(st)
		}
		if err != nil || !st.equal(tc.want) {
			t.Errorf("%q: %+v, %v; want %+v", tc.args, st, err, tc.want)
		}
		// The setting survives the round trip through a scenario.
		if got := settingOf(st.scenario(4, imageSize{H: 320, W: 320})); !got.equal(st) {
			t.Errorf("%q: settingOf(scenario) = %+v, want %+v", tc.args, got, st)
		}
	}
	st := setting{AMP: true, Train: true, Boxes: 8, Optimizer: "Lion"}
	want := "m: amp train step (forward, YOLOv9 loss with 8 boxes an image, backward, Lion step, no EMA), image 320x320"
	if got := stepTitle(&onnxmem.Model{Name: "m", Family: "yolov9"}, st.scenario(4, imageSize{H: 320, W: 320})); got != want {
		t.Errorf("stepTitle = %q, want %q", got, want)
	}
}

// TestMaxBatchTrain runs maxbatch on train steps.
func TestMaxBatchTrain(t *testing.T) {
	path := smallModel(t)
	code, stdout, stderr := runCmd(t, "", "maxbatch", "-json", "-train", "-amp", "-boxes", "8", "-optimizer", "adamw", "-device", "rtx4090", path)
	if code != 0 || stderr != "" {
		t.Fatalf("exit code %d, stderr %q", code, stderr)
	}
	var mb maxBatchJSON
	if err := json.Unmarshal([]byte(stdout), &mb); err != nil {
		t.Fatal(err)
	}
	d, err := onnxmem.ParseDevice("rtx4090")
	if err != nil {
		t.Fatal(err)
	}
	sc := onnxmem.Scenario{Step: onnxmem.TrainStep, AMP: true, Boxes: 8, Optimizer: "AdamW", Device: d.Name}
	want, _, err := mustLoad(t, path).MaxBatch(sc, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if mb.MaxBatch != want || mb.Result == nil || mb.Result.Train == nil ||
		*mb.Result.Train != (trainJSON{Boxes: 8, Optimizer: "AdamW", EMA: true, WarmSteps: onnxmem.DefaultAMPWarmSteps}) || mb.Result.PeakReserved > d.Usable() {
		t.Errorf("maxbatch -train: %+v, want max batch %d of a train step", mb, want)
	}
	if want < 1 {
		t.Fatalf("not even batch 1 of the train step fits on %s", d.Name)
	}

	code, stdout, stderr = runCmd(t, "", "maxbatch", "-train", "-amp", "-device", "rtx4090", "-for-batch", "1", path)
	if code != 0 || stderr != "" {
		t.Fatalf("-for-batch: exit code %d, stderr %q", code, stderr)
	}
	title := "yolov9-s-train: amp train step (forward, YOLOv9 loss with 16 boxes an image, backward, SGD step, EMA update), image 640x640\n"
	if !strings.HasPrefix(stdout, title) || !strings.Contains(stdout, "batch 1 fits without checkpointing") {
		t.Errorf("-for-batch 1 -train:\n%s", stdout)
	}
}

// TestImageSize checks -img's forms: a side, HEIGHTxWIDTH with x or ×, and
// the string it prints back.
func TestImageSize(t *testing.T) {
	for _, tc := range []struct {
		in, out string
		want    imageSize
	}{
		{"640", "640", imageSize{H: 640, W: 640}},
		{"384x640", "384x640", imageSize{H: 384, W: 640}},
		{"384×640", "384x640", imageSize{H: 384, W: 640}},
		{"320x320", "320", imageSize{H: 320, W: 320}},
	} {
		var s imageSize
		if err := s.Set(tc.in); err != nil || s != tc.want || s.String() != tc.out {
			t.Errorf("Set(%q): %v, %q, %v; want %v, %q", tc.in, s, s.String(), err, tc.want, tc.out)
		}
	}
}

// TestOneAnswer checks issue 33's one number: with no step flag, report,
// maxbatch and run answer for the whole training run alike, on the
// built-in COCO-like data. On an rtx4090, whose cuDNN workspaces were not
// measured, the answer is issue 34's band: report's sure and possible
// batches are maxbatch's, run fits at the sure one (with any workspace
// from none to the H200's), and does not fit at one more than the
// possible one.
func TestOneAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("searches whole runs")
	}
	const model, card = "yolov9-t", "rtx4090"
	var rep struct {
		Devices []struct {
			Name             string `json:"name"`
			MaxBatch         int64  `json:"max_batch"`
			MaxBatchPossible int64  `json:"max_batch_possible"`
		} `json:"devices"`
	}
	code, stdout, stderr := runCmd(t, "", "report", "-json", model)
	if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil {
		t.Fatalf("report: exit code %d, stderr %q", code, stderr)
	}
	var sure, possible int64
	for _, d := range rep.Devices {
		if d.Name == card {
			sure, possible = d.MaxBatch, d.MaxBatchPossible
		}
	}
	var mb struct {
		MaxBatch         int64  `json:"max_batch"`
		MaxBatchPossible *int64 `json:"max_batch_possible"`
	}
	code, stdout, stderr = runCmd(t, "", "maxbatch", "-json", "-device", card, model)
	if code != 0 || json.Unmarshal([]byte(stdout), &mb) != nil {
		t.Fatalf("maxbatch: exit code %d, stderr %q", code, stderr)
	}
	if mb.MaxBatch < 1 || mb.MaxBatch != sure || mb.MaxBatchPossible == nil || *mb.MaxBatchPossible != possible || possible < sure {
		t.Fatalf("maxbatch says %d (possible %v), report %d (possible %d) on %s: want one answer", mb.MaxBatch, mb.MaxBatchPossible, sure, possible, card)
	}
	for b, want := range map[int64]string{sure: "fits", possible + 1: "does not fit"} {
		var r struct {
			Band string `json:"band"`
		}
		code, stdout, stderr = runCmd(t, "", "run", "-json", "-batch", strconv.FormatInt(b, 10), "-device", card, model)
		if code != 0 || json.Unmarshal([]byte(stdout), &r) != nil {
			t.Fatalf("run -batch %d: exit code %d, stderr %q", b, code, stderr)
		}
		if r.Band != want {
			t.Errorf("run -batch %d on %s: %q, want %q (maxbatch says %d sure, %d possible)", b, card, r.Band, want, sure, possible)
		}
	}
}
