package schedule_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/family/generic"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/schedtest"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// The tests of this package run graphs as the generic family prepares them:
// layers from module paths, the layer loop and module arguments as what the
// forward keeps alive.

func load(t *testing.T, b *onnxbuild.Builder) *ir.Graph {
	t.Helper()
	return schedtest.Load(t, b, generic.Family{}.Prepare)
}

func program(t *testing.T, g *ir.Graph, batch int64, cfg schedule.Config) *schedule.Program {
	t.Helper()
	return programAt(t, g, ir.Binding{Batch: batch, Height: 16, Width: 16}, cfg)
}

func programAt(t *testing.T, g *ir.Graph, b ir.Binding, cfg schedule.Config) *schedule.Program {
	t.Helper()
	if cfg.Holder == nil {
		cfg.Holder = generic.Family{}
	}
	return schedtest.ProgramAt(t, g, b, cfg)
}

var (
	describe      = schedtest.Describe
	events        = schedtest.Events
	atNode        = schedtest.AtNode
	checkBalanced = schedtest.CheckBalanced
	diff          = schedtest.Diff
)
