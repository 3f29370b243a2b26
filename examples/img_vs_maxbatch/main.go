// Command img_vs_maxbatch runs the notebook-style example of the same name (package
// examples, ImgVsMaxBatch) and prints its table and conclusion.
package main

import (
	"log"
	"os"

	"github.com/onnxmem/onnxmem/examples"
)

func main() {
	if err := examples.ImgVsMaxBatch(os.Stdout); err != nil {
		log.Fatal(err)
	}
}
