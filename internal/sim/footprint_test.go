package sim_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// TestFootprint checks Model.Footprint against what the H200 reported
// after model.to('cuda'): the ground truth's models.json for the YOLOv9
// models (built in, node for node their exports), its torchvision.jsonl
// "model" lines, and calibration/torchvision_more.py's (torchvision_more,
// _wide and _new.jsonl: Swin V2's relative_coords_table, a float buffer
// that its bias MLP reads, among them). Every figure is exact.
func TestFootprint(t *testing.T) {
	type want struct {
		Params      int64 `json:"params"`
		ParamBytes  int64 `json:"param_bytes"`
		BufferBytes int64 `json:"buffer_bytes"`
		Allocated   int64 `json:"alloc_after_load"`
	}
	check := func(name string, m *sim.Model, w want) {
		t.Helper()
		f, err := m.Footprint(sim.Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := want{Params: w.Params, ParamBytes: f.ParamBytes, BufferBytes: f.BufferBytes, Allocated: f.Allocated}
		if w.Params != 0 {
			got.Params = f.Params
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("%s: footprint (-measured +predicted):\n%s", name, diff)
		}
	}
	data, err := os.ReadFile(onnxbuild.Shared(t, "groundtruth/models.json"))
	if err != nil {
		t.Fatal(err)
	}
	var gt struct {
		Models map[string]want `json:"models"`
	}
	if err := json.Unmarshal(data, &gt); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"yolov9-t", "yolov9-s", "yolov9-m", "yolov9-c", "yolov9-e", "gelan-c"} {
		m, err := sim.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		check(name, m, gt.Models[name])
	}
	n := 0
	for _, src := range []struct{ file, root string }{
		{onnxbuild.Shared(t, "groundtruth/torchvision.jsonl"), onnxbuild.SharedDir},
		{measured.Path("torchvision_more.jsonl"), measured.Dir},
		{measured.Path("torchvision_wide.jsonl"), measured.Dir},
		{measured.Path("torchvision_new.jsonl"), measured.Dir},
	} {
		f, err := os.Open(src.file)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var line struct {
				Kind, Cfg, Model string
				want
			}
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Fatal(err)
			}
			if line.Kind != "model" {
				continue
			}
			m, err := sim.Load(filepath.Join(src.root, line.Model))
			if err != nil {
				t.Fatal(err)
			}
			check(line.Cfg, m, line.want)
			n++
		}
		f.Close()
	}
	if n != 36 {
		t.Errorf("%d torchvision models checked, want 36", n)
	}
}
