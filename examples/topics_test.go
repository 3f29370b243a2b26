package examples

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite examples/<topic>/output.txt")

// TestTopics runs every notebook-style example and checks its printed
// output against examples/<topic>/output.txt (go test ./examples -update
// rewrites them after a change of the analysis).
func TestTopics(t *testing.T) {
	for _, tp := range Topics() {
		t.Run(tp.Name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tp.Run(&b); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(tp.Name, "output.txt")
			if *update {
				if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(string(want), b.String()); d != "" {
				t.Errorf("%s differs (-file +now; go test ./examples -update if the change is right):\n%s", path, d)
			}
		})
	}
}
