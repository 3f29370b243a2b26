package sim

import (
	"fmt"

	"github.com/onnxmem/onnxmem/models"
)

// DefaultModel is the built-in model the command line uses when it is given
// none (models.Default).
const DefaultModel = models.Default

// Builtin returns one of the built-in models, by a name of models.Names
// (DefaultModel, say), with the released head of 80 classes. It needs no file: the
// graph is built in Go and is the same, node for node, as the training-mode
// export of the official code (see package models), so it gives the same
// Results as loading that export.
func Builtin(name string) (*Model, error) { return BuiltinOptions(name, models.Options{}) }

// BuiltinOptions returns a built-in model built with options: another
// number of classes, say (models.Options).
func BuiltinOptions(name string, opt models.Options) (*Model, error) {
	data, err := models.Build(name, opt)
	if err != nil {
		return nil, fmt.Errorf("onnxmem: %w", err)
	}
	return loadBytes(name, data, false)
}
