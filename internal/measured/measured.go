package measured

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Dir is calibration/results, where calibration/'s scripts record what
// they measured on the device, as seen from the package folder a test runs
// in (at any depth below the repository's root).
var Dir = resultsDir()

// resultsDir finds the repository's root, the nearest folder up from the
// working directory that holds go.mod, and returns calibration/results
// relative to the working directory.
func resultsDir() string {
	rel := "."
	dir, err := os.Getwd()
	for err == nil {
		if _, e := os.Stat(filepath.Join(dir, "go.mod")); e == nil {
			return filepath.Join(rel, "calibration", "results")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir, rel = parent, filepath.Join(rel, "..")
	}
	return filepath.Join("calibration", "results")
}

// Path returns the path of the file name of calibration/results: name
// after Dir and a slash, so that a folder's prefix ("tv/") may be
// continued.
func Path(name string) string { return Dir + "/" + name }

// Read returns the contents of the file name of calibration/results,
// decompressed when its name ends in ".gz".
func Read(name string) ([]byte, error) {
	b, err := os.ReadFile(Path(name))
	if err != nil || !strings.HasSuffix(name, ".gz") {
		return b, err
	}
	z, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("measured: %s: %w", name, err)
	}
	return io.ReadAll(z)
}
