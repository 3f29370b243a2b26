// Command validation runs the notebook-style example of the same name (package
// examples, Validation) and prints its table and conclusion.
package main

import (
	"log"
	"os"

	"github.com/onnxmem/onnxmem/examples"
)

func main() {
	if err := examples.Validation(os.Stdout); err != nil {
		log.Fatal(err)
	}
}
