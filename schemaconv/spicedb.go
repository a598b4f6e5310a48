package schemaconv

import (
	"strings"
	"unicode/utf8"
)

// The SpiceDB schema language, as authzed/spicedb's schemadsl parser reads
// it:
//
//	definition user {}
//	definition document {
//	    relation parent: folder
//	    relation viewer: user | group#member
//	    permission view = viewer + parent->view
//	}
//
// Comments are // to the end of the line and /* ... */. Operators, from
// the loosest: - (exclusion), & (intersection), + (union), all left
// associative; -> (and .any()) binds tightest. So a - b + c is a - (b + c)
// and a + b & c is (a + b) & c, unlike nexus' own precedence; the
// converter writes the parentheses nexus needs.

type zedTokKind uint8

const (
	zedEOF zedTokKind = iota
	zedIdent
	zedPunct
	zedBad
)

type zedTok struct {
	kind zedTokKind
	text string
	at   pos
}

type zedLexer struct {
	src       string
	i         int
	line, col int
	peeked    *zedTok
	err       *Error // an unterminated comment
}

func (l *zedLexer) advance(n int) {
	for range n {
		if l.src[l.i] == '\n' {
			l.line++
			l.col = 1
		} else {
			l.col++
		}
		l.i++
	}
}

func isZedIdentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

func (l *zedLexer) lex() zedTok {
	for l.i < len(l.src) {
		c := l.src[l.i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f':
			l.advance(1)
		case strings.HasPrefix(l.src[l.i:], "//"):
			for l.i < len(l.src) && l.src[l.i] != '\n' {
				l.advance(1)
			}
		case strings.HasPrefix(l.src[l.i:], "/*"):
			at := pos{l.line, l.col}
			end := strings.Index(l.src[l.i+2:], "*/")
			if end < 0 {
				l.err = syntaxErr(at, "unterminated /* comment")
				l.advance(len(l.src) - l.i)
				return zedTok{kind: zedBad, text: "/*", at: at}
			}
			l.advance(end + 4)
		default:
			goto token
		}
	}
	return zedTok{kind: zedEOF, at: pos{l.line, l.col}}
token:
	at := pos{l.line, l.col}
	c := l.src[l.i]
	if isZedIdentByte(c) {
		start := l.i
		for l.i < len(l.src) && isZedIdentByte(l.src[l.i]) {
			l.advance(1)
		}
		return zedTok{kind: zedIdent, text: l.src[start:l.i], at: at}
	}
	for _, p := range []string{"...", "->", "{", "}", "(", ")", ":", "|", "#", "*", "+", "-", "&", "=", ";", ",", ".", "/"} {
		if strings.HasPrefix(l.src[l.i:], p) {
			l.advance(len(p))
			return zedTok{kind: zedPunct, text: p, at: at}
		}
	}
	_, n := utf8.DecodeRuneInString(l.src[l.i:])
	l.advance(n)
	return zedTok{kind: zedBad, text: l.src[l.i-n : l.i], at: at}
}

func (l *zedLexer) peek() zedTok {
	if l.peeked == nil {
		t := l.lex()
		l.peeked = &t
	}
	return *l.peeked
}

func (l *zedLexer) next() zedTok {
	t := l.peek()
	l.peeked = nil
	return t
}

type zedParser struct {
	lx *zedLexer
	m  *model
}

func zedDescribe(t zedTok) string {
	if t.kind == zedEOF {
		return "end of input"
	}
	return "`" + t.text + "`"
}

func (p *zedParser) fail(t zedTok, format string, args ...any) *Error {
	if t.kind == zedBad && p.lx.err != nil {
		return p.lx.err
	}
	return syntaxErr(t.at, format, args...)
}

func isZedKeyword(s string) bool {
	switch s {
	case "definition", "caveat", "relation", "permission", "nil", "with":
		return true
	}
	return false
}

func (p *zedParser) ident(what string) (zedTok, error) {
	t := p.lx.next()
	if t.kind != zedIdent || isZedKeyword(t.text) {
		return t, p.fail(t, "want %s, found %s", what, zedDescribe(t))
	}
	return t, nil
}

func (p *zedParser) punct(c string) (zedTok, error) {
	t := p.lx.next()
	if t.kind != zedPunct || t.text != c {
		return t, p.fail(t, "want `%s`, found %s", c, zedDescribe(t))
	}
	return t, nil
}

func (p *zedParser) isPunct(c string) bool {
	t := p.lx.peek()
	return t.kind == zedPunct && t.text == c
}

