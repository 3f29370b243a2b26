// Package models builds the YOLOv9 family as ONNX models, the graphs of
// their training-mode exports, so that onnxmem runs without any file. For
// example, to predict the AMP training step of yolov9-c at batch 16 and
// 640×640:
//
//	data, err := models.Build("yolov9-c", models.Options{})
//	if err != nil {
//		return err
//	}
//	m, err := sim.LoadBytes("yolov9-c", data)
//	if err != nil {
//		return err
//	}
//	r, err := m.Simulate(sim.Scenario{Batch: 16, Height: 640, Width: 640, AMP: true})
//	if err != nil {
//		return err
//	}
//	fmt.Printf("peak %.2f GiB\n", float64(r.Peak)/(1<<30))
//
// This gives the same Result as loading yolov9-c's export with sim.Load.
//
// A built model matches the TorchScript export (torch.onnx.export, opset 17,
// training mode) of WongKinYiu/yolov9 node for node: the same nodes in the
// same order with the same names ("/model.3/cv2/cv2.0/m/m.0/cv1/conv1/conv/Conv"),
// attributes and wiring, the same weights (names, dims and state_dict order),
// an input "images" of dims [batch, 3, height, width] and the same outputs:
// the raw head maps [batch, 64+classes, H/s, W/s] at strides 8, 16 and 32,
// twice for the YOLOv9 models (DualDDetect: auxiliary branch, then main) and
// once for GELAN (DDetect). The exporter's idioms are kept: training-mode
// BatchNormalization with three outputs, SiLU as Sigmoid and Mul, chunk as
// Shape → Gather → Add → Div → Mul → Slice, nn.Upsample and CBFuse's
// F.interpolate as Resize, CBLinear's Split, and ADown's cat folded into the
// Concat layer that reads it (the YOLOv9 family's Normalize restores it). What differs
// comes from the exporter's global counters or is metadata: the names of the
// constants made outside every module ("Constant_1033") and of the graph
// outputs ("3323"), the symbolic names of the outputs' dims, the graph's name
// and the producer ("onnxbuild").
//
// The architectures are Go tables transcribed from the repository's model
// configurations (models/detect/*.yaml) and checked against the exports'
// weight shapes. gelan-t, -s, -m, -c and -e are the main branch of yolov9-t,
// -s, -m, -c and -e with a single DDetect head; gelan-t and gelan-c are
// checked against their exports, gelan-s, -m and -e have none.
//
// Weights have dims and no data (they point to external files that do not
// exist, like the weightless exports) unless Options.Weights asks for zeros.
//
// Options also make what-if variants: another class count, and width and
// depth multipliers applied as the official parse_model applies a
// configuration's width_multiple and depth_multiple. The family's own
// configurations all have multiples of 1 and differ in explicit channel
// counts; the multipliers reproduce those steps (yolov9-t at Width 2 is
// yolov9-s, node for node).
package models

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
)

// Options are the knobs of Build. The zero value builds the models as
// released: 80 classes, weights without data.
type Options struct {
	// Classes is the number of classes the head predicts; 0 means 80. The
	// head's outputs have 64 + Classes channels, and its class branch
	// max(C, min(2·Classes, 128)) channels for an input of C channels.
	Classes int
	// Weights gives every weight zeros as contents, as a model with its
	// weights would have; the serialized model then takes 4 bytes per
	// parameter. By default weights keep only their dims and dtype.
	Weights bool
	// Width multiplies every channel count of the configuration (the
	// outputs and hidden widths of Conv, ELAN1, RepNCSPELAN4, ADown, AConv,
	// SPPELAN and CBLinear), each rounded up to a multiple of 8 as
	// make_divisible does; 0 means 1. The members of the family differ this
	// way: yolov9-s is yolov9-t at Width 2, gelan-s gelan-t at Width 2.
	Width float64
	// Depth multiplies the RepNCSP blocks in each RepNCSPELAN4 (3 in the t
	// and s models, 1 in m, c and e), rounded half to even and at least 1;
	// 0 means 1.
	Depth float64
}

// DefaultClasses is the class count of the released models (COCO).
const DefaultClasses = 80

// Default is the built-in model that onnxmem simulates when it is given
// none: yolov9-c, the model most people train with train_dual.py.
const Default = "yolov9-c"

