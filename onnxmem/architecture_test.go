package onnxmem_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestArchitecture checks docs/architecture.md's package table against the
// code: a row for every package that go list finds and for no other, and
// every package of the module that a package imports (outside its tests)
// named in its row's "knows of" column.
func TestArchitecture(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the packages")
	}
	const module = "github.com/onnxmem/onnxmem/"
	out, err := exec.Command(gobin, "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	var listed []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		listed = append(listed, pkg)
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				imports[pkg] = append(imports[pkg], strings.TrimPrefix(imp, module))
			}
		}
	}
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9/_]+)` \\| .* \\| (.*) \\|$")
	code := regexp.MustCompile("`([a-z0-9/_]+)`")
	knows := map[string]string{}
	var documented []string
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[1])
		knows[m[1]] = m[2]
	}
	slices.Sort(listed)
	slices.Sort(documented)
	for _, p := range listed {
		if _, ok := knows[p]; !ok {
			t.Errorf("package %s has no row in docs/architecture.md's table", p)
		}
	}
	for _, p := range documented {
		if !slices.Contains(listed, p) {
			t.Errorf("docs/architecture.md's table has a row for %s, which go list does not find", p)
		}
	}
	for _, p := range listed {
		var named []string
		for _, m := range code.FindAllStringSubmatch(knows[p], -1) {
			named = append(named, m[1])
		}
		for _, imp := range imports[p] {
			if !slices.Contains(named, imp) {
				t.Errorf("%s imports %s, which its row in docs/architecture.md does not name (it names %v)", p, imp, named)
			}
		}
	}
}
