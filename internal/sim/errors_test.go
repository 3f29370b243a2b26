package sim_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/internal/measured"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/sim"
	"github.com/onnxmem/onnxmem/ir"
)

// wantErr fails unless err is an error whose message starts with prefix and
// contains every one of parts.
func wantErr(t *testing.T, what string, err error, prefix string, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		t.Errorf("%s: error %q does not start with %q", what, msg, prefix)
	}
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("%s: error %q does not name %q", what, msg, p)
		}
	}
}

// TestLoadErrors checks that Load reports files that are not ONNX models,
// truncated at any of several points, missing or empty, with errors
// starting "onnxmem: ".
func TestLoadErrors(t *testing.T) {
	data, err := os.ReadFile(tinyModel)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, n := range []int{0, 1, 10, len(data) / 3, len(data) / 2, len(data) - 1} {
		path := filepath.Join(dir, "cut.onnx")
		if err := os.WriteFile(path, data[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := sim.Load(path)
		wantErr(t, fmt.Sprintf("tiny.onnx cut to %d bytes", n), err, "onnxmem: ")
	}
	_, err = sim.Load(filepath.Join(dir, "absent.onnx"))
	wantErr(t, "missing file", err, "onnxmem: ", "absent.onnx")
	_, err = sim.LoadBytes("junk", []byte("not a model"))
	wantErr(t, "junk bytes", err, "onnxmem: junk: ")
}

// simulateAfterBlock builds a one-block model whose layer 1 applies op to
// the block's output, and simulates it at batch 2, 32×32.
func simulateAfterBlock(t *testing.T, op string) error {
	t.Helper()
	b := onnxbuild.New("bad")
	b.Output(b.Layer(1).Op(op, b.Layer(0).Block(b.Input("x", 3), 8, 3, 2)))
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	m, err := sim.LoadBytes("bad", data)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Simulate(sim.Options{Batch: 2, Height: 32, Width: 32})
	return err
}

// TestSimulateErrors checks the errors of ops that onnxmem cannot simulate
// and of scenarios it refuses: each starts "onnxmem: " and names the cause.
func TestSimulateErrors(t *testing.T) {
	// Sin has a shape rule but no autograd memory rule.
	wantErr(t, "Sin", simulateAfterBlock(t, "Sin"), "onnxmem: bad: schedule: ", "/model.1/Sin", "unsupported op Sin")
	// Hardmax has no shape rule either: Infer stops first.
	err := simulateAfterBlock(t, "Hardmax")
	wantErr(t, "Hardmax", err, "onnxmem: bad: ir: ", "/model.1/Hardmax", "Hardmax")
	if !errors.Is(err, ir.ErrUnsupportedOp) {
		t.Errorf("Hardmax: %v is not ir.ErrUnsupportedOp", err)
	}
	m, err := sim.Load(tinyModel)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range []sim.Options{{Batch: 0, Height: 64, Width: 64}, {Batch: 1, Height: 0, Width: 64}} {
		_, err := m.Simulate(sc)
		wantErr(t, "scenario", err, "onnxmem: ")
	}
}

// TestImageMultiple checks that an image whose sides the network cannot
// take is refused with the multiple it needs and the next size that works,
// the one a training script rounds up to, for square and rectangular
// images, and that Cost refuses it alike.
func TestImageMultiple(t *testing.T) {
	m, err := sim.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		h, w  int64
		parts []string
	}{
		{650, 650, []string{"image 650×650", "multiples of 32", "give 672×672", "/Concat"}},
		// 512 is a multiple of 16 as well, but 528 is not one of 32.
		{500, 640, []string{"image 500×640", "multiples of 32", "give 512×640"}},
		{640, 650, []string{"image 640×650", "multiples of 32", "give 640×672"}},
	} {
		sc := sim.Options{Batch: 1, Height: tc.h, Width: tc.w}
		_, err := m.Simulate(sc)
		wantErr(t, fmt.Sprintf("Simulate %d×%d", tc.h, tc.w), err, "onnxmem: yolov9-t: ", tc.parts...)
		_, err = m.Cost(sc)
		wantErr(t, fmt.Sprintf("Cost %d×%d", tc.h, tc.w), err, "onnxmem: yolov9-t: ", tc.parts...)
	}
	if _, err := m.Simulate(sim.Options{Batch: 1, Height: 672, Width: 512}); err != nil {
		t.Errorf("672×512: %v", err)
	}
}

// TestFixedImage checks that an export whose input fixes its height and
// width (a torchvision export with only the batch dynamic) says so
// (Model.FixedImage), and that another image size is refused with the one
// it fixed; a YOLOv9 export, dynamic in both, fixes none.
func TestFixedImage(t *testing.T) {
	m, err := sim.Load(measured.Path("tv/vit_b_16-train.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if h, w, ok := m.FixedImage(); !ok || h != 224 || w != 224 {
		t.Errorf("vit_b_16: FixedImage %d×%d %v, want 224×224 true", h, w, ok)
	}
	_, err = m.Simulate(sim.Options{Batch: 2, Height: 640, Width: 640})
	wantErr(t, "vit_b_16 at 640", err, "onnxmem: vit_b_16-train: image 640×640: the export fixes its input at 224×224", "give 224×224")
	y, err := sim.Builtin("yolov9-t")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := y.FixedImage(); ok {
		t.Error("yolov9-t: FixedImage true for dynamic height and width")
	}
}
