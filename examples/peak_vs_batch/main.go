// Command peak_vs_batch runs the notebook-style example of the same name (package
// examples, PeakVsBatch) and prints its table and conclusion.
package main

import (
	"log"
	"os"

	"github.com/onnxmem/onnxmem/examples"
)

func main() {
	if err := examples.PeakVsBatch(os.Stdout); err != nil {
		log.Fatal(err)
	}
}
