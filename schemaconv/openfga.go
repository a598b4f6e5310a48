package schemaconv

import (
	"strings"
	"unicode/utf8"
)

// The OpenFGA DSL (schema 1.1), as its grammar in openfga/language defines
// it:
//
//	model
//	  schema 1.1
//	type user
//	type document
//	  relations
//	    define parent: [folder]
//	    define viewer: [user, group#member] or editor or viewer from parent
//
// A definition is a direct assignment [types], a relation name, "name from
// tupleset", or a parenthesised definition, followed by any number of "or
// X" or of "and X", or by one "but not X" (mixing them needs
// parentheses). A direct assignment may only come first. Lines whose first
// character is '#' and everything from " #" to the end of a line are
// comments.

type fgaTokKind uint8

const (
	fgaEOF fgaTokKind = iota
	fgaNL
	fgaWord
	fgaPunct
	fgaBad
)

type fgaTok struct {
	kind fgaTokKind
	text string
	at   pos
}

type fgaLexer struct {
	src       string
	i         int
	line, col int
	peeked    *fgaTok
}

// stripFGAComments blanks comments (keeping every other byte in place, so
// positions stay right): a line whose first non-blank is '#', and from
// " #" or "\t#" to the end of a line.
func stripFGAComments(src string) string {
	b := []byte(src)
	lineStart := true
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '\n':
			lineStart = true
			continue
		case c == ' ' || c == '\t' || c == '\r':
			continue
		}
		comment := c == '#' && (lineStart || b[i-1] == ' ' || b[i-1] == '\t')
		lineStart = false
		if comment {
			for ; i < len(b) && b[i] != '\n'; i++ {
				if b[i] != '\r' {
					b[i] = ' '
				}
			}
			i--
		}
	}
	return string(b)
}

func isFGAWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '/'
}

