package schedule_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/internal/onnxbuild"
	"github.com/onnxmem/onnxmem/schedule"
)

// TestDuplicateOutput checks that a graph returning one value twice (return
// y, y) builds a balanced program: the value is kept once and freed once.
func TestDuplicateOutput(t *testing.T) {
	b := onnxbuild.New("dup")
	y := b.Layer(0).Block(b.Input("x", 3), 8, 3, 1)
	b.Output(y, y)
	program(t, load(t, b), 2, schedule.Config{})
}
