package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// internalAllowed lists the exported API that names a type of an internal
// package on purpose, as "dir.Type.Method" or "dir.Func". Code outside the
// module can call such a function but cannot name its result's type.
var internalAllowed = map[string]bool{}

// internalUses lists, as "dir/file:line: name uses pkg.Type", every exported
// declaration of files whose signature, type or field types name a type of
// an internal package (an import path with an "internal" element), which a
// program outside the module could not write down.
func internalUses(fset *token.FileSet, dir string, files []*ast.File) []string {
	var out []string
	for _, f := range files {
		internal := map[string]bool{} // import names of internal packages
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(path, "internal/") && !strings.Contains(path, "/internal/") && !strings.HasSuffix(path, "/internal") {
				continue
			}
			name := path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			internal[name] = true
		}
		if len(internal) == 0 {
			continue
		}
		check := func(name string, nodes ...ast.Node) {
			if internalAllowed[dir+"."+name] {
				return
			}
			for _, n := range nodes {
				if fl, ok := n.(*ast.FieldList); n == nil || ok && fl == nil {
					continue
				}
				ast.Inspect(n, func(n ast.Node) bool {
					if sel, ok := n.(*ast.SelectorExpr); ok {
						if id, ok := sel.X.(*ast.Ident); ok && internal[id.Name] {
							p := fset.Position(sel.Pos())
							out = append(out, filepath.Join(dir, filepath.Base(p.Filename))+":"+strconv.Itoa(p.Line)+
								": "+name+" uses "+id.Name+"."+sel.Sel.Name)
						}
					}
					return true
				})
			}
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				name := d.Name.Name
				if d.Recv != nil && len(d.Recv.List) == 1 {
					recv := receiverName(d.Recv.List[0].Type)
					if !ast.IsExported(recv) {
						continue
					}
					name = recv + "." + name
				}
				check(name, d.Type)
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						if st, ok := s.Type.(*ast.StructType); ok { // exported fields only
							for _, fld := range st.Fields.List {
								for _, n := range fld.Names {
									if n.IsExported() {
										check(s.Name.Name+"."+n.Name, fld.Type)
									}
								}
								if len(fld.Names) == 0 { // embedded
									check(s.Name.Name, fld.Type)
								}
							}
							check(s.Name.Name, s.TypeParams)
							continue
						}
						check(s.Name.Name, s.TypeParams, s.Type)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() && s.Type != nil {
								check(n.Name, s.Type)
							}
						}
					}
				}
			}
		}
	}
	return out
}

// TestNoInternalTypesInAPI fails for every exported declaration of a public
// package that names a type of an internal package (outside the short list
// of deliberate ones above): such an API compiles inside the module and
// cannot be fully used outside it.
func TestNoInternalTypesInAPI(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	pkgs := publicPackages(t, fset, root)
	var found []string
	for dir, files := range pkgs {
		found = append(found, internalUses(fset, dir, files)...)
	}
	sort.Strings(found)
	for _, f := range found {
		t.Errorf("internal type in the public API: %s", f)
	}
}

// TestInternalUsesFinds checks the checker on a package that names an
// internal type in each kind of exported declaration.
func TestInternalUsesFinds(t *testing.T) {
	const src = `package p

import (
	"example.com/m/internal/fab"
	other "example.com/m/internal/x"
	"example.com/m/pub"
)

func F(x fab.Conn) pub.T { return pub.T{} }

func f(x fab.Conn) {}

func G[T other.Constraint]() {}

type S struct {
	A    *fab.Conn
	b    fab.Conn
	Pub  pub.T
}

func (S) M() map[string]fab.Conn { return nil }

type A = fab.Conn

var V fab.Conn

var ok = fab.Value
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := internalUses(fset, "p", []*ast.File{f})
	want := []string{
		"p/p.go:9: F uses fab.Conn",
		"p/p.go:13: G uses other.Constraint",
		"p/p.go:16: S.A uses fab.Conn",
		"p/p.go:21: S.M uses fab.Conn",
		"p/p.go:23: A uses fab.Conn",
		"p/p.go:25: V uses fab.Conn",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("internalUses reported\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
