// Command gpus runs the notebook-style example of the same name (package
// examples, GPUs) and prints its table and conclusion.
package main

import (
	"log"
	"os"

	"github.com/onnxmem/onnxmem/examples"
)

func main() {
	if err := examples.GPUs(os.Stdout); err != nil {
		log.Fatal(err)
	}
}
