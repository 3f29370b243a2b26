package onnxbuild

import (
	"os"
	"path/filepath"
	"testing"
)

// SharedDir is the shared data folder (model exports, GPU measurements), the
// folder "shared" next to the repository, as seen from the package directory
// a test runs in, at any depth below the repository root.
var SharedDir = sharedDir()

// sharedDir finds the repository root, the nearest directory up from the
// working directory that holds go.mod, and returns "../shared" relative to
// the working directory; "../../shared" when there is none.
func sharedDir() string {
	rel := ".."
	dir, err := os.Getwd()
	for err == nil {
		if _, e := os.Stat(filepath.Join(dir, "go.mod")); e == nil {
			return filepath.Join(rel, "shared")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir, rel = parent, filepath.Join(rel, "..")
	}
	return filepath.Join("..", "..", "shared")
}

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
