package main

import (
	"encoding/json"
	"testing"

	"github.com/onnxmem/onnxmem/onnxmem"
)

// TestLibraryMatchesCLI checks that a newcomer's program on the public
// package (examples/library: yolov9-c's train step under AMP, its peaks at
// a few batch sizes, the largest batch on a 24 GB card) gets the command
// line's numbers with no wrapper calls: the peaks of report -train's amp
// column and maxbatch's largest batch and reserved bytes.
func TestLibraryMatchesCLI(t *testing.T) {
	m, err := onnxmem.Builtin("yolov9-c")
	if err != nil {
		t.Fatal(err)
	}
	sc := onnxmem.Scenario{Step: onnxmem.TrainStep, AMP: true}
	rs, err := m.Sweep(sc, []int64{8, 16, 32}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sc.Device = "24GB"
	n, r, err := m.MaxBatch(sc, 0)
	if err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := runCmd(t, "", "report", "-json", "-train", "-batches", "8,16,32", "yolov9-c")
	if code != 0 {
		t.Fatalf("report: exit code %d: %s", code, stderr)
	}
	var rep reportJSON
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	var amp *settingJSON
	for i := range rep.Settings {
		if rep.Settings[i].Name == "amp" {
			amp = &rep.Settings[i]
		}
	}
	if amp == nil || len(amp.Results) != len(rs) {
		t.Fatalf("report -train has no amp column of %d batches", len(rs))
	}
	for i, r := range rs {
		if got := amp.Results[i]; got.Batch != r.Scenario.Batch || got.Peak != r.Peak || got.PeakReserved != r.PeakReserved || got.GPUMem != r.GPUMem() {
			t.Errorf("batch %d: the library's peak %d, reserved %d, GPU_mem %s; report's %d, %d, %s", r.Scenario.Batch, r.Peak, r.PeakReserved, r.GPUMem(), got.Peak, got.PeakReserved, got.GPUMem)
		}
	}

	code, stdout, stderr = runCmd(t, "", "maxbatch", "-json", "-train", "-amp", "-device", "24GB", "yolov9-c")
	if code != 0 {
		t.Fatalf("maxbatch: exit code %d: %s", code, stderr)
	}
	var mb maxBatchJSON
	if err := json.Unmarshal([]byte(stdout), &mb); err != nil {
		t.Fatal(err)
	}
	if mb.MaxBatch != n || mb.Result == nil || mb.Result.PeakReserved != r.PeakReserved || mb.Result.Peak != r.Peak {
		t.Errorf("the library's largest batch on 24GB is %d (reserved %d); maxbatch's %d (%+v)", n, r.PeakReserved, mb.MaxBatch, mb.Result)
	}
}
