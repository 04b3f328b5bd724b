package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// pkgInfo is what one directory's non-test files declare: top-level names,
// and the members (methods, fields, embedded types) of each type.
type pkgInfo struct {
	name    string
	path    string // import path
	files   []*ast.File
	names   map[string]bool
	members map[string]map[string]bool
	embeds  map[string][]string // local types a type embeds
}

// module is every package of the module, by import path and by name.
type module struct {
	fset   *token.FileSet
	byPath map[string]*pkgInfo
	byName map[string][]*pkgInfo
	all    map[string]bool // every name declared anywhere in the module
}

// check parses every non-test Go file under dir (the module root) and
// returns the problems found, sorted, with the number of files read.
func check(dir string) ([]string, int, error) {
	modPath, err := modulePath(dir)
	if err != nil {
		return nil, 0, err
	}
	m, files, err := load(dir, modPath)
	if err != nil {
		return nil, 0, err
	}
	var problems []string
	for _, p := range m.byPath {
		for _, f := range p.files {
			problems = append(problems, m.checkFile(p, f)...)
		}
	}
	sort.Strings(problems)
	return problems, files, nil
}

// modulePath reads the module line of dir/go.mod.
func modulePath(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s/go.mod has no module line", dir)
}

// load parses the module's packages, skipping tests, testdata and hidden
// directories.
func load(dir, modPath string) (*module, int, error) {
	m := &module{fset: token.NewFileSet(), byPath: map[string]*pkgInfo{},
		byName: map[string][]*pkgInfo{}, all: map[string]bool{}}
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != dir && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(m.fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		m.addLiterals(f)
		if strings.HasSuffix(name, "_test.go") {
			m.addTestNames(f)
			return nil
		}
		files++
		rel, _ := filepath.Rel(dir, filepath.Dir(path))
		m.add(importPath(modPath, rel), f)
		return nil
	})
	return m, files, err
}

func importPath(modPath, rel string) string {
	if rel == "." {
		return modPath
	}
	return modPath + "/" + filepath.ToSlash(rel)
}

// addTestNames records a test file's top-level functions, which docs may
// name (a benchmark to run).
func (m *module) addTestNames(f *ast.File) {
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
			m.all[fd.Name.Name] = true
		}
	}
}

// addLiterals records the identifier-like string literals of f (names of
// sub-tests, actions, attributes), which docs may name.
func (m *module) addLiterals(f *ast.File) {
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil && isIdent(s) {
				m.all[s] = true
			}
		}
		return true
	})
}

// add records f's declarations in its package.
func (m *module) add(path string, f *ast.File) {
	p := m.byPath[path]
	if p == nil {
		p = &pkgInfo{name: f.Name.Name, path: path, names: map[string]bool{},
			members: map[string]map[string]bool{}, embeds: map[string][]string{}}
		m.byPath[path] = p
		m.byName[p.name] = append(m.byName[p.name], p)
	}
	p.files = append(p.files, f)
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			m.all[d.Name.Name] = true
			if d.Recv == nil {
				p.names[d.Name.Name] = true
			} else {
				p.member(recvType(d), d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				m.addSpec(p, s)
			}
		}
	}
}

func (p *pkgInfo) member(typ, name string) {
	if p.members[typ] == nil {
		p.members[typ] = map[string]bool{}
	}
	p.members[typ][name] = true
}

// addSpec records a type (with its fields and interface methods), var or
// const.
func (m *module) addSpec(p *pkgInfo, s ast.Spec) {
	switch s := s.(type) {
	case *ast.ValueSpec:
		for _, n := range s.Names {
			p.names[n.Name], m.all[n.Name] = true, true
		}
	case *ast.TypeSpec:
		typ := s.Name.Name
		p.names[typ], m.all[typ] = true, true
		if s.Assign.IsValid() {
			// An alias's members are its target's, not read here.
			p.embeds[typ] = append(p.embeds[typ], "=")
		}
		var list *ast.FieldList
		switch t := s.Type.(type) {
		case *ast.StructType:
			list = t.Fields
		case *ast.InterfaceType:
			list = t.Methods
		}
		if list == nil {
			return
		}
		for _, fld := range list.List {
			for _, n := range fld.Names {
				p.member(typ, n.Name)
				m.all[n.Name] = true
			}
			if len(fld.Names) == 0 {
				emb := typeName(fld.Type)
				p.member(typ, emb)
				p.embeds[typ] = append(p.embeds[typ], emb)
			}
		}
	}
}

// recvType is the name of a method's receiver type.
func recvType(d *ast.FuncDecl) string {
	return typeName(d.Recv.List[0].Type)
}

// typeName is the bare name of a (possibly pointer, generic or qualified)
// type expression.
func typeName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return typeName(t.X)
	case *ast.IndexExpr:
		return typeName(t.X)
	case *ast.IndexListExpr:
		return typeName(t.X)
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.Ident:
		return t.Name
	}
	return ""
}

// hasMember tells whether typ (or a local type it embeds) declares name;
// unknown is true when typ embeds a type of another package, whose
// members are not read.
func (p *pkgInfo) hasMember(typ, name string, depth int) (found, unknown bool) {
	if p.members[typ][name] {
		return true, false
	}
	if depth > 5 {
		return false, true
	}
	for _, emb := range p.embeds[typ] {
		if !p.names[emb] {
			unknown = true
			continue
		}
		f, u := p.hasMember(emb, name, depth+1)
		if f {
			return true, false
		}
		unknown = unknown || u
	}
	return false, unknown
}
