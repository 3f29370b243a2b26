package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/onnxmem/onnxmem/internal/sim"
)

// bindInput applies -input NAME=DIMS to the command's sizes: dims of the
// named graph input of the model at path, its first the batch ("B" for the
// command's own). A token input [batch, sequence] sets -seq; an image
// [batch, channels, height, width] sets -img, its channels the export's.
// A number for the batch sets -batch where the command has one.
//
// Example: -input input_ids=8x512 on a language model's export is -batch 8
// -seq 512; -input images=Bx3x384x640 on a detector is -img 384x640.
func (f *flagSet) bindInput(path, spec string) error {
	name, dims, ok := strings.Cut(spec, "=")
	if !ok || name == "" || dims == "" {
		return fmt.Errorf("onnxmem: -input %s: want NAME=DIMS such as input_ids=8x512, or images=Bx3x640x640 (B: the command's batch)", quoteFlag(spec))
	}
	m, err := inputModel(path)
	if err != nil {
		return err
	}
	var in *sim.Input
	var names []string
	inputs := sim.Inputs(m.Graph)
	for i := range inputs {
		names = append(names, inputs[i].Name)
		if inputs[i].Name == name {
			in = &inputs[i]
		}
	}
	if in == nil {
		return fmt.Errorf("onnxmem: -input %s: the model has no input %s; its inputs: %s", quoteFlag(spec), quoteFlag(name), strings.Join(names, ", "))
	}
	decl := in.Dims
	parts := strings.Split(strings.ReplaceAll(dims, "×", "x"), "x")
	if len(parts) != len(decl) {
		return fmt.Errorf("onnxmem: -input %s: %d dims for input %s of rank %d", quoteFlag(spec), len(parts), name, len(decl))
	}
	d := make([]int64, len(parts))
	for i, p := range parts {
		if i == 0 && p == "B" {
			continue
		}
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 1 {
			return fmt.Errorf("onnxmem: -input %s: dim %d is %q: want a size of at least 1 (dim 0 may be B, the command's batch)", quoteFlag(spec), i, p)
		}
		d[i] = n
	}
	switch {
	case len(d) == 2 && in.Ints:
		if s := decl[1]; s > 0 && s != d[1] {
			return fmt.Errorf("onnxmem: -input %s: the export fixes %s's sequence at %d tokens: give %d, or export with a dynamic sequence", quoteFlag(spec), name, s, s)
		}
		f.img.Seq = d[1]
	case len(d) == 4:
		for _, other := range inputs {
			if len(other.Dims) == 4 && other.Name != name {
				return fmt.Errorf("onnxmem: -input %s: the image is the first input of rank 4, %s: onnxmem sizes that one", quoteFlag(spec), other.Name)
			}
			if len(other.Dims) == 4 {
				break
			}
		}
		if c := decl[1]; c > 0 && c != d[1] {
			return fmt.Errorf("onnxmem: -input %s: the export fixes %s's channels at %d", quoteFlag(spec), name, c)
		}
		f.img.H, f.img.W = d[2], d[3]
	default:
		return fmt.Errorf("onnxmem: -input %s: onnxmem binds token ids [batch, sequence] and images [batch, channels, height, width], and %s is of rank %d", quoteFlag(spec), name, len(d))
	}
	if d[0] == 0 {
		return nil
	}
	if f.Lookup("batch") == nil {
		return fmt.Errorf("onnxmem: -input %s: this command varies the batch itself: write B for dim 0", quoteFlag(spec))
	}
	if f.isSet("batch") {
		if got := f.Lookup("batch").Value.String(); got != strconv.FormatInt(d[0], 10) {
			return fmt.Errorf("onnxmem: -input %s: batch %d, and -batch %s: give one", quoteFlag(spec), d[0], got)
		}
		return nil
	}
	return f.Set("batch", strconv.FormatInt(d[0], 10))
}

// inputModel returns the engine's model at path, or the built-in model of
// that name, for its inputs' names and dims.
func inputModel(path string) (*sim.Model, error) {
	if builtin(path) {
		return sim.Builtin(path)
	}
	return sim.Load(path)
}

// quoteFlag shortens a flag's value for an error message.
func quoteFlag(s string) string {
	if r := []rune(s); len(r) > 80 {
		return string(r[:40]) + "…" + string(r[len(r)-20:])
	}
	return s
}
