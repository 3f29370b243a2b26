package family_test

import (
	"strings"
	"testing"

	"github.com/onnxmem/onnxmem/family"
	"github.com/onnxmem/onnxmem/family/generic"
	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/internal/schedtest"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// TestDefaults checks what a family that says only the four things of
// Family gets from the optional answers: no eval head, classes or off-graph
// tensors, the plain training step (the sum of the outputs through
// GradScaler) with no script to name and no loop, no deployment export,
// and the harness that empties the cache before the warm-up only.
func TestDefaults(t *testing.T) {
	// The generic family seen through Family alone: its own optional
	// answers (its cross-entropy recipe) hidden.
	var f family.Family = struct{ family.Family }{generic.Family{}}
	outs := []schedule.Output{{Dims: []int64{2, 144, 80, 80}, DType: ir.Float32}}
	if family.EvalHead(f) != nil || family.Classes(f, outs) != 0 || family.OffGraph(f, outs) != nil || family.Loop(f, nil) != nil {
		t.Errorf("a core-only family has a head, classes, off-graph tensors or a loop")
	}
	if r := family.Recipe(f, nil, schedule.Adam, true, 3); r.Optimizer != schedule.Adam || !r.EMA || r.Boxes != 3 || !r.GradScaler || r.Loss != nil {
		t.Errorf("default recipe %+v, want Adam, EMA, 3 boxes, GradScaler and the sum of the outputs", r)
	}
	if err := family.CheckTrain(f, outs, ""); err != nil {
		t.Errorf("default trainer: %v", err)
	}
	if err := family.CheckTrain(f, outs, "train_dual"); err == nil || !strings.HasPrefix(err.Error(), `generic: trainer "train_dual"`) {
		t.Errorf("a named trainer: %v, want an error naming it", err)
	}
	if _, _, ok := family.Deployment(f, nil); ok {
		t.Errorf("a core-only family reads deployment exports")
	}
	if h := family.Harness(f); h != "before_warmup" {
		t.Errorf("harness %q, want before_warmup", h)
	}
}

// TestCheckStepEvalExport checks the default CheckStep, the generic
// family's: that an export made in eval mode, whose
// batch norms all use running statistics, is refused with the way to make
// the training-mode one, and that a training-mode export passes.
func TestCheckStepEvalExport(t *testing.T) {
	build := func(eval bool) *ir.Graph {
		b := onnxbuild.New("net")
		m := b.Module("bn")
		c := b.Module("conv").Conv(b.Input("x", 3), 8, 3, 1)
		if eval {
			ins := []string{c.Name, m.Param("weight", 8), m.Param("bias", 8), m.Param("running_mean", 8), m.Param("running_var", 8)}
			b.Output(onnxbuild.T{Name: m.Node("BatchNormalization", ins, 1)[0], C: 8})
		} else {
			b.Output(m.BatchNorm(c))
		}
		return schedtest.Kit{Prepare: generic.Family{}.Prepare}.Load(t, b)
	}
	err := family.CheckStep(generic.Family{}, build(true))
	if err == nil || !strings.Contains(err.Error(), "generic: an export made in eval mode (its 1 batch norms use running statistics)") || !strings.Contains(err.Error(), "TrainingMode.TRAINING") {
		t.Errorf("eval-mode export: %v", err)
	}
	if err := family.CheckStep(generic.Family{}, build(false)); err != nil {
		t.Errorf("training-mode export: %v", err)
	}
}
