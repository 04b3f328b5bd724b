package pubsubtest

import (
	"fmt"
	"strconv"
	"strings"
)

// maxFilterBytes is the longest subscription filter the real service
// accepts.
const maxFilterBytes = 256

// filter is a parsed subscription filter: the service's language on
// message attributes.
//
//	attributes:KEY                    the message has attribute KEY
//	attributes.KEY = "v"              it has KEY with value v
//	attributes.KEY != "v"             it has no KEY, or KEY with another value
//	hasPrefix(attributes.KEY, "p")    it has KEY with a value starting with p
//	NOT e, -e, e AND e, e OR e, (e)
//
// A KEY of other characters than letters, digits, '_' and '-' is written as
// a string literal (attributes."my.key"); string literals take Go's
// escapes (\", \\, \n, \x41, \u00e9, \101). AND and OR cannot be mixed
// without parentheses, and the operators are upper case.
type filter interface {
	match(attrs map[string]string) bool
}

type (
	filterAnd []filter
	filterOr  []filter
	filterNot struct{ f filter }
	filterHas struct{ key string }
	filterEq  struct {
		key, val string
		neq      bool
	}
	filterPrefix struct{ key, prefix string }
)

func (f filterAnd) match(a map[string]string) bool {
	for _, g := range f {
		if !g.match(a) {
			return false
		}
	}
	return true
}

func (f filterOr) match(a map[string]string) bool {
	for _, g := range f {
		if g.match(a) {
			return true
		}
	}
	return false
}

func (f filterNot) match(a map[string]string) bool { return !f.f.match(a) }

func (f filterHas) match(a map[string]string) bool {
	_, ok := a[f.key]
	return ok
}

func (f filterEq) match(a map[string]string) bool {
	v, ok := a[f.key]
	return (ok && v == f.val) != f.neq
}

func (f filterPrefix) match(a map[string]string) bool {
	v, ok := a[f.key]
	return ok && strings.HasPrefix(v, f.prefix)
}

// filterError is the error of a filter that does not parse: Pos is the
// 1-based byte position in the filter where parsing failed.
type filterError struct {
	Filter string
	Pos    int
	Msg    string
}

func (e *filterError) Error() string {
	return fmt.Sprintf("Invalid filter %q: %s at position %d.", e.Filter, e.Msg, e.Pos)
}

// parseFilter parses a subscription filter. An empty filter is nil: every
// message matches.
func parseFilter(src string) (filter, error) {
	if src == "" {
		return nil, nil
	}
	if len(src) > maxFilterBytes {
		return nil, &filterError{Filter: src, Pos: maxFilterBytes + 1, Msg: fmt.Sprintf("longer than %d bytes", maxFilterBytes)}
	}
	p := &filterParser{src: src}
	p.next()
	f, err := p.expr()
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tokEOF {
		return nil, p.errf("unexpected %s", p.tok)
	}
	return f, nil
}

type tokKind uint8

const (
	tokEOF tokKind = iota
	tokIdent
	tokString
	tokLParen
	tokRParen
	tokComma
	tokColon
	tokDot
	tokEq
	tokNeq
	tokMinus
	tokBad
)

type token struct {
	kind tokKind
	text string // source text; for tokString the unquoted value
	pos  int    // 0-based byte offset
}

func (t token) String() string {
	switch t.kind {
	case tokEOF:
		return "end of filter"
	case tokString:
		return strconv.Quote(t.text)
	}
	return fmt.Sprintf("%q", t.text)
}

type filterParser struct {
	src string
	off int
	tok token
	err *filterError // a lexical error, reported when its token is used
}

func (p *filterParser) errAt(pos int, format string, args ...any) *filterError {
	return &filterError{Filter: p.src, Pos: pos + 1, Msg: fmt.Sprintf(format, args...)}
}

func (p *filterParser) errf(format string, args ...any) error {
	if p.err != nil {
		return p.err
	}
	return p.errAt(p.tok.pos, format, args...)
}

func identByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// punct maps the one-byte tokens ('-' is handled apart: NOT, or the start
// of a key).
var punct = [256]tokKind{'(': tokLParen, ')': tokRParen, ',': tokComma, ':': tokColon, '.': tokDot, '=': tokEq}

// next reads the next token into p.tok.
func (p *filterParser) next() {
	s := p.src
	for p.off < len(s) && (s[p.off] == ' ' || s[p.off] == '\t' || s[p.off] == '\n' || s[p.off] == '\r') {
		p.off++
	}
	start := p.off
	if start == len(s) {
		p.tok = token{kind: tokEOF, pos: start}
		return
	}
	c := s[start]
	switch {
	case c == '!' && start+1 < len(s) && s[start+1] == '=':
		p.off += 2
		p.tok = token{kind: tokNeq, text: "!=", pos: start}
	case c == '-' && p.tok.kind != tokDot && p.tok.kind != tokColon:
		// A leading '-' is NOT; after '.' or ':' it starts a key.
		p.off++
		p.tok = token{kind: tokMinus, text: "-", pos: start}
	case punct[c] != 0:
		p.off++
		p.tok = token{kind: punct[c], text: s[start:p.off], pos: start}
	case c == '"':
		p.lexString(start)
	case identByte(c):
		for p.off < len(s) && identByte(s[p.off]) {
			p.off++
		}
		p.tok = token{kind: tokIdent, text: s[start:p.off], pos: start}
	default:
		p.off++
		p.tok = token{kind: tokBad, text: s[start:p.off], pos: start}
	}
}