func (p *zedParser) isIdent(s string) bool {
	t := p.lx.peek()
	return t.kind == zedIdent && t.text == s
}

func parseSpiceDB(src []byte) (*model, error) {
	p := &zedParser{lx: &zedLexer{src: string(src), line: 1, col: 1}, m: &model{from: SpiceDB}}
	if err := p.parse(); err != nil {
		return nil, err
	}
	return p.m, nil
}

func (p *zedParser) parse() error {
	for {
		t := p.lx.next()
		switch {
		case t.kind == zedEOF:
			return nil
		case t.kind == zedPunct && t.text == ";":
		case t.kind == zedIdent && t.text == "definition":
			if err := p.parseDefinition(); err != nil {
				return err
			}
		case t.kind == zedIdent && t.text == "caveat":
			return unsupportedErr(t.at, "SpiceDB caveats", "caveat %s", p.lx.peek().text)
		case t.kind == zedIdent && t.text == "use":
			flag := p.lx.next()
			switch flag.text {
			case "typechecking":
				// Only checks permission type annotations, which are dropped.
			case "expiration":
				return unsupportedErr(t.at, "SpiceDB relationship expiration", "use expiration")
			case "self":
				return unsupportedErr(t.at, "SpiceDB self", "use self")
			case "partial":
				return unsupportedErr(t.at, "SpiceDB partials", "use partial")
			default:
				return unsupportedErr(t.at, "SpiceDB use flags", "use %s", flag.text)
			}
		case t.kind == zedIdent && t.text == "import":
			return unsupportedErr(t.at, "SpiceDB schema imports", "compile the schema into one file first")
		case t.kind == zedIdent && t.text == "partial":
			return unsupportedErr(t.at, "SpiceDB partials", "partial %s", p.lx.peek().text)
		default:
			return p.fail(t, "want `definition` or `caveat`, found %s", zedDescribe(t))
		}
	}
}

// typePath reads name or prefix/name (nexus accepts neither '/' nor
// prefixes; the validation names the type).
func (p *zedParser) typePath(what string) (string, pos, error) {
	t, err := p.ident(what)
	if err != nil {
		return "", t.at, err
	}
	name := t.text
	for p.isPunct("/") {
		p.lx.next()
		n, err := p.ident("a name after `/`")
		if err != nil {
			return "", n.at, err
		}
		name += "/" + n.text
	}
	return name, t.at, nil
}

func (p *zedParser) parseDefinition() error {
	name, at, err := p.typePath("a definition name")
	if err != nil {
		return err
	}
	t, err := p.m.addType(name, at)
	if err != nil {
		return err
	}
	if _, err := p.punct("{"); err != nil {
		return err
	}
	for {
		tok := p.lx.next()
		switch {
		case tok.kind == zedPunct && tok.text == "}":
			return nil
		case tok.kind == zedPunct && tok.text == ";":
		case tok.kind == zedIdent && tok.text == "relation":
			if err := p.parseRelation(t); err != nil {
				return err
			}
		case tok.kind == zedIdent && tok.text == "permission":
			if err := p.parsePermission(t); err != nil {
				return err
			}
		case tok.kind == zedPunct && tok.text == "...":
			return unsupportedErr(tok.at, "SpiceDB partials", "...%s", p.lx.peek().text)
		default:
			return p.fail(tok, "want `relation`, `permission` or `}`, found %s", zedDescribe(tok))
		}
	}
}

func (p *zedParser) parseRelation(t *typeDef) error {
	name, err := p.ident("a relation name")
	if err != nil {
		return err
	}
	md, err := t.addMember(name.text, name.at)
	if err != nil {
		return err
	}
	if _, err := p.punct(":"); err != nil {
		return err
	}
	md.hasDirect, md.directAt = true, name.at
	for {
		typ, at, err := p.typePath("a subject type")
		if err != nil {
			return err
		}
		s := subjectRef{typ: typ, at: at}
		switch {
		case p.isPunct(":"):
			p.lx.next()
			if _, err := p.punct("*"); err != nil {
				return err
			}
			return unsupportedErr(at, "wildcard subjects", "%s:* in relation %s", typ, name.text)
		case p.isPunct("#"):
			p.lx.next()
			if p.isPunct("...") {
				p.lx.next() // type#... is the type itself
			} else {
				rel, err := p.ident("a relation after `#`")
				if err != nil {
					return err
				}
				s.rel = rel.text
			}
		}
		if p.isIdent("with") {
			w := p.lx.next()
			what := p.lx.peek()
			if what.text == "expiration" {
				return unsupportedErr(w.at, "SpiceDB relationship expiration", "%s with expiration", s)
			}
			return unsupportedErr(w.at, "SpiceDB caveats", "%s with %s", s, what.text)
		}
		md.direct = append(md.direct, s)
		if !p.isPunct("|") {
			return nil
		}
		p.lx.next()
	}
}

