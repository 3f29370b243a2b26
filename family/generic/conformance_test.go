package generic_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/family/familytest"
	"github.com/onnxmem/onnxmem/family/generic"
)

// TestConformance runs the families' conformance suite on the generic
// family.
func TestConformance(t *testing.T) { familytest.Check(t, generic.Family{}) }
