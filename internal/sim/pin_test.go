package sim_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/family/yolov9/models"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// pinnedPath holds every calibration prediction: the scenario, the built-in
// model it runs on and the whole Result. It pins the engine's behaviour, so
// that a change of structure can show it changed no number.
var pinnedPath = filepath.Join("..", "..", "testdata", "golden", "pinned.json")

// pinned is one entry of pinnedPath.
type pinned struct {
	Model    string
	Scenario sim.Options
	Result   *sim.Result
}

// pinScenarios lists the scenarios that TestPinned pins: every scenario of
// shared/groundtruth/calibration.jsonl, every one of the own measurements
// under calibration/results, and for each built-in model a model, train and
// eval step in fp32, AMP, half precision and with checkpointing, at two
// image sizes. It needs the shared folder, so only -update calls it.
func pinScenarios(t *testing.T) []pinned {
	var out []pinned
	f, err := os.Open(onnxbuild.Shared(t, "groundtruth/calibration.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var l calibrationLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		out = append(out, pinned{Model: l.Cfg, Scenario: l.scenario()})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"yolov9_segments.json", "yolov9_segments_fresh.json", "yolov9_other_fresh.json"} {
		for _, r := range ownRuns(t, file) {
			out = append(out, pinned{Model: r.Cfg, Scenario: sim.Options{Batch: r.Batch, Height: r.Img, Width: r.Img, AMP: r.AMP, Segments: r.Segments}})
		}
	}
	for _, name := range models.Names() {
		for _, s := range []sim.Options{
			{Batch: 4, Height: 640, Width: 640},
			{Batch: 4, Height: 384, Width: 512, AMP: true, Segments: 3},
			{Batch: 2, Height: 320, Width: 320, Half: true},
			{Batch: 2, Height: 640, Width: 640, Checkpoint: []sim.Range{{From: 2, To: 5}, {From: 9, To: 12}}},
			{Batch: 8, Height: 448, Width: 448, Eval: true},
			{Batch: 2, Height: 640, Width: 640, Train: true, Boxes: 12, Optimizer: sim.AdamW, EMA: true, AMP: true},
			{Batch: 2, Height: 512, Width: 512, Train: true, Boxes: 3, Optimizer: sim.Lion, Segments: 2},
			{Batch: 16, Height: 640, Width: 640, Train: true, Boxes: 8, Optimizer: sim.SGD, Capacity: 4 << 30},
		} {
			out = append(out, pinned{Model: name, Scenario: s})
		}
	}
	return out
}

// TestPinned simulates every pinned scenario on the built-in models and
// compares the whole Result with testdata/golden/pinned.json. The file was
// written before the engine was split into generic packages and model
// families; go test ./internal/sim -run Pinned -update rewrites it (with the shared
// folder present) after an intended change of the predictions.
func TestPinned(t *testing.T) {
	var want []pinned
	if *updateGolden {
		want = pinScenarios(t)
	} else {
		data, err := os.ReadFile(pinnedPath)
		if err != nil {
			t.Fatalf("%v: run go test ./internal/sim -run Pinned -update", err)
		}
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatal(err)
		}
	}
	loaded := map[string]*sim.Model{}
	for i := range want {
		p := &want[i]
		m := loaded[p.Model]
		if m == nil {
			var err error
			if m, err = sim.Builtin(p.Model); err != nil {
				t.Fatal(err)
			}
			loaded[p.Model] = m
		}
		got, err := m.Simulate(p.Scenario)
		if err != nil {
			t.Fatalf("%s %+v: %v", p.Model, p.Scenario, err)
		}
		if *updateGolden {
			p.Result = got
			continue
		}
		if d := cmp.Diff(p.Result, got); d != "" {
			t.Errorf("%s %+v: Result differs from %s (-pinned +now):\n%s", p.Model, p.Scenario, pinnedPath, d)
		}
	}
	if *updateGolden {
		data, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pinnedPath, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(want) < 280 {
		t.Errorf("%d pinned scenarios, want at least 280", len(want))
	}
}
