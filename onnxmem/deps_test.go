package onnxmem_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLibraryModules checks what importing the library costs: its packages
// (all but the command and the examples) depend on no module beside the
// standard library and google.golang.org/protobuf, which decodes ONNX.
func TestLibraryModules(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the dependencies")
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{if .Module}}{{.Module.Path}}{{end}}",
		".", "../internal/...", "../ir", "../schedule", "../liveness", "../allocator", "../family/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var mods []string
	for _, m := range strings.Fields(string(out)) {
		if m != "github.com/onnxmem/onnxmem" && !slices.Contains(mods, m) {
			mods = append(mods, m)
		}
	}
	slices.Sort(mods)
	if want := []string{"google.golang.org/protobuf"}; !slices.Equal(mods, want) {
		t.Errorf("the library's packages depend on modules %v, want %v", mods, want)
	}
}
