// Copyright The Rekindle Authors.
// Licensed under the Apache License, Version 2.0
// (http://www.apache.org/licenses/LICENSE-2.0).

package check

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestImageFilesHaveReaders walks the table of image files: each names
// a function of this package that reads it (its body names the file), or
// a test (of this package, or a system test) that shows its content
// changes nothing outside the container.
func TestImageFilesHaveReaders(t *testing.T) {
	funcs, tests := packageFuncs(t)
	for _, f := range imageFiles {
		switch {
		case f.reader != "":
			body, ok := funcs[f.reader]
			if !ok {
				t.Errorf("%s: its reader %s is no function of the package", f.name, f.reader)
				continue
			}
			if stem, _, _ := strings.Cut(f.name, "N"); !slices.ContainsFunc(body, func(s string) bool { return strings.Contains(s, stem) }) {
				t.Errorf("%s: its reader %s names no file %q", f.name, f.reader, stem)
			}
		case strings.Contains(f.shownBy, ".bats: "):
			// A system test of the repository: FILE: a stretch of its name.
			file, name, _ := strings.Cut(f.shownBy, ": ")
			b, err := os.ReadFile("../../" + file)
			if err != nil || !strings.Contains(string(b), `@test "`) || !strings.Contains(string(b), name) {
				t.Errorf("%s: its test %q is not in %s (%v)", f.name, name, file, err)
			}
		case f.shownBy != "":
			if !tests[f.shownBy] {
				t.Errorf("%s: its test %s is no test of the package", f.name, f.shownBy)
			}
		default:
			t.Errorf("%s has neither a reader nor a test", f.name)
		}
	}
}

// packageFuncs returns the string literals in each function of the
// package's own files, and the names of its tests.
func packageFuncs(t *testing.T) (map[string][]string, map[string]bool) {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return true }, 0)
	if err != nil {
		t.Fatal(err)
	}
	funcs, tests := map[string][]string{}, map[string]bool{}
	for name, f := range pkgs["check"].Files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if strings.HasSuffix(name, "_test.go") {
				tests[fd.Name.Name] = strings.HasPrefix(fd.Name.Name, "Test")
				continue
			}
			var lits []string
			ast.Inspect(fd, func(n ast.Node) bool {
				if l, ok := n.(*ast.BasicLit); ok && l.Kind == token.STRING {
					lits = append(lits, l.Value)
				}
				return true
			})
			funcs[fd.Name.Name] = lits
		}
	}
	return funcs, tests
}
