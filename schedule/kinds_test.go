package schedule

import (
	"testing"

	"github.com/onnxmem/onnxmem/ir"
)

// TestKindRules checks that every eager kind that a row of ir's op table
// names for tensor data, and those Flow gives nodes beyond them (a SiLU, a
// batch norm on running statistics), has a forward and a backward.
func TestKindRules(t *testing.T) {
	kinds := []ir.Eager{ir.EagerSiLU, ir.EagerBatchNormEval}
	for _, r := range ir.Ops() {
		if r.Eager.RunsOnData() {
			kinds = append(kinds, r.Eager)
		}
	}
	for _, k := range kinds {
		if int(k) >= len(kindRules) || kindRules[k].forward == nil || kindRules[k].backward == nil {
			t.Errorf("eager kind %d: no forward or backward in kindRules", k)
		}
	}
}
