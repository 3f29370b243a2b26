package onnxbuild

import (
	"os"
	"path/filepath"
	"testing"
)

// SharedDir is the shared data folder (YOLOv9 exports, GPU measurements) as
// seen from a package directory one level below the repository root, such
// as onnxmem/ or examples/.
var SharedDir = filepath.Join("..", "..", "shared")

// Shared returns the path of rel inside SharedDir for a test or benchmark.
// When it is missing, a test fails under CI (CI=true), which must have the
// data, and is skipped elsewhere; a benchmark is always skipped.
func Shared(tb testing.TB, rel string) string {
	tb.Helper()
	p := filepath.Join(SharedDir, rel)
	if _, err := os.Stat(p); err != nil {
		if _, bench := tb.(*testing.B); !bench && os.Getenv("CI") == "true" {
			tb.Fatalf("shared data missing: %v (CI needs the shared folder next to the repository)", err)
		}
		tb.Skipf("shared data missing: %v", err)
	}
	return p
}
