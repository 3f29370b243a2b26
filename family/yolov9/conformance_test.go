package yolov9_test

import (
	"testing"

	"github.com/onnxmem/onnxmem/family/familytest"
	"github.com/onnxmem/onnxmem/family/yolov9"
)

// TestConformance runs the families' conformance suite on the YOLOv9
// family.
func TestConformance(t *testing.T) { familytest.Check(t, yolov9.Family{}) }