func (l *fgaLexer) advance(n int) {
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

func (l *fgaLexer) lex() fgaTok {
	for l.i < len(l.src) && (l.src[l.i] == ' ' || l.src[l.i] == '\t' || l.src[l.i] == '\r' || l.src[l.i] == '\f') {
		l.advance(1)
	}
	at := pos{l.line, l.col}
	if l.i >= len(l.src) {
		return fgaTok{kind: fgaEOF, at: at}
	}
	c := l.src[l.i]
	switch {
	case c == '\n':
		for l.i < len(l.src) && strings.IndexByte(" \t\r\f\n", l.src[l.i]) >= 0 {
			l.advance(1)
		}
		return fgaTok{kind: fgaNL, text: "newline", at: at}
	case isFGAWordByte(c):
		start := l.i
		for l.i < len(l.src) && isFGAWordByte(l.src[l.i]) {
			l.advance(1)
		}
		return fgaTok{kind: fgaWord, text: l.src[start:l.i], at: at}
	case strings.IndexByte("[],:#()*", c) >= 0:
		l.advance(1)
		return fgaTok{kind: fgaPunct, text: string(c), at: at}
	}
	_, n := utf8.DecodeRuneInString(l.src[l.i:])
	l.advance(n)
	return fgaTok{kind: fgaBad, text: l.src[l.i-n : l.i], at: at}
}

func (l *fgaLexer) peek() fgaTok {
	if l.peeked == nil {
		t := l.lex()
		l.peeked = &t
	}
	return *l.peeked
}

func (l *fgaLexer) next() fgaTok {
	t := l.peek()
	l.peeked = nil
	return t
}

type fgaParser struct {
	lx    *fgaLexer
	m     *model
	depth int // parentheses open
}

// maxFGADepth bounds the parentheses of a definition (the nexus expression
// it becomes may need up to twice as many, and nexus accepts 64).
const maxFGADepth = 30

// open consumes a '(' and counts it.
func (p *fgaParser) open() error {
	t := p.lx.next()
	if p.depth++; p.depth > maxFGADepth {
		return syntaxErr(t.at, "definition nested too deeply")
	}
	return nil
}

func (p *fgaParser) close() error {
	p.depth--
	_, err := p.expectPunct(")")
	return err
}

func describe(t fgaTok) string {
	switch t.kind {
	case fgaEOF:
		return "end of input"
	case fgaNL:
		return "end of line"
	}
	return "`" + t.text + "`"
}

func (p *fgaParser) expectWord(what string) (fgaTok, error) {
	t := p.lx.next()
	if t.kind != fgaWord || isFGAKeyword(t.text) {
		return t, syntaxErr(t.at, "want %s, found %s", what, describe(t))
	}
	return t, nil
}

func isFGAKeyword(s string) bool {
	switch s {
	case "or", "and", "but", "from", "define", "relations", "condition", "with":
		return true
	}
	return false
}

func (p *fgaParser) expectKeyword(kw string) (fgaTok, error) {
	t := p.lx.next()
	if t.kind != fgaWord || t.text != kw {
		return t, syntaxErr(t.at, "want `%s`, found %s", kw, describe(t))
	}
	return t, nil
}

func (p *fgaParser) expectPunct(c string) (fgaTok, error) {
	t := p.lx.next()
	if t.kind != fgaPunct || t.text != c {
		return t, syntaxErr(t.at, "want `%s`, found %s", c, describe(t))
	}
	return t, nil
}

func (p *fgaParser) isPunct(c string) bool {
	t := p.lx.peek()
	return t.kind == fgaPunct && t.text == c
}

func (p *fgaParser) isWord(w string) bool {
	t := p.lx.peek()
	return t.kind == fgaWord && t.text == w
}

func (p *fgaParser) skipNL() {
	for p.lx.peek().kind == fgaNL {
		p.lx.next()
	}
}

// endOfLine consumes a newline or accepts the end of input.
func (p *fgaParser) endOfLine() error {
	t := p.lx.peek()
	switch t.kind {
	case fgaNL:
		p.lx.next()
		return nil
	case fgaEOF:
		return nil
	}
	return syntaxErr(t.at, "want end of line, found %s", describe(t))
}

func parseOpenFGA(src []byte) (*model, error) {
	p := &fgaParser{lx: &fgaLexer{src: stripFGAComments(string(src)), line: 1, col: 1}, m: &model{from: OpenFGA}}
	if err := p.parse(); err != nil {
		return nil, err
	}
	return p.m, nil
}

func (p *fgaParser) parse() error {
	p.skipNL()
	t := p.lx.next()
	switch {
	case t.kind == fgaWord && t.text == "module":
		return unsupportedErr(t.at, "OpenFGA modules", "combine the modules of fga.mod into one model first")
	case t.kind != fgaWord || t.text != "model":
		return syntaxErr(t.at, "an OpenFGA model starts with `model`, found %s", describe(t))
	}
	if err := p.endOfLine(); err != nil {
		return err
	}
	p.skipNL()
	if _, err := p.expectKeyword("schema"); err != nil {
		return err
	}
	v := p.lx.next()
	switch {
	case v.kind == fgaWord && v.text == "1.1":
	case v.kind == fgaWord && v.text == "1.0":
		return unsupportedErr(v.at, "OpenFGA schema 1.0 models", "migrate the model to schema 1.1 (type restrictions) first")
	case v.kind == fgaWord && v.text == "1.2":
		return unsupportedErr(v.at, "OpenFGA schema 1.2 (modular) models", "combine the modules into one schema 1.1 model first")
	default:
		return syntaxErr(v.at, "want schema version 1.1, found %s", describe(v))
	}
	if err := p.endOfLine(); err != nil {
		return err
	}
	for {
		p.skipNL()
		t := p.lx.next()
		switch {
		case t.kind == fgaEOF:
			return nil
		case t.kind == fgaWord && t.text == "type":
			if err := p.parseType(); err != nil {
				return err
			}
		case t.kind == fgaWord && t.text == "condition":
			return unsupportedErr(t.at, "OpenFGA conditions", "condition %s", p.lx.peek().text)
		case t.kind == fgaWord && t.text == "extend":
			return unsupportedErr(t.at, "OpenFGA modules", "`extend type` belongs to modular models")
		default:
			return syntaxErr(t.at, "want `type` or `condition`, found %s", describe(t))
		}
	}
}

func (p *fgaParser) parseType() error {
	name, err := p.expectWord("a type name")
	if err != nil {
		return err
	}
	t, err := p.m.addType(name.text, name.at)
	if err != nil {
		return err
	}
	if err := p.endOfLine(); err != nil {
		return err
	}
	p.skipNL()
	if !p.isWord("relations") {
		return nil
	}
	p.lx.next()
	if err := p.endOfLine(); err != nil {
		return err
	}
	for {
		p.skipNL()
		if !p.isWord("define") {
			return nil
		}
		p.lx.next()
		if err := p.parseDefine(t); err != nil {
			return err
		}
	}
}

func (p *fgaParser) parseDefine(t *typeDef) error {
	name, err := p.expectWord("a relation name")
	if err != nil {
		return err
	}
	if _, err := p.expectPunct(":"); err != nil {
		return err
	}
	md, err := t.addMember(name.text, name.at)
	if err != nil {
		return err
	}
	e, err := p.parseDef(md, true)
	if err != nil {
		return err
	}
	if e.kind == nodeDirect {
		e = nil // a plain relation
	}
	md.expr = e
	return p.endOfLine()
}

// parseDef parses a definition; allowDirect says whether a direct
// assignment may start it.
func (p *fgaParser) parseDef(md *memberDef, allowDirect bool) (*node, error) {
	l, err := p.parseFirst(md, allowDirect)
	if err != nil {
		return nil, err
	}
	var first fgaTok
	for {
		t := p.lx.peek()
		if t.kind != fgaWord {
			return l, nil
		}
		var kind nodeKind
		switch t.text {
		case "or":
			kind = nodeUnion
		case "and":
			kind = nodeIntersect
		case "but":
			kind = nodeExclude
		default:
			return l, nil
		}
		p.lx.next()
		op := t.text
		if kind == nodeExclude {
			if _, err := p.expectKeyword("not"); err != nil {
				return nil, err
			}
			op = "but not"
		}
		if first.text != "" {
			if first.text != t.text {
				return nil, syntaxErr(t.at, "`%s` after `%s`: mixing or, and and but not needs parentheses", op, first.text)
			}
			if kind == nodeExclude {
				return nil, syntaxErr(t.at, "a second `but not` needs parentheses")
			}
		}
		first = t
		if p.isPunct("[") {
			return nil, syntaxErr(p.lx.peek().at, "a direct assignment [...] must come first in a definition")
		}
		r, err := p.parseOperand(md)
		if err != nil {
			return nil, err
		}
		l = &node{kind: kind, l: l, r: r, at: t.at}
	}
}

func (p *fgaParser) parseFirst(md *memberDef, allowDirect bool) (*node, error) {
	t := p.lx.peek()
	if t.kind == fgaPunct && t.text == "[" {
		if !allowDirect {
			return nil, syntaxErr(t.at, "a direct assignment [...] must come first in a definition")
		}
		return p.parseDirect(md)
	}
	if t.kind == fgaPunct && t.text == "(" {
		if err := p.open(); err != nil {
			return nil, err
		}
		e, err := p.parseDef(md, allowDirect)
		if err != nil {
			return nil, err
		}
		return e, p.close()
	}
	return p.parseRewrite()
}

func (p *fgaParser) parseOperand(md *memberDef) (*node, error) {
	if p.isPunct("(") {
		if err := p.open(); err != nil {
			return nil, err
		}
		e, err := p.parseDef(md, false)
		if err != nil {
			return nil, err
		}
		return e, p.close()
	}
	return p.parseRewrite()
}

// parseRewrite parses "name" or "name from tupleset".
func (p *fgaParser) parseRewrite() (*node, error) {
	name, err := p.expectWord("a relation name, `[` or `(`")
	if err != nil {
		return nil, err
	}
	if !p.isWord("from") {
		return &node{kind: nodeRef, name: name.text, at: name.at}, nil
	}
	p.lx.next()
	via, err := p.expectWord("a relation name after `from`")
	if err != nil {
		return nil, err
	}
	return &node{kind: nodeArrow, name: name.text, via: via.text, at: name.at, viaAt: via.at}, nil
}

// parseDirect parses [type, type#relation, ...] into md.direct.
func (p *fgaParser) parseDirect(md *memberDef) (*node, error) {
	open := p.lx.next()
	md.hasDirect, md.directAt = true, open.at
	for {
		p.skipNL()
		typ, err := p.expectWord("a type")
		if err != nil {
			return nil, err
		}
		s := subjectRef{typ: typ.text, at: typ.at}
		switch {
		case p.isPunct(":"):
			p.lx.next()
			star := p.lx.next()
			if star.kind != fgaPunct || star.text != "*" {
				return nil, syntaxErr(star.at, "want `*` after `%s:`, found %s", typ.text, describe(star))
			}
			return nil, unsupportedErr(typ.at, "wildcard subjects", "%s:* (public access) in %s", typ.text, md.name)
		case p.isPunct("#"):
			p.lx.next()
			rel, err := p.expectWord("a relation after `#`")
			if err != nil {
				return nil, err
			}
			s.rel = rel.text
		}
		if p.isWord("with") {
			w := p.lx.next()
			return nil, unsupportedErr(w.at, "OpenFGA conditions", "%s with %s", s, p.lx.peek().text)
		}
		md.direct = append(md.direct, s)
		p.skipNL()
		t := p.lx.next()
		switch {
		case t.kind == fgaPunct && t.text == ",":
			continue
		case t.kind == fgaPunct && t.text == "]":
			return &node{kind: nodeDirect, at: open.at}, nil
		}
		return nil, syntaxErr(t.at, "want `,` or `]`, found %s", describe(t))
	}
}
