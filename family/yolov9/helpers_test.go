package yolov9_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/family/yolov9"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/schedtest"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// The tests of this package run graphs as onnxmem does for the family: layers
// and normalization from Prepare, the family's holds, and its eval head.

func load(t *testing.T, b *onnxbuild.Builder) *ir.Graph {
	t.Helper()
	return schedtest.Load(t, b, yolov9.Family{}.Prepare)
}

// loadFile loads an export and prepares it.
func loadFile(t *testing.T, path string) *ir.Graph {
	t.Helper()
	g, err := ir.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if g, err = (yolov9.Family{}).Prepare(g); err != nil {
		t.Fatal(err)
	}
	return g
}

func program(t *testing.T, g *ir.Graph, batch int64, cfg schedule.Config) *schedule.Program {
	t.Helper()
	return programAt(t, g, ir.Binding{Batch: batch, Height: 16, Width: 16}, cfg)
}

func programAt(t *testing.T, g *ir.Graph, b ir.Binding, cfg schedule.Config) *schedule.Program {
	t.Helper()
	if cfg.Holder == nil {
		cfg.Holder = yolov9.Family{}
	}
	return schedtest.ProgramAt(t, g, b, cfg)
}

// fakeWorkspace gives each cuDNN pass a workspace of a size that names it.
func fakeWorkspace(c schedule.ConvCall) int64 {
	return map[string]int64{"fwd": 1001, "bwd-data": 1002, "bwd-filter": 1003}[c.Which]
}

var (
	atNode        = schedtest.AtNode
	describe      = schedtest.Describe
	events        = schedtest.Events
	checkBalanced = schedtest.CheckBalanced
	diff          = schedtest.Diff
)

// loadRaw loads a built model and assigns its layers, without normalizing.
func loadRaw(t *testing.T, b *onnxbuild.Builder) *ir.Graph {
	t.Helper()
	return schedtest.Load(t, b, func(g *ir.Graph) (*ir.Graph, error) {
		g.AssignLayers(yolov9.LayerOf)
		return g, nil
	})
}
