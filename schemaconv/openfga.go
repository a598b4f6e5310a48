package schemaconv

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

var fgaDialect = dialect{
	newlines:  true,
	wordBytes: "-./",
	puncts:    []string{"[", "]", ",", ":", "#", "(", ")", "*"},
	keywords:  []string{"or", "and", "but", "from", "define", "relations", "condition", "with"},
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

type fgaParser struct {
	*lexer
	m     *model
	depth int // parentheses open
}

// open consumes a '(' and counts it.
func (p *fgaParser) open() error {
	t := p.next()
	if p.depth++; p.depth > maxDepth {
		return syntaxErr(t.at, "definition nested too deeply")
	}
	return nil
}

func (p *fgaParser) close() error {
	p.depth--
	_, err := p.expect(tokPunct, ")")
	return err
}

func (p *fgaParser) skipNL() {
	for p.peek().kind == tokNL {
		p.next()
	}
}

// endOfLine consumes a newline or accepts the end of input.
func (p *fgaParser) endOfLine() error {
	t := p.peek()
	switch t.kind {
	case tokNL:
		p.next()
		return nil
	case tokEOF:
		return nil
	}
	return syntaxErr(t.at, "want end of line, found %s", describe(t))
}

func parseOpenFGA(src []byte) (*model, error) {
	p := &fgaParser{lexer: newLexer(fgaDialect, stripFGAComments(string(src))), m: &model{from: OpenFGA}}
	if err := p.parse(); err != nil {
		return nil, err
	}
	return p.m, nil
}

func (p *fgaParser) parse() error {
	p.skipNL()
	t := p.next()
	switch {
	case t.kind == tokWord && t.text == "module":
		return unsupportedErr(t.at, "OpenFGA modules", "combine the modules of fga.mod into one model first")
	case t.kind != tokWord || t.text != "model":
		return syntaxErr(t.at, "an OpenFGA model starts with `model`, found %s", describe(t))
	}
	if err := p.endOfLine(); err != nil {
		return err
	}
	p.skipNL()
	if _, err := p.expect(tokWord, "schema"); err != nil {
		return err
	}
	v := p.next()
	switch {
	case v.kind == tokWord && v.text == "1.1":
	case v.kind == tokWord && v.text == "1.0":
		return unsupportedErr(v.at, "OpenFGA schema 1.0 models", "migrate the model to schema 1.1 (type restrictions) first")
	case v.kind == tokWord && v.text == "1.2":
		return unsupportedErr(v.at, "OpenFGA schema 1.2 (modular) models", "combine the modules into one schema 1.1 model first")
	default:
		return syntaxErr(v.at, "want schema version 1.1, found %s", describe(v))
	}
	if err := p.endOfLine(); err != nil {
		return err
	}
	for {
		p.skipNL()
		t := p.next()
		switch {
		case t.kind == tokEOF:
			return nil
		case t.kind == tokWord && t.text == "type":
			if err := p.parseType(); err != nil {
				return err
			}
		case t.kind == tokWord && t.text == "condition":
			return unsupportedErr(t.at, "OpenFGA conditions", "condition %s", p.peek().text)
		case t.kind == tokWord && t.text == "extend":
			return unsupportedErr(t.at, "OpenFGA modules", "`extend type` belongs to modular models")
		default:
			return syntaxErr(t.at, "want `type` or `condition`, found %s", describe(t))
		}
	}
}

func (p *fgaParser) parseType() error {
	name, err := p.expectName("a type name")
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
	if !p.is(tokWord, "relations") {
		return nil
	}
	p.next()
	if err := p.endOfLine(); err != nil {
		return err
	}
	for {
		p.skipNL()
		if !p.is(tokWord, "define") {
			return nil
		}
		p.next()
		if err := p.parseDefine(t); err != nil {
			return err
		}
	}
}

func (p *fgaParser) parseDefine(t *typeDef) error {
	name, err := p.expectName("a relation name")
	if err != nil {
		return err
	}
	if _, err := p.expect(tokPunct, ":"); err != nil {
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
	l, err := p.parseOperand(md, allowDirect)
	if err != nil {
		return nil, err
	}
	var first token
	for {
		t := p.peek()
		if t.kind != tokWord {
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
		p.next()
		op := t.text
		if kind == nodeExclude {
			if _, err := p.expect(tokWord, "not"); err != nil {
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
		r, err := p.parseOperand(md, false)
		if err != nil {
			return nil, err
		}
		l = &node{kind: kind, l: l, r: r, at: t.at}
	}
}

// parseOperand parses a direct assignment (where allowDirect), a
// parenthesised definition or a rewrite.
func (p *fgaParser) parseOperand(md *memberDef, allowDirect bool) (*node, error) {
	t := p.peek()
	if t.kind == tokPunct && t.text == "[" {
		if !allowDirect {
			return nil, syntaxErr(t.at, "a direct assignment [...] must come first in a definition")
		}
		return p.parseDirect(md)
	}
	if t.kind == tokPunct && t.text == "(" {
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

// parseRewrite parses "name" or "name from tupleset".
func (p *fgaParser) parseRewrite() (*node, error) {
	name, err := p.expectName("a relation name, `[` or `(`")
	if err != nil {
		return nil, err
	}
	if !p.is(tokWord, "from") {
		return &node{kind: nodeRef, name: name.text, at: name.at}, nil
	}
	p.next()
	via, err := p.expectName("a relation name after `from`")
	if err != nil {
		return nil, err
	}
	return &node{kind: nodeArrow, name: name.text, via: via.text, at: name.at, viaAt: via.at}, nil
}

// parseDirect parses [type, type#relation, ...] into md.direct.
func (p *fgaParser) parseDirect(md *memberDef) (*node, error) {
	open := p.next()
	md.hasDirect, md.directAt = true, open.at
	for {
		p.skipNL()
		typ, err := p.expectName("a type")
		if err != nil {
			return nil, err
		}
		s := subjectRef{typ: typ.text, at: typ.at}
		switch {
		case p.is(tokPunct, ":"):
			p.next()
			star := p.next()
			if star.kind != tokPunct || star.text != "*" {
				return nil, syntaxErr(star.at, "want `*` after `%s:`, found %s", typ.text, describe(star))
			}
			return nil, unsupportedErr(typ.at, "wildcard subjects", "%s:* (public access) in %s", typ.text, md.name)
		case p.is(tokPunct, "#"):
			p.next()
			rel, err := p.expectName("a relation after `#`")
			if err != nil {
				return nil, err
			}
			s.rel = rel.text
		}
		if p.is(tokWord, "with") {
			w := p.next()
			return nil, unsupportedErr(w.at, "OpenFGA conditions", "%s with %s", s, p.peek().text)
		}
		md.direct = append(md.direct, s)
		p.skipNL()
		t := p.next()
		switch {
		case t.kind == tokPunct && t.text == ",":
			continue
		case t.kind == tokPunct && t.text == "]":
			return &node{kind: nodeDirect, at: open.at}, nil
		}
		return nil, syntaxErr(t.at, "want `,` or `]`, found %s", describe(t))
	}
}
