package sim

import (
	"fmt"

	"github.com/onnxmem/onnxmem/family/registry"
)

// Builtin returns one of the built-in models (registry.Builtins) with its
// released head. It needs no file: its family builds the graph, the same,
// node for node, as the training-mode export of its official code, so it
// gives the same Results as loading that export.
func Builtin(name string) (*Model, error) { return BuiltinClasses(name, 0) }

// BuiltinClasses returns a built-in model with a head of classes classes
// (0: the released head's), as Model(cfg, nc=classes) builds it.
func BuiltinClasses(name string, classes int64) (*Model, error) {
	data, err := registry.Build(name, classes)
	if err != nil {
		return nil, fmt.Errorf("onnxmem: %w", err)
	}
	return loadBytes(name, data, false)
}
