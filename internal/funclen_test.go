package internal_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function may be, counted from the line of
// its func keyword to the line of its closing brace, both included.
const maxFuncLines = 60

// TestNoLongFunctions holds every function and method of the module's
// production code to maxFuncLines: the non-test .go files under cmd/,
// client/, internal/ and examples/. Not held: _test.go files; test
// harnesses (internal/testkit/ and the packages whose name ends in "test",
// the same rule as TestNoArrowPointsUp's); generated files (gen/ and any
// file marked "Code generated ... DO NOT EDIT."); modules of their own
// (a folder with a go.mod); and tables.
//
// A table is a function whose body is a single return statement whose
// results are all composite literals (a []T{...} or map[K]V{...} written
// out): data laid out, with no control flow to follow. A function holding
// a long switch or a list of statements is not a table, however regular.
// Package-level var blocks are not functions and are not counted.
func TestNoLongFunctions(t *testing.T) {
	type long struct {
		pos   string
		name  string
		lines int
	}
	var found []long
	checked := 0
	for _, root := range []string{"../cmd", "../client", "../internal", "../examples"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path != root && skipDir(path) {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				return err
			}
			if ast.IsGenerated(f) {
				return nil
			}
			rel := strings.TrimPrefix(filepath.ToSlash(path), "../")
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				checked++
				start := fset.Position(fn.Pos())
				lines := fset.Position(fn.End()).Line - start.Line + 1
				if lines <= maxFuncLines || isTable(fn) {
					continue
				}
				found = append(found, long{
					pos:   rel + ":" + strconv.Itoa(start.Line),
					name:  funcName(fn),
					lines: lines,
				})
			}
			return nil
		})
		if err != nil {
			t.Fatalf("walking %s: %v", root, err)
		}
	}
	if checked < 1000 {
		t.Fatalf("checked %d functions; expected the whole module's", checked)
	}
	sort.Slice(found, func(i, j int) bool { return found[i].lines > found[j].lines })
	for _, l := range found {
		t.Errorf("%s: %s is %d lines (at most %d): split it into functions that each do one named thing",
			l.pos, l.name, l.lines, maxFuncLines)
	}
}

// skipDir reports whether a folder holds no production code of this module:
// gen/, testdata/, test harnesses, or a module of its own.
func skipDir(path string) bool {
	base := filepath.Base(path)
	if base == "testdata" || base == "gen" || strings.HasSuffix(base, "test") {
		return true
	}
	if filepath.ToSlash(path) == "../internal/testkit" {
		return true
	}
	_, err := os.Stat(filepath.Join(path, "go.mod"))
	return err == nil
}

// isTable reports whether fn's body is one return of composite literals.
func isTable(fn *ast.FuncDecl) bool {
	if len(fn.Body.List) != 1 {
		return false
	}
	ret, ok := fn.Body.List[0].(*ast.ReturnStmt)
	if !ok || len(ret.Results) == 0 {
		return false
	}
	for _, r := range ret.Results {
		if _, ok := r.(*ast.CompositeLit); !ok {
			return false
		}
	}
	return true
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
