// Package family is the seam between onnxmem's generic engine and what
// belongs to one family of models. A Family says four things, which every
// graph needs: its name, whether a graph is one of its own, how to prepare
// it (its top-level layers, what checkpoint_sequential splits, and the
// exporter's flattening undone) and what its Python forward keeps alive.
// What only some families know is an optional interface, which the engine
// asks for by type assertion, with a default when a family lacks it:
//
//   - Head: the eval-mode head of a validation step (default none), the
//     classes the head predicts (default 0) and what the model moves to
//     the device beyond the graph's initializers (default nothing);
//   - Trainer: the training script's step and its loss (default: the sum
//     of the outputs, GradScaler, one parameter group; the generic
//     family's: cross-entropy on its logits), the scripts it names, and
//     its loop around the steps in a whole run (default none);
//   - Deployer: which exports are deployment exports, which hold no
//     training graph (default: one made in eval mode), and how to read one
//     as a model of the family, so that a built-in model stands for it;
//   - Harnessed: where the family's reference measurements empty the
//     cache around the warm-up step (default before the warm-up only).
//
// A family's built-in models, the graphs of its released configurations,
// are a Builder in a package under the family's (family/yolov9/models).
//
// The functions of this package of the same names apply a family's answer
// or the default. The registry of families is package family/registry;
// the engine (packages ir, schedule, allocator, liveness, internal/sim)
// knows no family.
//
// Worked example: a graph whose nodes are named "/model.38/cv2.0/…" and
// whose detection head's box branches end in 1×1 convolutions of four
// groups to 4·16 channels (DDetect's) is YOLOv9's (family/yolov9): layer
// 38 is the 39th module of model.model, and a train step runs
// train_dual.py's recipe. An Ultralytics YOLOv8 export names its nodes
// "/model.22/…" too, but its Detect head has no grouped box convolution:
// no family claims it but the generic one (family/generic), and a note
// says why. A torchvision resnet18, "/layer1/layer1.0/conv1/Conv", is
// generic too: its layers are the modules conv1, bn1, …, layer1.0, … in
// the order they run, its model step's loss is the sum of its outputs and its train step's
// cross-entropy on its logits.
package family

