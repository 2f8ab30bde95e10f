package doccheck

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

// moduleRoot is the directory holding go.mod, two levels up from this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found from %s: %v", root, err)
	}
	return root
}

// publicPackages returns the directories (relative to root) of the
// importable packages: every directory with non-test Go files outside
// internal/, testdata, hidden directories and commands (package main).
func publicPackages(t *testing.T, fset *token.FileSet, root string) map[string][]*ast.File {
	t.Helper()
	pkgs := map[string][]*ast.File{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
				name == "testdata" || name == "internal") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		dir := filepath.Dir(rel)
		pkgs[dir] = append(pkgs[dir], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// undocumented lists the exported identifiers of one package's files that
// have no doc comment, as "dir: kind Name". A declaration is documented by
// its own doc comment, by a line comment after it, or, inside a
// parenthesised const, var or type block, by the block's doc comment.
// Methods count when both they and their receiver type are exported;
// fields and interface methods when their type is exported.
func undocumented(fset *token.FileSet, dir string, files []*ast.File) []string {
	var out []string
	var at token.Pos // the declaration being checked
	miss := func(kind, name string) {
		where := dir
		if at.IsValid() {
			p := fset.Position(at)
			where = filepath.Join(dir, filepath.Base(p.Filename)) + ":" + strconv.Itoa(p.Line)
		}
		out = append(out, where+": "+kind+" "+name)
	}
	documented := func(groups ...*ast.CommentGroup) bool {
		for _, g := range groups {
			if g != nil && strings.TrimSpace(g.Text()) != "" {
				return true
			}
		}
		return false
	}
	// A field (or interface method) is documented by its own doc or line
	// comment, or by the doc comment of an earlier field of the same run of
	// lines (no blank line between) that names it, as in
	//
	//	// RetryCount and RNRRetry bound the retries.
	//	RetryCount int
	//	RNRRetry   int
	fields := func(typeName string, fl *ast.FieldList, kind string) {
		if fl == nil {
			return
		}
		var runDoc string // doc comments of the current run of lines
		prevLine := -1
		for _, f := range fl.List {
			line := fset.Position(f.Pos()).Line
			if f.Doc != nil {
				line = fset.Position(f.Doc.Pos()).Line
			}
			if prevLine < 0 || line > prevLine+1 {
				runDoc = ""
			}
			prevLine = fset.Position(f.End()).Line
			if f.Comment != nil {
				prevLine = fset.Position(f.Comment.End()).Line
			}
			if documented(f.Doc) {
				runDoc += " " + f.Doc.Text()
			}
			if documented(f.Doc, f.Comment) {
				continue
			}
			for _, n := range f.Names {
				at = n.Pos()
				if n.IsExported() && !namesWord(runDoc, n.Name) {
					miss(kind, typeName+"."+n.Name)
				}
			}
		}
	}
	hasPackageDoc := false
	for _, f := range files {
		if documented(f.Doc) {
			hasPackageDoc = true
		}
		for _, decl := range f.Decls {
			at = decl.Pos()
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				name := d.Name.Name
				kind := "func"
				if d.Recv != nil && len(d.Recv.List) == 1 {
					recv := receiverName(d.Recv.List[0].Type)
					if !ast.IsExported(recv) {
						continue
					}
					name, kind = recv+"."+name, "method"
				}
				if !documented(d.Doc) {
					miss(kind, name)
				}
			case *ast.GenDecl:
				blockDoc := d.Lparen.IsValid() && documented(d.Doc)
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						at = s.Pos()
						if !s.Name.IsExported() {
							continue
						}
						if !blockDoc && !documented(d.Doc, s.Doc, s.Comment) {
							miss("type", s.Name.Name)
						}
						switch tt := s.Type.(type) {
						case *ast.StructType:
							fields(s.Name.Name, tt.Fields, "field")
						case *ast.InterfaceType:
							fields(s.Name.Name, tt.Methods, "interface method")
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							at = n.Pos()
							if n.IsExported() && !blockDoc && !documented(d.Doc, s.Doc, s.Comment) {
								miss(d.Tok.String(), n.Name)
							}
						}
					}
				}
			}
		}
	}
	at = token.NoPos
	if !hasPackageDoc {
		miss("package", "doc comment")
	}
	return out
}

// namesWord reports whether text contains name as a whole word.
func namesWord(text, name string) bool {
	isWord := func(r byte) bool {
		return r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
	}
	for i := 0; ; {
		j := strings.Index(text[i:], name)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(name)
		if (j == 0 || !isWord(text[j-1])) && (end == len(text) || !isWord(text[end])) {
			return true
		}
		i = j + 1
	}
}

// receiverName is the type name of a method receiver: T, *T, T[P], *T[P].
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// TestExportedDocumented fails for every exported identifier of a public
// package without a doc comment, naming each.
func TestExportedDocumented(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	pkgs := publicPackages(t, fset, root)
	var dirs []string
	for dir := range pkgs {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	if len(dirs) == 0 {
		t.Fatalf("no public package found under %s", root)
	}
	var missing []string
	for _, dir := range dirs {
		missing = append(missing, undocumented(fset, dir, pkgs[dir])...)
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("undocumented: %s", m)
	}
	t.Logf("checked %d public packages: %s", len(dirs), strings.Join(dirs, " "))
}

// TestUndocumentedFinds checks the checker on a package with one
// identifier of each kind documented and one of each kind not.
func TestUndocumentedFinds(t *testing.T) {
	const src = `// Package p is documented.
package p

// Documented is.
func Documented() {}

func Bare() {}

func unexported() {}

// T is documented.
type T struct {
	A int // documented by a line comment
	// B and C are documented by one comment.
	B int
	C int

	D int
	e int
}

func (T) String() string { return "" }

// Method is documented.
func (T) Method() {}

type u struct{ X int }

func (u) Exported() {}

// Block documents every constant of the block.
const (
	K1 = iota
	K2
)

const (
	V1 = 1 // documented by a line comment
	V2 = 2
)

var Loose = 3

type (
	// W is documented.
	W int
	Y int
)

// I is documented.
type I interface {
	// M is documented.
	M()
	N()
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	got := undocumented(fset, "p", []*ast.File{f})
	want := []string{
		"p/p.go:7: func Bare",
		"p/p.go:18: field T.D",
		"p/p.go:22: method T.String",
		"p/p.go:39: const V2",
		"p/p.go:42: var Loose",
		"p/p.go:47: type Y",
		"p/p.go:54: interface method I.N",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("undocumented reported\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A package without a doc comment is reported too.
	f, err = parser.ParseFile(fset, "q.go", "package q\n", parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	if got := undocumented(fset, "q", []*ast.File{f}); len(got) != 1 || got[0] != "q: package doc comment" {
		t.Errorf("package without doc: got %q, want [\"q: package doc comment\"]", got)
	}
}
