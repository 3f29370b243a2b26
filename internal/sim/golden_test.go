package sim_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// updateGolden makes the golden tests write their files.
var updateGolden = flag.Bool("update", false, "rewrite the files of testdata/golden")

// tinyModel is the model of testdata/tiny.onnx (internal/onnxbuild.Tiny).
const tinyModel = "../../testdata/tiny.onnx"

// TestGoldenTiny compares the Result of the tiny model at batch 2, 64×64
// with testdata/golden/tiny-b2.json; go test ./internal/sim -run Golden -update
// rewrites the file after an intended change of the simulation.
func TestGoldenTiny(t *testing.T) {
	m, err := sim.Load(tinyModel)
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Simulate(sim.Options{Batch: 2, Height: 64, Width: 64})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "testdata", "golden", "tiny-b2.json")
	if *updateGolden {
		data, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: run go test ./internal/sim -run Golden -update", err)
	}
	var want sim.Result
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(&want, got); d != "" {
		t.Errorf("Result differs from %s (-golden +now); if the change is intended, run go test ./internal/sim -run Golden -update:\n%s", path, d)
	}
}