import (
	"fmt"

	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// Family is what every model family says of its graphs.
type Family interface {
	// Name is the family's short name, as Scenario.Family and the command
	// line's -family flag take it.
	Name() string
	// Detect reports whether g, as ir.Load returns it, is one of the
	// family's graphs: on positive evidence of the family's own head,
	// never on the nodes' names alone. note, when not empty, says why a
	// graph that resembles the family's is not one.
	Detect(g *ir.Graph) (ok bool, note string)
	// Prepare assigns g's top-level layers (ir.Graph.AssignLayers) and
	// restores the eager structure that the exporter flattened. It returns
	// the graph to simulate: g itself, or a new graph.
	Prepare(g *ir.Graph) (*ir.Graph, error)
	// Holds says what the family's Python forward keeps alive.
	schedule.Holder
}

// Head is a family whose models end in a head that the training graph does
// not show whole.
type Head interface {
	// EvalHead returns the eval-mode computation that follows the
	// training graph's forward in a validation step, or nil.
	EvalHead() schedule.Head
	// Classes returns the number of classes that a graph with these
	// outputs predicts, or 0 when it reads none from them.
	Classes(outs []schedule.Output) int64
	// OffGraph returns what the model moves to the device on load beyond the
	// graph's initializers, for a graph with these outputs, in the order
	// it moves them.
	OffGraph(outs []schedule.Output) []schedule.OffGraph
}

// Trainer is a family with training scripts of its own.
type Trainer interface {
	// Recipe returns the training step of the graph g for an optimizer,
	// with or without an EMA copy, with boxes ground-truth objects per
	// image.
	Recipe(g *ir.Graph, opt schedule.Optimizer, ema bool, boxes int64) *schedule.Train
	// CheckTrain reports why the recipe cannot train a graph with these
	// outputs with the named script (trainer; "" is the family's default
	// for the graph), or nil.
	CheckTrain(outs []schedule.Output, trainer string) error
	// Loop returns what the training script does around its steps in a
	// whole run, for the graph g, or nil when it has none.
	Loop(g *ir.Graph) *schedule.Loop
}

// Deployer is a family whose deployment exports differ from its training
// exports.
type Deployer interface {
	// CheckStep reports why g cannot stand for the network in training
	// mode (an inference export, whose batch norms are folded into the
	// convolutions), or nil.
	CheckStep(g *ir.Graph) error
	// Deployment reads g, an inference export that CheckStep refuses, as
	// one of the family's models deployed: the classes its head predicts,
	// and a function that reports whether a training graph of the family
	// is the same model. ok is false when the family cannot read g so.
	Deployment(g *ir.Graph) (classes int64, same func(train *ir.Graph) bool, ok bool)
}

// Harnessed is a family whose reference measurements of model and eval
// steps empty the cache around the warm-up step in a way of their own.
type Harnessed interface {
	// Harness says where: "before_step" or "before_warmup"
	// (schedule.Program.Harness).
	Harness() string
}

// Builder builds a family's built-in models: the graphs of its released
// configurations, without a file.
type Builder interface {
	// Builtins lists the built-in models' names; Default is the one a
	// command line takes when it is given none.
	Builtins() []string
	Default() string
	// Build returns the ONNX model of a built-in model with a head of
	// classes classes (0: the released head's).
	Build(name string, classes int64) ([]byte, error)
}

// EvalHead returns f's eval-mode head, or nil.
func EvalHead(f Family) schedule.Head {
	if h, ok := f.(Head); ok {
		return h.EvalHead()
	}
	return nil
}

// Classes returns the classes that f reads from a graph's outputs, or 0.
func Classes(f Family, outs []schedule.Output) int64 {
	if h, ok := f.(Head); ok {
		return h.Classes(outs)
	}
	return 0
}

// OffGraph returns what f's model moves to the device beyond the graph's
// initializers: nothing by default, every parameter and buffer being in
// the graph.
func OffGraph(f Family, outs []schedule.Output) []schedule.OffGraph {
	if h, ok := f.(Head); ok {
		return h.OffGraph(outs)
	}
	return nil
}

// Recipe returns f's training step, by default a plain one: the float
// batch resident before the step, the loss sum(o.sum() for o in outputs),
// the backward (through GradScaler under AMP), the optimizer's step over
// one parameter group without weight decay, zero_grad and, with ema, an
// EMA update.
func Recipe(f Family, g *ir.Graph, opt schedule.Optimizer, ema bool, boxes int64) *schedule.Train {
	if t, ok := f.(Trainer); ok {
		return t.Recipe(g, opt, ema, boxes)
	}
	return &schedule.Train{Boxes: boxes, Optimizer: opt, EMA: ema, GradScaler: true}
}

// CheckTrain reports why f cannot train a graph with these outputs with
// the named script. By default the sum of the outputs trains any graph,
// and no script has a name.
func CheckTrain(f Family, outs []schedule.Output, trainer string) error {
	if t, ok := f.(Trainer); ok {
		return t.CheckTrain(outs, trainer)
	}
	if trainer != "" {
		return fmt.Errorf("%s: trainer %q: the %s family's step is the sum of the outputs, with no training script to name", f.Name(), trainer, f.Name())
	}
	return nil
}

// Loop returns f's training loop around its steps for g, or nil.
func Loop(f Family, g *ir.Graph) *schedule.Loop {
	if t, ok := f.(Trainer); ok {
		return t.Loop(g)
	}
	return nil
}

// CheckStep reports why g cannot stand for f's network in training mode.
// By default it refuses an export made in eval mode, which it recognises
// by batch norms that all use running statistics (training_mode 0, one
// output): a training step's batch norms compute batch statistics and
// save them. Any other graph of supported ops is taken as it is.
func CheckStep(f Family, g *ir.Graph) error {
	if d, ok := f.(Deployer); ok {
		return d.CheckStep(g)
	}
	bns := 0
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.OpType != "BatchNormalization" {
			continue
		}
		if n.IntAttr("training_mode", 0) == 1 || len(n.Outputs) == 3 {
			return nil
		}
		bns++
	}
	if bns > 0 {
		return fmt.Errorf("%s: an export made in eval mode (its %d batch norms use running statistics): a training step's memory needs the training-mode export (model.train(); torch.onnx.export(..., training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False))", f.Name(), bns)
	}
	return nil
}

// Deployment reads g as one of f's models deployed (Deployer), or returns
// ok false.
func Deployment(f Family, g *ir.Graph) (classes int64, same func(train *ir.Graph) bool, ok bool) {
	if d, is := f.(Deployer); is {
		return d.Deployment(g)
	}
	return 0, nil, false
}

// Harness says where f's reference measurements empty the cache around the
// warm-up step: by default "before_warmup", as the torchvision ground truth
// (../shared/groundtruth/torchvision.jsonl) runs each model step twice and
// measures the second, the cache emptied before the first only; replayed
// so in its order, its reserved peaks follow to a median of 0.00%, and with
// the cache emptied again before the measured step to 0.73%.
func Harness(f Family) string {
	if h, ok := f.(Harnessed); ok {
		return h.Harness()
	}
	return "before_warmup"
}
