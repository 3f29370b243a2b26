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
	where := "-input " + quoteFlag(spec)
	parts := strings.Split(strings.ReplaceAll(dims, "×", "x"), "x")
	d := make([]int64, len(parts))
	for i, p := range parts {
		if i == 0 && p == "B" {
			continue
		}
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 1 {
			return fmt.Errorf("onnxmem: %s: dim %d is %q: want a size of at least 1 (dim 0 may be B, the command's batch)", where, i, p)
		}
		d[i] = n
	}
	b, err := bindDims(m, name, d, where)
	if err != nil {
		return err
	}
	if b.seq > 0 {
		f.img.Seq = b.seq
	} else {
		f.img.H, f.img.W = b.h, b.w
	}
	if d[0] == 0 {
		return nil
	}
	if f.Lookup("batch") == nil {
		return fmt.Errorf("onnxmem: %s: this command varies the batch itself: write B for dim 0", where)
	}
	if f.isSet("batch") {
		if got := f.Lookup("batch").Value.String(); got != strconv.FormatInt(d[0], 10) {
			return fmt.Errorf("onnxmem: %s: batch %d, and -batch %s: give one", where, d[0], got)
		}
		return nil
	}
	return f.Set("batch", strconv.FormatInt(d[0], 10))
}

// bound is what an input's dims set: a token input's sequence, or an
// image's height and width.
type bound struct{ seq, h, w int64 }

// bindDims checks dims d (dim 0 the batch, 0 when the caller's) of m's
// input name against its declared ones and returns what they set; where
// names the flag or field in errors. It binds token ids [batch, sequence]
// and the first image [batch, channels, height, width].
func bindDims(m *sim.Model, name string, d []int64, where string) (bound, error) {
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
		return bound{}, fmt.Errorf("onnxmem: %s: the model has no input %s; its inputs: %s", where, quoteFlag(name), strings.Join(names, ", "))
	}
	decl := in.Dims
	if len(d) != len(decl) {
		return bound{}, fmt.Errorf("onnxmem: %s: %d dims for input %s of rank %d", where, len(d), quoteFlag(name), len(decl))
	}
	switch {
	case len(d) == 2 && in.Ints:
		if s := decl[1]; s > 0 && s != d[1] {
			return bound{}, fmt.Errorf("onnxmem: %s: the export fixes %s's sequence at %d tokens: give %d, or export with a dynamic sequence", where, quoteFlag(name), s, s)
		}
		return bound{seq: d[1]}, nil
	case len(d) == 4:
		for _, other := range inputs {
			if len(other.Dims) == 4 && other.Name != name {
				return bound{}, fmt.Errorf("onnxmem: %s: the image is the first input of rank 4, %s: onnxmem sizes that one", where, quoteFlag(other.Name))
			}
			if len(other.Dims) == 4 {
				break
			}
		}
		if c := decl[1]; c > 0 && c != d[1] {
			return bound{}, fmt.Errorf("onnxmem: %s: the export fixes %s's channels at %d", where, quoteFlag(name), c)
		}
		return bound{h: d[2], w: d[3]}, nil
	}
	return bound{}, fmt.Errorf("onnxmem: %s: onnxmem binds token ids [batch, sequence] and images [batch, channels, height, width], and %s is of rank %d", where, quoteFlag(name), len(d))
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
