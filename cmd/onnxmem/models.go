package main

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/onnxmem/onnxmem/family/yolov9/models"
	"github.com/onnxmem/onnxmem/onnxmem"
)

// builtinInfo describes one built-in model for onnxmem models.
type builtinInfo struct {
	Name       string `json:"name"`
	Layers     int    `json:"layers"`
	Parameters int64  `json:"parameters"`
	// Loaded is torch.cuda.memory_allocated() after model.to('cuda')
	// (onnxmem.Model.Footprint), in bytes.
	Loaded int64 `json:"loaded"`
	// Checked says the graph was compared node for node with the export of
	// the official code.
	Checked bool `json:"checked"`
}

func cmdModels(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("models",
		"onnxmem models [-json|-csv]",
		"Models lists the built-in models, in the order of models.Names: their top-level\nlayers, their trainable parameters (auxiliary branch included), the memory\nthat loading one takes (memory_allocated() after model.to('cuda')) and whether the\ngraph was compared node for node with the training-mode export of the official\ncode. Every command takes a built-in name wherever it takes MODEL.onnx, and\nonnxmem export-model writes one as a file.",
		"onnxmem models -json")
	asJSON, asCSV := f.jsonFlag(), f.csvFlag()
	if code, ok := f.parseNoArgs(args, stdout, stderr); !ok {
		return code
	}
	var infos []builtinInfo
	for _, name := range models.Names() {
		m, err := onnxmem.Builtin(name)
		if err != nil {
			return fail(stderr, err)
		}
		fp, err := m.Footprint()
		if err != nil {
			return fail(stderr, err)
		}
		infos = append(infos, builtinInfo{Name: name, Layers: m.Layers(), Parameters: fp.Trainable, Loaded: fp.Allocated, Checked: models.Checked(name)})
	}
	if *asCSV {
		return exit(stderr, writeCSV(stdout, infos))
	}
	if *asJSON {
		return exit(stderr, writeJSON(stdout, struct {
			Default string        `json:"default"`
			Models  []builtinInfo `json:"models"`
		}{defaultModel, infos}))
	}
	tw := newTable(stdout)
	fmt.Fprint(tw, "model    \tlayers\tparameters\tloaded MiB\t  checked\n")
	for _, in := range infos {
		checked := "no export"
		if in.Checked {
			checked = "same as export"
		}
		name := in.Name
		if name == defaultModel {
			name += "*"
		}
		fmt.Fprintf(tw, "%-9s\t%d\t%s\t%.1f\t  %s\n", name, in.Layers, strconv.FormatInt(in.Parameters, 10), float64(in.Loaded)/(1<<20), checked)
	}
	if err := tw.Flush(); err != nil {
		return fail(stderr, err)
	}
	fmt.Fprintf(stdout, "\n* the default model. parameters: those with a .grad, auxiliary branch included;\nloaded: memory_allocated() once model.to('cuda') has moved its parameters and buffers.\n")
	return 0
}

func cmdExportModel(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("export-model",
		"onnxmem export-model [-o FILE.onnx] [-classes N | -nc N] [-width F] [-depth F] [-weights] NAME",
		"Export-model writes a built-in model (onnxmem models lists them) as an ONNX\nfile: the graph of its training-mode export, opset 17, input images of dims\n[batch, 3, height, width]. -classes, -width and -depth make what-if variants\n(yolov9-t at -width 2 is yolov9-s); every command reads the file. Weights\nhave dims and no data unless -weights gives them zeros (4 bytes a\nparameter). Without -o the file is NAME.onnx.",
		"onnxmem export-model -classes 20 -width 0.75 -o yolov9-c-voc.onnx yolov9-c")
	out := f.String("o", "", "output `file`; NAME.onnx when empty, - for stdout")
	classes := f.positive("classes", models.DefaultClasses, "`number` of classes the head predicts")
	// -nc is YOLO's name for it (Model(cfg, nc=nc)).
	f.Var((*positiveInt)(classes), "nc", "the same as -classes, by YOLO's name")
	width := f.Float64("width", 1, "multiplier of every channel count, each rounded up to a multiple of 8")
	depth := f.Float64("depth", 1, "multiplier of the RepNCSP blocks in each RepNCSPELAN4, rounded, at least 1")
	weights := f.Bool("weights", false, "give the weights zeros as data")
	pos, code, ok := f.parse(args, stdout, stderr)
	switch {
	case !ok:
		return code
	case len(pos) != 1:
		return f.usageError(stderr, "want one model name, got %d arguments", len(pos))
	case !(*width > 0) || *width > 64:
		return f.usageError(stderr, "-width %g: want a multiplier above 0 and at most 64", *width)
	case !(*depth > 0) || *depth > 64:
		return f.usageError(stderr, "-depth %g: want a multiplier above 0 and at most 64", *depth)
	}
	data, err := models.Build(pos[0], models.Options{Classes: int(*classes), Width: *width, Depth: *depth, Weights: *weights})
	if err != nil {
		return fail(stderr, err)
	}
	path := *out
	switch path {
	case "-":
		_, err = stdout.Write(data)
		return exit(stderr, err)
	case "":
		path = pos[0] + ".onnx"
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fail(stderr, err)
	}
	return 0
}
