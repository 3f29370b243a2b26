// Package onnxmem predicts the GPU memory of training a network from its
// ONNX graph, without a GPU: torch.cuda.memory_stats()'s figures for a step,
// whether it fits a card, the largest batch that does, what makes the peak.
// A Scenario's zero fields mean the command line's defaults; sizes are bytes.
//
//	m, err := onnxmem.Builtin("yolov9-c")
//	if err != nil {
//		log.Fatal(err)
//	}
//	sc := onnxmem.Scenario{Step: onnxmem.TrainStep, AMP: true, Device: "rtx4090"}
//	r, err := m.Simulate(sc) // batch 16 at 640×640, train_dual.py's step
//	if err != nil {
//		log.Fatal(err)
//	}
//	fmt.Printf("peak %s, GPU_mem %s, fits: %v\n", onnxmem.FormatBytes(r.Peak), r.GPUMem(), r.Fits())
//	n, _, err := m.MaxBatch(sc, 0)
//	if err != nil {
//		log.Fatal(err)
//	}
//	fmt.Println("largest batch:", n)
package onnxmem

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/onnxmem/onnxmem/family/registry"
	"github.com/onnxmem/onnxmem/internal/sim"
)

// Model is a loaded network, prepared by its model family.
type Model struct {
	Name    string // the file's name without ".onnx", or the built-in name
	Family  string // "yolov9", or "generic" for any other graph (Families)
	Builtin string // the built-in model that stands for an inference export
	Note    string // why a graph like a family's is not one, when it is not

	m       *sim.Model
	builtin string // the built-in model m is, by Builtin
}

// Load reads an ONNX file, but not its weights: a training-mode export
// (torch.onnx.export(..., training=TrainingMode.TRAINING)) or YOLOv9's.
func Load(path string) (*Model, error) {
	return wrap(sim.Load(path))
}

// LoadBytes decodes an ONNX model held in memory; name names it.
func LoadBytes(name string, data []byte) (*Model, error) { return wrap(sim.LoadBytes(name, data)) }

// Builtin returns a built-in model (Builtins): the official code's
// training-mode export, built in Go, with 80 classes.
func Builtin(name string) (*Model, error) {
	m, err := wrap(sim.Builtin(name))
	if err == nil {
		m.builtin = name
	}
	return m, err
}

// Builtins lists the built-in models, the command line's default first.
func Builtins() []string {
	return append([]string{registry.Default()}, slices.DeleteFunc(registry.Builtins(), func(s string) bool { return s == registry.Default() })...)
}

// Families lists the model families, in the order they are tried.
func Families() []string { return sim.Families() }

// wrap returns the public face of an engine's model.
func wrap(m *sim.Model, err error) (*Model, error) {
	if err != nil {
		return nil, err
	}
	return &Model{Name: m.Name, Family: m.Family, Builtin: m.Builtin, Note: m.Note, m: m}, nil
}

// engine returns m's engine model under m's name.
func (m *Model) engine() (*sim.Model, error) {
	if m == nil || m.m == nil {
		return nil, errors.New("onnxmem: a Model that Load, LoadBytes or Builtin did not make: it holds no graph")
	}
	e := *m.m
	e.Name = m.Name
	return &e, nil
}

// As returns the model as the named family simulates it (Families).
func (m *Model) As(family string) (*Model, error) {
	e, err := m.engine()
	if err != nil {
		return nil, err
	}
	a, err := wrap(e.As(family))
	if err == nil {
		a.Name, a.builtin = m.Name, m.builtin
	}
	return a, err
}

// WithClasses returns m with nc classes, rebuilt as "NAME nc=N" if needed.
func (m *Model) WithClasses(nc int64) (*Model, error) {
	has, err := m.Classes()
	switch {
	case err != nil:
		return nil, err
	case nc < 1:
		return nil, errors.New("onnxmem: a head predicts at least 1 class")
	case has == 0:
		return nil, fmt.Errorf("onnxmem: %s's family (%s) reads no classes from its outputs", m.Name, m.Family)
	case has == nc:
		return m, nil
	case m.Builtin == "" && m.builtin == "":
		return nil, fmt.Errorf("onnxmem: %s predicts %d classes: give a built-in model's name, or an export with %d classes", m.Name, has, nc)
	}
	b, err := wrap(sim.BuiltinClasses(cmp.Or(m.Builtin, m.builtin), nc))
	if err == nil {
		b.Name, b.Builtin, b.builtin = fmt.Sprintf("%s nc=%d", m.Name, nc), m.Builtin, m.builtin
	}
	return b, err
}

// Classes returns the classes the model's head predicts (0: generic).
func (m *Model) Classes() (int64, error) {
	e, err := m.engine()
	if err != nil {
		return 0, err
	}
	return e.Classes()
}

// Layers returns the number of top-level layers, what checkpointing splits.
func (m *Model) Layers() int {
	if m == nil || m.m == nil {
		return 0
	}
	return m.m.Layers()
}

// FixedImage returns the image size the export fixes (224×224), if any.
func (m *Model) FixedImage() (h, w int64, ok bool) {
	if m == nil || m.m == nil {
		return 0, 0, false
	}
	return m.m.FixedImage()
}

// Footprint is what model.to('cuda') makes, and memory_allocated() then.
type Footprint struct {
	Params, Trainable, ParamBytes, BufferBytes, Allocated int64
}

// Footprint returns what the model holds once loaded.
func (m *Model) Footprint() (*Footprint, error) {
	e, err := m.engine()
	if err != nil {
		return nil, err
	}
	f, err := e.Footprint(sim.Options{})
	if err != nil {
		return nil, err
	}
	n, err := e.Parameters()
	if err != nil {
		return nil, err
	}
	return &Footprint{Params: f.Params, Trainable: n, ParamBytes: f.ParamBytes, BufferBytes: f.BufferBytes, Allocated: f.Allocated}, nil
}