// Names returns the names of the models Build knows, smallest first within
// each family.
func Names() []string {
	names := make([]string, len(family))
	for i, m := range family {
		names[i] = m.name
	}
	return names
}

// Build returns the serialized ONNX model (opset 17) of the named model, as
// the training-mode export of that model would be; see the package comment.
// The input is "images" of dims [batch, 3, height, width], all three
// symbolic. Build is deterministic: the same name and options give the same
// bytes.
func Build(name string, opt Options) ([]byte, error) {
	i := slices.IndexFunc(family, func(m model) bool { return m.name == name })
	if i < 0 {
		return nil, fmt.Errorf("models: unknown model %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	nc := int64(opt.Classes)
	switch {
	case nc == 0:
		nc = DefaultClasses
	case nc < 0:
		return nil, fmt.Errorf("models: %s: %d classes: must be positive", name, opt.Classes)
	}
	table, err := scale(family[i].table(), opt.Width, opt.Depth)
	if err != nil {
		return nil, fmt.Errorf("models: %s: %w", name, err)
	}
	b, err := build(name, table, nc, opt.Weights, family[i].relu)
	var data []byte
	if err == nil {
		data, err = b.Bytes()
	}
	if err != nil {
		return nil, fmt.Errorf("models: %s: %w", name, err)
	}
	return data, nil
}

// model is one member of the family.
type model struct {
	name    string
	table   func() []layer
	checked bool // TestEquivalence compares it with its export
	relu    bool // its yaml sets Conv.default_act to nn.ReLU()
}

// family lists the models in the order Names gives them.
var family = []model{
	{"yolov9-t", func() []layer { return yolov9T }, true, false},
	{"yolov9-s", func() []layer { return yolov9S }, true, false},
	{"yolov9-m", func() []layer { return yolov9M }, true, false},
	{"yolov9-c", func() []layer { return yolov9C }, true, false},
	{"yolov9-e", func() []layer { return yolov9E }, true, false},
	{"gelan-t", func() []layer { return gelan(yolov9T, span(0, 22)) }, true, false},
	{"gelan-s", func() []layer { return gelan(yolov9S, span(0, 22)) }, false, false},
	{"gelan-m", func() []layer { return gelan(yolov9M, span(1, 23)) }, false, false},
	{"gelan-c", func() []layer { return gelan(yolov9C, span(1, 23)) }, true, false},
	{"gelan-e", func() []layer { return gelan(yolov9E, append(span(0, 29), span(36, 49)...)) }, false, false},
	// models/detect/yolov9.yaml, the repository's first "yolov9": yolov9-c
	// with a 3×3 stride-2 Conv where -c has ADown, and
	// "activation: nn.ReLU()", which makes every Conv's activation ReLU
	// (RepConvN keeps its SiLU).
	{"yolov9", func() []layer { return convDown(yolov9C) }, false, true},
}

// Checked reports whether the named model has been compared, node for node,
// with the export of the official code (yolov9-t, -s, -m, -c, -e, gelan-t
// and gelan-c). The others follow the same rules and have no export to
// compare with. It is false for a name Build does not know.
func Checked(name string) bool {
	i := slices.IndexFunc(family, func(m model) bool { return m.name == name })
	return i >= 0 && family[i].checked
}

// weightRank orders the components of weight names as the modules register
// their children and parameters, which is the state_dict order that the
// exports list their weights in. It differs from the order of use in RepNCSP
// (cv1, cv2, cv3, then m; the forward runs m before cv2) and in the heads
// (all of cv2, then all of cv3, …; the forward goes level by level).
var weightRank = map[string]int{
	"conv": 1, "conv1": 2, "conv2": 3, "bn": 4,
	"cv1": 11, "cv2": 12, "cv3": 13, "cv4": 14, "cv5": 15, "m": 20,
	"weight": 31, "bias": 32, "running_mean": 33, "running_var": 34,
}

// compareWeights compares two weight names in state_dict order: component by
// component, indexes as numbers and names by weightRank.
func compareWeights(a, b string) int {
	for a != "" || b != "" {
		var x, y string
		x, a, _ = strings.Cut(a, ".")
		y, b, _ = strings.Cut(b, ".")
		if x == y {
			continue
		}
		i, errX := strconv.Atoi(x)
		j, errY := strconv.Atoi(y)
		switch {
		case errX == nil && errY == nil:
			return i - j
		case weightRank[x] != weightRank[y]:
			return weightRank[x] - weightRank[y]
		}
		return strings.Compare(x, y)
	}
	return 0
}

// scale returns table with its channel counts multiplied by width and its
// RepNCSP repeats by depth, as the official parse_model applies a
// configuration's width_multiple (make_divisible(c·w, 8)) and depth_multiple
// (max(round(n·d), 1)), here to every channel argument so that the branches
// CBFuse adds keep equal widths. Zero means 1; table itself is not changed.
func scale(table []layer, width, depth float64) ([]layer, error) {
	width, depth = cmp.Or(width, 1), cmp.Or(depth, 1)
	for _, m := range []struct {
		name string
		v    float64
	}{{"width", width}, {"depth", depth}} {
		if !(m.v > 0) || math.IsInf(m.v, 0) {
			return nil, fmt.Errorf("%s multiplier %v: must be positive and finite", m.name, m.v)
		}
	}
	if width == 1 && depth == 1 {
		return table, nil
	}
	out := make([]layer, len(table))
	for i, l := range table {
		args := slices.Clone(l.args)
		n := len(args)
		switch l.kind {
		case conv:
			n = 1 // kernel and stride stay
		case repELAN:
			n = 3
			args[3] = max(int64(math.RoundToEven(float64(args[3])*depth)), 1)
		case cbfuse:
			n = 0 // part indexes
		}
		for k := range n {
			args[k] = int64(math.Ceil(float64(args[k])*width/8)) * 8
		}
		out[i] = layer{from: l.from, kind: l.kind, args: args}
	}
	return out, nil
}

// build adds the layers of table to a new graph and returns its builder.
func build(name string, table []layer, nc int64, weights, relu bool) (*onnxbuild.Builder, error) {
	b := onnxbuild.New(name)
	b.ZeroWeights, b.ReLU = weights, relu
	g := &graph{b: b, nc: nc, outs: make([]value, len(table))}
	g.outs = g.outs[:0]
	img := b.Input("images", 3)
	// Who reads each layer: an ADown read only by a Concat layer has its cat
	// folded into that Concat, as the exporter does.
	readers := make([][]int, len(table))
	for i, l := range table {
		for _, f := range l.from {
			if j := source(i, f); j >= 0 {
				readers[j] = append(readers[j], i)
			}
		}
	}
	for i, l := range table {
		ins := make([]value, len(l.from))
		for k, f := range l.from {
			switch j := source(i, f); {
			case j >= i:
				return nil, fmt.Errorf("layer %d reads layer %d, which is not before it", i, j)
			case j < 0:
				ins[k] = value{t: img}
			default:
				ins[k] = g.outs[j]
			}
		}
		fold := l.kind == adown && len(readers[i]) == 1 && table[readers[i][0]].kind == concat
		out, err := g.layer(i, l, ins, fold)
		if err != nil {
			return nil, fmt.Errorf("layer %d (%s): %w", i, l.kind, err)
		}
		g.outs = append(g.outs, out)
	}
	b.SortWeights(compareWeights)
	return b, nil
}

// source is the layer that entry f of layer i's from list names: f itself,
// or for a negative f the layer that many places back; -1 is the input.
func source(i, f int) int {
	if f < 0 {
		return i + f
	}
	return f
}

// Released is the YOLOv9 family's set of built-in models, as the registry
// of families lists them (family.Builder): every configuration of Names,
// built with a head of the classes asked for.
type Released struct{}

// Builtins lists Names.
func (Released) Builtins() []string { return Names() }

// Default returns Default.
func (Released) Default() string { return Default }

// Build returns the training-mode graph of a configuration with a head of
// classes classes (0: DefaultClasses), as Model(cfg, nc=classes) builds it.
func (Released) Build(name string, classes int64) ([]byte, error) {
	if classes < 0 || classes > math.MaxInt32 {
		return nil, fmt.Errorf("models: %d classes: want 1 to %d", classes, math.MaxInt32)
	}
	return Build(name, Options{Classes: int(classes)})
}
