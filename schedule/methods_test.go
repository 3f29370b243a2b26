package schedule

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxMethods is how many methods a type of packages ir and schedule may
// declare: a type with more holds state of more than one part of the
// simulation, and its methods belong in a part of their own.
const maxMethods = 30

// TestMethodsPerType checks that no named type of packages schedule and
// ir declares more than maxMethods methods, counting the methods of every
// non-test source file by their receiver's type.
func TestMethodsPerType(t *testing.T) {
	for _, dir := range []string{".", "../ir"} {
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
		if len(types) == 0 {
			t.Fatalf("%s: no methods found", dir)
		}
		for _, typ := range types {
			if count[typ] > maxMethods {
				t.Errorf("%s: type %s has %d methods, more than %d: split its state into parts", dir, typ, count[typ], maxMethods)
			}
		}
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
