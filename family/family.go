// Package family is the seam between onnxmem's generic engine and what
// belongs to one family of models: how a graph's top-level layers are found
// (what checkpoint_sequential splits), the graph normalizations that undo an
// exporter's flattening, what the family's Python forward keeps alive, the
// eval-mode head, and the training recipe with its loss. The engine
// (packages ir, schedule, allocator, liveness) knows no family; each family
// is a package of its own below this one.
//
// Worked example: a graph whose nodes are named "/model.3/cv1/conv/Conv" is
// detected as YOLOv9 (family/yolov9): layer 3 is the fourth module of
// model.model, train steps run train_dual.py's recipe. A torchvision
// resnet18 export, "/layer1/layer1.0/conv1/Conv", is claimed by no family
// but the generic one (family/generic): its layers are the modules conv1,
// bn1, …, layer1.0, … in the order they run, and its loss is the sum of
// its outputs.
package family

import (
	"fmt"
	"strings"

	"github.com/onnxmem/onnxmem/family/generic"
	"github.com/onnxmem/onnxmem/family/yolov9"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// Family is everything the engine needs to know of one family of models.
type Family interface {
	// Name is the family's short name, as Scenario.Family and the command
	// line's -family flag take it.
	Name() string
	// Detect reports whether g, as ir.Load returns it, is one of the
	// family's graphs.
	Detect(g *ir.Graph) bool
	// Prepare assigns g's top-level layers (ir.Graph.AssignLayers) and
	// restores the eager structure that the exporter flattened. It returns
	// the graph to simulate: g itself, or a new graph.
	Prepare(g *ir.Graph) (*ir.Graph, error)
	// Holds says what the family's Python forward keeps alive.
	schedule.Holder
	// EvalHead returns the eval-mode computation that follows the
	// training graph's forward in a validation step, or nil.
	EvalHead() schedule.Head
	// Recipe returns the family's training step for an optimizer, with or
	// without an EMA copy, with boxes ground-truth objects per image.
	Recipe(opt schedule.Optimizer, ema bool, boxes int64) *schedule.Train
	// CheckTrain reports why the recipe cannot train a graph with these
	// outputs with the named training script (trainer; "" is the family's
	// default for the graph), or nil.
	CheckTrain(outs []schedule.Output, trainer string) error
	// Classes returns the number of classes that a graph with these
	// outputs predicts, or 0 when the family reads none from them.
	Classes(outs []schedule.Output) int64
	// CheckStep reports why g cannot stand for the network in training
	// mode (an inference export, whose batch norms are folded into the
	// convolutions), or nil.
	CheckStep(g *ir.Graph) error
	// Deployment reads g, an inference export that CheckStep refuses, as
	// one of the family's models deployed: the classes its head predicts,
	// and a function that reports whether a training graph of the family
	// is the same model. ok is false when the family cannot read g so.
	Deployment(g *ir.Graph) (classes int64, same func(train *ir.Graph) bool, ok bool)
	// Loop returns what the family's training script does around its steps
	// in a whole run, for the graph g, or nil when it has none.
	Loop(g *ir.Graph) *schedule.Loop
	// Unseen returns what the model moves to the device on load beyond the
	// graph's initializers, for a graph with these outputs, in the order
	// it moves them.
	Unseen(outs []schedule.Output) []schedule.Unseen
	// Harness says where the reference measurements of the family's model
	// and eval steps empty the cache around the warm-up step
	// (schedule.Program.Harness).
	Harness() string
}

// all are the families, in the order Detect tries them: the generic family,
// which takes any graph of supported ops, last.
var all = []Family{yolov9.Family{}, generic.Family{}}

// Detect returns the first family that claims g.
func Detect(g *ir.Graph) Family {
	for _, f := range all {
		if f.Detect(g) {
			return f
		}
	}
	panic("family: the generic family claims every graph")
}

// ByName returns the family with the given name.
func ByName(name string) (Family, error) {
	for _, f := range all {
		if f.Name() == name {
			return f, nil
		}
	}
	return nil, fmt.Errorf("family: unknown family %q: want one of %s", name, strings.Join(Names(), ", "))
}

// Names lists the families' names in detection order.
func Names() []string {
	out := make([]string, len(all))
	for i, f := range all {
		out[i] = f.Name()
	}
	return out
}
