// Command breakdown runs the notebook-style example of the same name (package
// examples, Breakdown) and prints its table and conclusion.
package main

import (
	"log"
	"os"

	"github.com/onnxmem/onnxmem/examples"
)

func main() {
	if err := examples.Breakdown(os.Stdout); err != nil {
		log.Fatal(err)
	}
}
