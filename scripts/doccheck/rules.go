package main

import (
	"fmt"
	"go/ast"
	"regexp"
	"strconv"
	"strings"
)

// qualified matches X.Name and X.Name.Member in doc text.
var qualified = regexp.MustCompile(`\b([A-Za-z_][A-Za-z0-9_]*)\.([A-Z][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?`)

// camel matches a bare identifier of two or more humps (FlowGate,
// MaxOutstandingBytes), which a doc comment names only if something declares it.
var camel = regexp.MustCompile(`(?:^|[^.\w])([A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+)\b`)

// known tells whether a bare name in a doc is declared: by the module (a
// benchmark or test may be named without its prefix), by another module
// (external), or, written "…Name", as the end of a declared name.
func (m *module) known(name, match string) bool {
	if m.all[name] || external[name] || m.all["Benchmark"+name] || m.all["Test"+name] {
		return true
	}
	if strings.HasPrefix(match, "…") {
		for n := range m.all {
			if strings.HasSuffix(n, name) {
				return true
			}
		}
	}
	return false
}

// describes are second words that make a doc's first word the name of
// what it documents ("Len is ...", "Check reports ...").
var describes = regexp.MustCompile(`^(is|are|reports|returns|tells|records|counts|builds|makes|starts|stops|sends|runs|closes|creates|holds|waits|gives|takes|settles|yields|wraps|moves)$`)

// docStarter is a decl whose doc comment is checked.
type docStarter struct {
	name     string
	exported bool // needs a doc that starts with its name
	doc      *ast.CommentGroup
	at       ast.Node // where to report it
}

// checkFile applies every rule to f's declarations and comments.
func (m *module) checkFile(p *pkgInfo, f *ast.File) []string {
	var problems []string
	report := func(pos ast.Node, format string, args ...any) {
		problems = append(problems, m.fset.Position(pos.Pos()).String()+": "+fmt.Sprintf(format, args...))
	}
	for _, d := range docStarters(f) {
		if msg := startProblem(d); msg != "" {
			report(d.at, "%s: %s", d.name, msg)
		}
	}
	imports := fileImports(f)
	for _, cg := range f.Comments {
		for _, ref := range qualified.FindAllStringSubmatch(cg.Text(), -1) {
			if msg := m.refProblem(p, imports, ref[1], ref[2], ref[3]); msg != "" {
				report(cg, "%s", msg)
			}
		}
		for _, w := range camel.FindAllStringSubmatch(cg.Text(), -1) {
			if !m.known(w[1], w[0]) {
				report(cg, "names %s, which the module does not declare", w[1])
			}
		}
	}
	return problems
}

// docStarters lists f's functions, methods, types, vars and consts with
// their doc comments. Methods of unexported types and members of a
// documented group need no doc of their own.
func docStarters(f *ast.File) []docStarter {
	var out []docStarter
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			exp := d.Name.IsExported() && (d.Recv == nil || ast.IsExported(recvType(d)))
			out = append(out, docStarter{d.Name.Name, exp, d.Doc, d})
		case *ast.GenDecl:
			grouped := d.Lparen.IsValid()
			for _, s := range d.Specs {
				doc := d.Doc
				if grouped {
					doc = specDoc(s)
				}
				for _, n := range specNames(s) {
					exp := ast.IsExported(n) && !(grouped && doc == nil && d.Doc != nil)
					out = append(out, docStarter{n, exp, doc, s})
				}
			}
		}
	}
	return out
}

func specDoc(s ast.Spec) *ast.CommentGroup {
	switch s := s.(type) {
	case *ast.TypeSpec:
		return s.Doc
	case *ast.ValueSpec:
		return s.Doc
	}
	return nil
}

func specNames(s ast.Spec) []string {
	switch s := s.(type) {
	case *ast.TypeSpec:
		return []string{s.Name.Name}
	case *ast.ValueSpec:
		var names []string
		for _, n := range s.Names {
			if n.Name != "_" {
				names = append(names, n.Name)
			}
		}
		return names
	}
	return nil
}

// startProblem says what is wrong with how d's doc starts, or "".
func startProblem(d docStarter) string {
	words := strings.Fields(d.doc.Text())
	if len(words) > 0 && (words[0] == "A" || words[0] == "An" || words[0] == "The") {
		words = words[1:]
	}
	if len(words) == 0 {
		if d.exported {
			return "exported and undocumented"
		}
		return ""
	}
	first := strings.TrimRight(strings.TrimSuffix(words[0], "'s"), ",:;.")
	if first == d.name {
		return ""
	}
	if strings.EqualFold(first, d.name) {
		return fmt.Sprintf("doc starts with %q, another spelling of its name (stale)", first)
	}
	if len(words) > 1 && isIdent(first) && ast.IsExported(first) && describes.MatchString(words[1]) {
		return fmt.Sprintf("doc describes %q, which is not its name (stale)", first)
	}
	if d.exported {
		return fmt.Sprintf("doc does not start with its name (starts %q)", words[0])
	}
	return ""
}

func isIdent(s string) bool {
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return s != ""
}

// fileImports maps each import's local name to its path.
func fileImports(f *ast.File) map[string]string {
	out := map[string]string{}
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		out[name] = path
	}
	return out
}

// refProblem checks a doc's X.Name(.Member): X a local type, or a package
// of this module (imported by the file, or known by its name). References
// to other modules are not checked.
func (m *module) refProblem(p *pkgInfo, imports map[string]string, x, name, member string) string {
	if p.names[x] && !p.names[name] {
		if found, unknown := p.hasMember(x, name, 0); !found && !unknown {
			return fmt.Sprintf("names %s.%s: %s has no field or method %s", x, name, x, name)
		}
		return ""
	}
	target := m.byPath[imports[x]]
	if target == nil && imports[x] == "" && len(m.byName[x]) == 1 {
		target = m.byName[x][0]
	}
	if target == nil {
		return ""
	}
	if !target.names[name] {
		return fmt.Sprintf("names %s.%s: package %s has no %s", x, name, target.path, name)
	}
	if member != "" && ast.IsExported(member) {
		if found, unknown := target.hasMember(name, member, 0); !found && !unknown {
			return fmt.Sprintf("names %s.%s.%s: %s has no field or method %s", x, name, member, name, member)
		}
	}
	return ""
}
