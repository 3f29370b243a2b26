// Package yolov9 is everything onnxmem knows about the YOLOv9 family
// (yolov9-t/s/m/c/e and GELAN) as the official code at
// github.com/WongKinYiu/yolov9 builds and trains it: how its exports name
// the top-level layers of model.model, the exporter's flattening that
// Normalize undoes, what models/yolo.py's _forward_once and the modules of
// models/common.py keep alive (Holds), the eval-mode decode of DDetect and
// DualDDetect (Head), and train_dual.py's training step (Recipe) with the
// dual task-aligned loss of utils/loss_tal_dual.py (package loss).
//
// Worked example: yolov9-c's training export names its nodes
// "/model.3/cv1/conv/Conv"; that node is in top-level layer 3, the fourth
// module of model.model, which checkpoint_sequential splits.
// "/model.22/Concat" reads the outputs of layers 21 and 7, so
// _forward_once keeps layer 7's output in its list y to the end of the
// forward (it is in model.save), while layer 21's goes once layer 22 has run.
package yolov9

import (
	"fmt"
	"strings"

	"github.com/onnxmem/onnxmem/family"
	"github.com/onnxmem/onnxmem/ir"
	"github.com/onnxmem/onnxmem/schedule"
)

// Family is the YOLOv9 family. Its zero value is ready to use.
type Family struct{}

// The family answers every optional question of package family: a method
// whose signature drifted would otherwise leave it to a default silently.
var _ interface {
	family.Family
	family.Head
	family.Trainer
	family.Deployer
	family.Harnessed
} = Family{}

// Name returns "yolov9".
func (Family) Name() string { return "yolov9" }

// Detect reports whether g is a YOLOv9 export: its nodes lie in the
// top-level layers "/model.i/" of model.model (or a dynamo export's scopes
// name them; a wrapper's "/model/model.0/…" is not one), and one of those
// layers is DDetect's or DualDDetect's head, whose box branch at each of
// its levels ends in a 1×1 convolution of four groups to 4·reg_max
// channels (nn.Conv2d(c2, 4 * reg_max, 1, groups=4) in models/yolo.py):
// two or more such convolutions in one layer. The names alone are no
// evidence: Ultralytics' YOLOv8 and YOLO11 exports name their layers so
// too, and their Detect head's box convolution has one group. A graph
// named so without the head is declined with a note.
func (Family) Detect(g *ir.Graph) (bool, string) {
	named := false
	boxConvs := map[int]int{} // by layer
	for i := range g.Nodes {
		n := &g.Nodes[i]
		l := layerOfNode(n)
		if l < 0 {
			continue
		}
		named = true
		if isBoxConv(g, n) {
			if boxConvs[l]++; boxConvs[l] >= 2 {
				return true, ""
			}
		}
	}
	if named {
		return false, fmt.Sprintf("yolov9: the nodes are named as model.model's layers, as YOLOv9's are, but no detection head is DDetect's (1×1 box convolutions of 4 groups to %d channels, one a level), as an Ultralytics YOLOv8 or YOLO11 export has none: simulated as a generic network, whose training step is the sum of its outputs", 4*regMax)
	}
	return false, ""
}

// layerOfNode returns the top-level layer of model.model that node n lies
// in, or -1: the one its name starts with ("/model.i/"), or the first that
// a dynamo scope of it names.
func layerOfNode(n *ir.Node) int {
	if strings.HasPrefix(n.Name, "/model.") {
		if l := layerIn(n.Name); l >= 0 {
			return l
		}
	}
	for _, s := range n.Scopes {
		if l := layerIn(s); l >= 0 {
			return l
		}
	}
	return -1
}

// isBoxConv reports whether n is the last convolution of DDetect's box
// branch: 1×1, four groups, 4·regMax output channels.
func isBoxConv(g *ir.Graph, n *ir.Node) bool {
	if n.OpType != "Conv" || len(n.Inputs) < 2 || n.IntAttr("group", 1) != 4 {
		return false
	}
	w := g.Values[n.Inputs[1]].Dims
	return len(w) == 4 && w[0].Param == "" && w[0].Value == 4*regMax && w[2].Value == 1 && w[3].Value == 1
}

// Prepare assigns the top-level layers of g from its names and restores
// what the exporter flattened (Normalize). It returns g itself when there is
// nothing to restore.
func (Family) Prepare(g *ir.Graph) (*ir.Graph, error) {
	g.AssignLayers(LayerOf)
	return Normalize(g)
}

// LayerOf returns the top-level layer that a node, value or weight name of a
// YOLOv9 export names (see layerIn), or -1: the function that Prepare hands
// ir.Graph.AssignLayers.
func LayerOf(s string) int { return layerIn(s) }