func (p *filterParser) lexString(start int) {
	s := p.src
	i := start + 1
	for i < len(s) && s[i] != '"' {
		if s[i] == '\\' {
			i++
		}
		i++
	}
	if i >= len(s) {
		p.off = len(s)
		p.tok = token{kind: tokBad, text: s[start:], pos: start}
		p.err = p.errAt(start, "unterminated string literal")
		return
	}
	p.off = i + 1
	v, err := strconv.Unquote(s[start:p.off])
	if err != nil {
		p.tok = token{kind: tokBad, text: s[start:p.off], pos: start}
		p.err = p.errAt(start, "bad escape in string literal")
		return
	}
	p.tok = token{kind: tokString, text: v, pos: start}
}

func (p *filterParser) isWord(w string) bool { return p.tok.kind == tokIdent && p.tok.text == w }

// expr := term {AND term} | term {OR term}
func (p *filterParser) expr() (filter, error) {
	first, err := p.term()
	if err != nil {
		return nil, err
	}
	var op string
	list := []filter{first}
	for p.isWord("AND") || p.isWord("OR") {
		if op == "" {
			op = p.tok.text
		} else if p.tok.text != op {
			return nil, p.errf("AND and OR cannot be mixed without parentheses")
		}
		p.next()
		t, err := p.term()
		if err != nil {
			return nil, err
		}
		list = append(list, t)
	}
	switch op {
	case "AND":
		return filterAnd(list), nil
	case "OR":
		return filterOr(list), nil
	}
	return first, nil
}

// term := (NOT | -) term | ( expr ) | predicate
func (p *filterParser) term() (filter, error) {
	switch {
	case p.isWord("NOT") || p.tok.kind == tokMinus:
		p.next()
		f, err := p.term()
		if err != nil {
			return nil, err
		}
		return filterNot{f}, nil
	case p.tok.kind == tokLParen:
		p.next()
		f, err := p.expr()
		if err != nil {
			return nil, err
		}
		if err := p.expect(tokRParen, `")"`); err != nil {
			return nil, err
		}
		return f, nil
	case p.isWord("attributes"):
		p.next()
		switch p.tok.kind {
		case tokColon:
			p.next()
			key, err := p.key()
			if err != nil {
				return nil, err
			}
			return filterHas{key}, nil
		case tokDot:
			p.next()
			key, err := p.key()
			if err != nil {
				return nil, err
			}
			neq := p.tok.kind == tokNeq
			if p.tok.kind != tokEq && !neq {
				return nil, p.errf("expected \"=\" or \"!=\", found %s", p.tok)
			}
			p.next()
			val, err := p.str()
			if err != nil {
				return nil, err
			}
			return filterEq{key: key, val: val, neq: neq}, nil
		}
		return nil, p.errf("expected \":\" or \".\" after attributes, found %s", p.tok)
	case p.isWord("hasPrefix"):
		p.next()
		return p.hasPrefix()
	}
	return nil, p.errf("expected attributes, hasPrefix, NOT or \"(\", found %s", p.tok)
}

// hasPrefix := "(" attributes "." key "," string ")", after hasPrefix.
func (p *filterParser) hasPrefix() (filter, error) {
	var key, prefix string
	err := p.expect(tokLParen, `"(" after hasPrefix`)
	if err == nil && !p.isWord("attributes") {
		err = p.errf("expected attributes.KEY, found %s", p.tok)
	}
	if err == nil {
		p.next()
		err = p.expect(tokDot, `"." after attributes`)
	}
	if err == nil {
		key, err = p.key()
	}
	if err == nil {
		err = p.expect(tokComma, `","`)
	}
	if err == nil {
		prefix, err = p.str()
	}
	if err == nil {
		err = p.expect(tokRParen, `")"`)
	}
	if err != nil {
		return nil, err
	}
	return filterPrefix{key: key, prefix: prefix}, nil
}

// expect consumes a token of kind k, or fails with "expected what, found …".
func (p *filterParser) expect(k tokKind, what string) error {
	if p.tok.kind != k {
		return p.errf("expected %s, found %s", what, p.tok)
	}
	p.next()
	return nil
}

func (p *filterParser) key() (string, error) {
	if p.tok.kind != tokIdent && p.tok.kind != tokString {
		return "", p.errf("expected an attribute key, found %s", p.tok)
	}
	k := p.tok.text
	p.next()
	return k, nil
}

func (p *filterParser) str() (string, error) {
	if p.tok.kind != tokString {
		return "", p.errf("expected a string literal, found %s", p.tok)
	}
	v := p.tok.text
	p.next()
	return v, nil
}
