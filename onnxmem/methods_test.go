package onnxmem_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxMethods is how many methods a type of the module may declare: a type
// with more holds state of more than one part of its package's work, and
// its methods belong in a part of their own.
const maxMethods = 30

// TestMethodsPerType checks that no named type of the module's packages
// declares more than maxMethods methods, counting the methods of every
// non-test source file by their receiver's type (the generated ONNX
// binding aside).
func TestMethodsPerType(t *testing.T) {
	var dirs []string
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || path == filepath.Join("..", "internal", "onnx")):
			return filepath.SkipDir
		case d.IsDir():
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		count := map[string]int{}
		var types []string // in the order their first method comes
		fset := token.NewFileSet()
		for _, e := range entries {
			name := e.Name()
			if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Recv == nil {
					continue
				}
				typ := receiverType(fd.Recv.List[0].Type)
				if count[typ] == 0 {
					types = append(types, typ)
				}
				count[typ]++
			}
		}
		checked += len(types)
		for _, typ := range types {
			if count[typ] > maxMethods {
				t.Errorf("%s: type %s has %d methods, more than %d: split its state into parts", dir, typ, count[typ], maxMethods)
			}
		}
	}
	if checked < 50 {
		t.Errorf("%d types with methods in the module: the walk lost its packages", checked)
	}
}

// receiverType returns the name of a method's receiver type: T of T, *T
// and T[P].
func receiverType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverType(x.X)
	case *ast.IndexExpr:
		return receiverType(x.X)
	case *ast.IndexListExpr:
		return receiverType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}
