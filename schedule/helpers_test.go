package schedule_test

import (
	"github.com/onnxmem/onnxmem/family/generic"
	"github.com/onnxmem/onnxmem/internal/schedtest"
)

// The tests of this package run graphs as the generic family prepares them:
// layers from module paths, the layer loop and module arguments as what the
// forward keeps alive.
var kit = schedtest.Kit{Prepare: generic.Family{}.Prepare, Holder: generic.Family{}}

var (
	load          = kit.Load
	program       = kit.Program
	programAt     = kit.ProgramAt
	describe      = schedtest.Describe
	events        = schedtest.Events
	atNode        = schedtest.AtNode
	checkBalanced = schedtest.CheckBalanced
	diff          = schedtest.Diff
)
