package main

import (
	"fmt"
	"io"

	"github.com/onnxmem/onnxmem/family/yolov9/claims"
)

func cmdClaims(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	f := newFlagSet("claims",
		"onnxmem claims [-model NAME] [-batch N] [-img N] [-boxes N] [-device NAME] [-json|-csv]",
		"Claims checks the folklore of training YOLOv9 at batch 64 without running out of\n"+
			"memory (a popular article's advice) against the simulation of train_dual.py on a\n"+
			"built-in model: for each claim, what onnxmem computes and the verdict that follows.\n"+
			"Sizes are GB (1e9 bytes) of the reserved peak, as GPU_mem prints them.",
		"onnxmem claims -json")
	d := claims.Default
	model := f.String("model", d.Model, "the built-in YOLOv9 `name` the claims are about")
	batch := f.positive("batch", d.Batch, "batch `size`")
	img := f.positive("img", d.Img, "square image `side`")
	boxes := f.positive("boxes", d.Boxes, "the most boxes an image of a batch has, what the loss pads to")
	card := f.String("device", d.Card, "the card of the article's table, a device profile's `NAME`")
	asJSON, asCSV := f.jsonFlag(), f.csvFlag()
	if code, ok := f.parseNoArgs(args, stdout, stderr); !ok {
		return code
	}
	cs, err := claims.Check(claims.Setting{Model: *model, Batch: *batch, Img: *img, Boxes: *boxes, Card: *card})
	if err != nil {
		return fail(stderr, err)
	}
	if *asCSV {
		return exit(stderr, writeCSV(stdout, cs))
	}
	if *asJSON {
		return exit(stderr, writeJSON(stdout, cs))
	}
	fmt.Fprintf(stdout, "the folklore of training %s at %d px, batch %d, against onnxmem's simulation of train_dual.py\n\n", *model, *img, *batch)
	for _, c := range cs {
		fmt.Fprintf(stdout, "%d. %s\n   %s: %s\n\n", c.ID, c.Claim, verdictWord(c.Verdict), c.Finding)
	}
	return 0
}

func verdictWord(v string) string {
	switch v {
	case "true":
		return "TRUE"
	case "partly":
		return "PARTLY"
	}
	return "FALSE"
}
