package ir

import (
	"strings"
	"testing"
)

// TestOpTable checks the op table's rows: sorted by op type, each op once;
// every row has a shape rule and a FLOP count; a row with a memory rule
// names its source, and a row without one (EagerNone, or shape arithmetic
// whatever its inputs) has no autocast class and saves nothing.
func TestOpTable(t *testing.T) {
	for i, r := range opTable {
		if i > 0 && strings.Compare(opTable[i-1].Type, r.Type) >= 0 {
			t.Errorf("row %d: %s after %s: the table must be sorted by op type, each op once", i, r.Type, opTable[i-1].Type)
		}
		if r.shape == opUnsupported || shapeRules[r.shape].infer == nil {
			t.Errorf("%s: no shape rule", r.Type)
		}
		if r.FLOPs == nil {
			t.Errorf("%s: no FLOP count", r.Type)
		}
		if got, ok := OpOf(&Node{OpType: r.Type}); !ok || got.Type != r.Type {
			t.Errorf("OpOf(%s) = %s, %v", r.Type, got.Type, ok)
		}
		switch {
		case r.Eager.RunsOnData() && r.Source == "":
			t.Errorf("%s: a memory rule that does not name what autograd saves", r.Type)
		case !r.Eager.RunsOnData() && (r.Autocast != AutocastNone || r.Saves != nil || r.Source != ""):
			t.Errorf("%s: an autocast class or saved tensors without a memory rule", r.Type)
		}
	}
	for _, n := range []*Node{{OpType: "FancyOp"}, {OpType: "Conv", Domain: "com.microsoft"}} {
		if _, ok := OpOf(n); ok {
			t.Errorf("OpOf(%s of domain %q): a row", n.OpType, n.Domain)
		}
	}
}
