// Access to the shared test data next to the repository.

package ir

import (
	"os"
	"path/filepath"
	"testing"
)

// sharedDir returns the path of a folder of the shared test data (such as
// "yolov9"), relative to this package. When the folder is missing the test is
// skipped, except under CI (CI=true), where it fails: CI must have the data.
func sharedDir(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join("..", "..", "shared", name)
	if _, err := os.Stat(dir); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the shared data folder %s is missing (%v): CI needs shared/%s next to the repository", dir, err, name)
		}
		t.Skipf("the shared data folder %s is missing: %v", dir, err)
	}
	return dir
}
