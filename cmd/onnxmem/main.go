package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// A command is one subcommand. Its run function parses its own flags and
// returns the exit code: 0 on success, 1 on a failure, 2 on a usage error.
type command struct {
	name, summary string
	run           func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

// commands lists the subcommands in the order help shows them. It is a
// function rather than a variable because help refers to it.
func commands() []command {
	return []command{
		{"report", "memory peak of a model at common batch sizes, and where it falls (the default)", cmdReport},
		{"sweep", "peak per batch size, as a table, JSON or an SVG plot", cmdSweep},
		{"timeline", "allocated and reserved memory over one step, as a summary, JSON or an SVG plot", cmdTimeline},
		{"claims", "the folklore of training YOLOv9 at batch 64, claim by claim, with computed verdicts", cmdClaims},
		{"diff", "a GPU memory snapshot against the simulated step, allocation by allocation", cmdDiff},
		{"plan", "the checkpoint plan that fits a limit with the fewest recomputed FLOPs", cmdPlan},
		{"explain", "what makes the peak: bytes alive at it by kind and by layer, and the largest tensors", cmdExplain},
		{"run", "a whole training run: allocated and reserved memory (GPU_mem) after every iteration, validation and checkpoint", cmdRun},
		{"predict", "JSON Lines scenarios on stdin to predictions on stdout", cmdPredict},
		{"maxbatch", "largest batch size that fits a device or a memory budget, or the fewest checkpoint segments for a batch", cmdMaxBatch},
		{"knobs", "what AMP, half precision and checkpoint segments save at one batch size, and their FLOP cost", cmdKnobs},
		{"devices", "the device profiles: memory, CUDA context, usable memory and cuBLAS workspace of common cards", cmdDevices},
		{"models", "the built-in models: layers, parameters, and whether each was compared with its export", cmdModels},
		{"export-model", "write a built-in model as an ONNX file", cmdExportModel},
		{"help", "this list, or a command's usage: onnxmem help COMMAND", cmdHelp},
	}
}

// run is the whole program: args without the program name.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return cmdReport(nil, stdin, stdout, stderr)
	}
	switch args[0] {
	case "-h", "-help", "--help":
		return cmdHelp(args[1:], stdin, stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], stdin, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "onnxmem: unknown command %q\nRun 'onnxmem help' for the list of commands.\n", args[0])
	return 2
}

func cmdHelp(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	switch len(args) {
	case 0:
		fmt.Fprint(stdout, `onnxmem predicts the GPU memory peak of a PyTorch training step from its ONNX graph.

usage: onnxmem [COMMAND [flags] [MODEL.onnx]]

With no command it runs report on the default model.

commands:
`)
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		for _, c := range commands() {
			fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
		}
		tw.Flush()
		fmt.Fprint(stdout, "\nRun 'onnxmem COMMAND -h' for a command's flags and an example.\n")
		return 0
	case 1:
		if args[0] == "help" {
			return cmdHelp(nil, stdin, stdout, stderr)
		}
		for _, c := range commands() {
			if c.name == args[0] {
				return c.run([]string{"-h"}, stdin, stdout, stderr)
			}
		}
		fmt.Fprintf(stderr, "onnxmem: help: unknown command %q\nRun 'onnxmem help' for the list of commands.\n", args[0])
		return 2
	default:
		fmt.Fprint(stderr, "onnxmem: help takes at most one command\nusage: onnxmem help [COMMAND]\n")
		return 2
	}
}