// layerIn returns i for the first "model.i" in s that starts s or follows one of
// "/' :[" and is followed by the end of s or one of "./':,]", or -1.
//
// TorchScript exports name nodes "/model.3/cv1/conv/Conv" and weights
// "model.3.cv1.conv.weight"; dynamo exports write
// ": models.yolo.DetectionModel/model.38: models.yolo.DualDDetect/cat_61"
// or "[”, 'model.7', 'model.7.bn']" in the nodes' metadata.
func layerIn(s string) int {
	const prefix = "model."
	for at := 0; at+len(prefix) < len(s); at++ {
		if s[at:at+len(prefix)] != prefix || (at > 0 && !isSep(s[at-1])) {
			continue
		}
		i, l := at+len(prefix), 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' && l < 1e6 {
			l = 10*l + int(s[i]-'0')
			i++
		}
		if i > at+len(prefix) && (i == len(s) || isSep(s[i]) || s[i] == '.') {
			return l
		}
	}
	return -1
}

// isSep reports whether c may delimit a "model.i" path element.
func isSep(c byte) bool {
	switch c {
	case '/', '\'', ' ', ':', '[', ']', ',', '"':
		return true
	}
	return false
}

// EvalHead returns the decode of DDetect and DualDDetect.
func (Family) EvalHead() schedule.Head { return Head{} }

// OffGraph returns what models/yolo.py's model moves to the device beyond
// the training graph's initializers: each detection branch's DFL (its
// 1×1 conv of reg_max fixed weights, a parameter with requires_grad
// False that only the inference decode uses), and the head's stride
// tensor, one float per level, which BaseModel._apply moves with them
// (its anchors and strides are empty until an inference forward).
func (Family) OffGraph(outs []schedule.Output) []schedule.OffGraph {
	br := Branches(outs)
	if len(br) == 0 {
		return nil
	}
	names := []string{"dfl", "dfl2"}
	var out []schedule.OffGraph
	for i := range br {
		name := fmt.Sprintf("dfl%d", i+1)
		if i < len(names) {
			name = names[i]
		}
		out = append(out, schedule.OffGraph{Name: "head." + name + ".conv.weight", Elems: regMax, Bytes: 4 * regMax, Param: true})
	}
	nl := int64(len(br[0]))
	return append(out, schedule.OffGraph{Name: "head.stride", Elems: nl, Bytes: 4 * nl})
}

// CheckStep refuses an inference export: export.py folds every batch norm
// into its convolution (and returns the decoded head), so the graph has no
// batch norm in training mode, and its memory is not the training
// network's: the activations of the folded batch norms, their statistics
// and the head's maps would all be missing.
func (Family) CheckStep(g *ir.Graph) error {
	convs := 0
	for i := range g.Nodes {
		n := &g.Nodes[i]
		switch n.OpType {
		case "BatchNormalization":
			if n.IntAttr("training_mode", 0) == 1 || len(n.Outputs) == 3 {
				return nil
			}
		case "Conv":
			convs++
		}
	}
	if convs == 0 {
		return nil
	}
	return fmt.Errorf("yolov9: an inference export (no batch norm in training mode: export.py folds them into the convolutions): a step's memory needs the training-mode export (torch.onnx.export(model.train(), ..., training=TrainingMode.TRAINING, do_constant_folding=False)), or a built-in model")
}

// Classes returns the classes of the detection head: its maps have
// 4·regMax box channels, then one a class; 0 when the outputs are not a
// detection head's maps.
func (Family) Classes(outs []schedule.Output) int64 {
	br := Branches(outs)
	if len(br) == 0 {
		return 0
	}
	return outs[br[0][0]].Dims[1] - 4*regMax
}

// CheckTrain reports an error unless the outputs are the detection head's
// maps, which the loss reads.
//
// The trainer names the script: train_dual.py trains the dual-head YOLOv9
// models with the dual loss (utils/loss_tal_dual.py), train.py the
// single-head GELAN models with utils/loss_tal.py, which is the dual loss's
// computation on one branch; "" takes the one that fits the head.
func (Family) CheckTrain(outs []schedule.Output, trainer string) error {
	br := Branches(outs)
	switch {
	case len(br) == 0:
		return fmt.Errorf("yolov9: train steps need the detection head's maps as the graph's outputs ([B, 4·%d+classes, H, W] each), and these %d outputs are not: export the training-mode model with its head, or choose the generic family", regMax, len(outs))
	case trainer == "train_dual" && len(br) != 2:
		return fmt.Errorf("yolov9: trainer train_dual: train_dual.py trains a dual head (YOLOv9), and this graph's head has %d branch: use trainer train (train.py)", len(br))
	case trainer == "train" && len(br) != 1:
		return fmt.Errorf("yolov9: trainer train: train.py trains a single head (GELAN), and this graph's head has %d branches: use trainer train_dual (train_dual.py)", len(br))
	case trainer != "" && trainer != "train" && trainer != "train_dual":
		return fmt.Errorf("yolov9: unknown trainer %q: want train_dual (train_dual.py) or train (train.py)", trainer)
	}
	return nil
}