func (p *zedParser) parsePermission(t *typeDef) error {
	name, err := p.ident("a permission name")
	if err != nil {
		return err
	}
	md, err := t.addMember(name.text, name.at)
	if err != nil {
		return err
	}
	if p.isPunct(":") { // a type annotation, only checked by SpiceDB
		p.lx.next()
		for {
			if _, _, err := p.typePath("a type"); err != nil {
				return err
			}
			if !p.isPunct("|") {
				break
			}
			p.lx.next()
		}
	}
	if _, err := p.punct("="); err != nil {
		return err
	}
	e, err := p.parseBinary(0, 0)
	if err != nil {
		return err
	}
	md.expr = e
	return nil
}

// zedOps lists the binary operators from the loosest.
var zedOps = []struct {
	tok  string
	kind nodeKind
}{{"-", nodeExclude}, {"&", nodeIntersect}, {"+", nodeUnion}}

// maxZedDepth bounds the parentheses of an expression (the nexus expression
// may need up to twice as many, and nexus accepts 64).
const maxZedDepth = 30

func (p *zedParser) parseBinary(level, depth int) (*node, error) {
	if level == len(zedOps) {
		return p.parseArrow(depth)
	}
	l, err := p.parseBinary(level+1, depth)
	if err != nil {
		return nil, err
	}
	for p.isPunct(zedOps[level].tok) {
		op := p.lx.next()
		r, err := p.parseBinary(level+1, depth)
		if err != nil {
			return nil, err
		}
		l = &node{kind: zedOps[level].kind, l: l, r: r, at: op.at}
	}
	return l, nil
}

func (p *zedParser) parseArrow(depth int) (*node, error) {
	t := p.lx.peek()
	switch {
	case t.kind == zedPunct && t.text == "(":
		if depth >= maxZedDepth {
			return nil, syntaxErr(t.at, "expression nested too deeply")
		}
		p.lx.next()
		e, err := p.parseBinary(0, depth+1)
		if err != nil {
			return nil, err
		}
		if _, err := p.punct(")"); err != nil {
			return nil, err
		}
		return e, nil
	case t.kind == zedIdent && t.text == "nil":
		return nil, unsupportedErr(t.at, "SpiceDB nil", "nexus has no empty expression; drop the nil")
	case t.kind == zedIdent && t.text == "self":
		return nil, unsupportedErr(t.at, "SpiceDB self", "")
	}
	name, err := p.ident("a relation or permission name, or `(`")
	if err != nil {
		return nil, err
	}
	e := &node{kind: nodeRef, name: name.text, at: name.at}
	for {
		switch {
		case p.isPunct("->"):
			arrow := p.lx.next()
			target, err := p.ident("a relation or permission name after `->`")
			if err != nil {
				return nil, err
			}
			if e.kind != nodeRef {
				return nil, unsupportedErr(arrow.at, "nested arrows", "%s->%s->%s", e.via, e.name, target.text)
			}
			e = &node{kind: nodeArrow, via: e.name, viaAt: e.at, name: target.text, at: target.at}
		case p.isPunct("."):
			dot := p.lx.next()
			fn, err := p.ident("any or all after `.`")
			if err != nil {
				return nil, err
			}
			if fn.text != "any" && fn.text != "all" {
				return nil, syntaxErr(fn.at, "want any or all after `.`, found `%s`", fn.text)
			}
			if _, err := p.punct("("); err != nil {
				return nil, err
			}
			target, err := p.ident("a relation or permission name")
			if err != nil {
				return nil, err
			}
			if _, err := p.punct(")"); err != nil {
				return nil, err
			}
			if fn.text == "all" {
				return nil, unsupportedErr(fn.at, "intersection arrows (.all)", "%s.all(%s)", e.name, target.text)
			}
			if e.kind != nodeRef {
				return nil, unsupportedErr(dot.at, "nested arrows", "%s->%s.any(%s)", e.via, e.name, target.text)
			}
			e = &node{kind: nodeArrow, via: e.name, viaAt: e.at, name: target.text, at: target.at}
		default:
			return e, nil
		}
	}
}
