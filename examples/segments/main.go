// Command segments runs the notebook-style example of the same name (package
// examples, Segments) and prints its table and conclusion.
package main

import (
	"log"
	"os"

	"github.com/onnxmem/onnxmem/examples"
)

func main() {
	if err := examples.Segments(os.Stdout); err != nil {
		log.Fatal(err)
	}
}
