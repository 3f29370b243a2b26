// Package registry lists onnxmem's model families and finds the one that
// claims a graph: each family of package family's interface, in the order
// they are tried, the generic family last, as it takes any graph.
//
// Worked example: Detect on yolov9-c's training export asks family/yolov9
// first, which finds DualDDetect's grouped box convolutions and claims it.
// On a YOLOv8 export with the same "/model.22/…" names but a plain Detect
// head, family/yolov9 declines with a note that says so; the generic family
// claims the graph, and Detect returns the note beside it.
package registry

import (
	"fmt"
	"slices"
	"strings"

	"github.com/onnxmem/onnxmem/family"
	"github.com/onnxmem/onnxmem/family/generic"
	"github.com/onnxmem/onnxmem/family/yolov9"
	"github.com/onnxmem/onnxmem/family/yolov9/models"
	"github.com/onnxmem/onnxmem/ir"
)

// all are the families, in the order Detect tries them.
var all = []family.Family{yolov9.Family{}, generic.Family{}}

// builders are the families' built-in models.
var builders = []family.Builder{models.Released{}}

// Detect returns the first family that claims g, and the notes of the
// families before it that declined a graph resembling theirs.
func Detect(g *ir.Graph) (family.Family, string) {
	var notes []string
	for _, f := range all {
		ok, note := f.Detect(g)
		if ok {
			return f, strings.Join(notes, "; ")
		}
		if note != "" {
			notes = append(notes, note)
		}
	}
	panic("registry: the generic family claims every graph")
}

// ByName returns the family with the given name.
func ByName(name string) (family.Family, error) {
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

// Default returns the first family's default built-in model, the one the
// command line simulates when it is given none.
func Default() string { return builders[0].Default() }

// Builtins lists the built-in models of every family.
func Builtins() []string {
	var out []string
	for _, b := range builders {
		out = append(out, b.Builtins()...)
	}
	return out
}

// Build returns the ONNX model of a built-in model with a head of classes
// classes (0: the released head's), from the family that has it.
func Build(name string, classes int64) ([]byte, error) {
	for _, b := range builders {
		if slices.Contains(b.Builtins(), name) {
			return b.Build(name, classes)
		}
	}
	return nil, fmt.Errorf("models: unknown model %q: want one of %s", name, strings.Join(Builtins(), ", "))
}
