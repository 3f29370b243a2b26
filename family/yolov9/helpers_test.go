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
var kit = schedtest.Kit{Prepare: yolov9.Family{}.Prepare, Holder: yolov9.Family{}}

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

// fakeWorkspace gives each cuDNN pass a workspace of a size that names it.
func fakeWorkspace(c schedule.ConvCall) int64 {
	return map[string]int64{"fwd": 1001, "bwd-data": 1002, "bwd-filter": 1003}[c.Which]
}

var (
	load          = kit.Load
	program       = kit.Program
	programAt     = kit.ProgramAt
	atNode        = schedtest.AtNode
	describe      = schedtest.Describe
	events        = schedtest.Events
	checkBalanced = schedtest.CheckBalanced
	diff          = schedtest.Diff
)

// loadRaw loads a built model and assigns its layers, without normalizing.
func loadRaw(t *testing.T, b *onnxbuild.Builder) *ir.Graph {
	t.Helper()
	raw := schedtest.Kit{Prepare: func(g *ir.Graph) (*ir.Graph, error) {
		g.AssignLayers(yolov9.LayerOf)
		return g, nil
	}}
	return raw.Load(t, b)
}
