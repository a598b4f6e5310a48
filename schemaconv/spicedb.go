package schemaconv

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

var zedDialect = dialect{
	slashComments: true,
	puncts:        []string{"...", "->", "{", "}", "(", ")", ":", "|", "#", "*", "+", "-", "&", "=", ";", ",", ".", "/"},
	keywords:      []string{"definition", "caveat", "relation", "permission", "nil", "with"},
}

type zedParser struct {
	*lexer
	m *model
}

func parseSpiceDB(src []byte) (*model, error) {
	p := &zedParser{lexer: newLexer(zedDialect, string(src)), m: &model{from: SpiceDB}}
	if err := p.parse(); err != nil {
		return nil, err
	}
	return p.m, nil
}

func (p *zedParser) parse() error {
	for {
		t := p.next()
		switch {
		case t.kind == tokEOF:
			return nil
		case t.kind == tokPunct && t.text == ";":
		case t.kind == tokWord && t.text == "definition":
			if err := p.parseDefinition(); err != nil {
				return err
			}
		case t.kind == tokWord && t.text == "caveat":
			return unsupportedErr(t.at, "SpiceDB caveats", "caveat %s", p.peek().text)
		case t.kind == tokWord && t.text == "use":
			flag := p.next()
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
		case t.kind == tokWord && t.text == "import":
			return unsupportedErr(t.at, "SpiceDB schema imports", "compile the schema into one file first")
		case t.kind == tokWord && t.text == "partial":
			return unsupportedErr(t.at, "SpiceDB partials", "partial %s", p.peek().text)
		default:
			return p.fail(t, "want `definition` or `caveat`, found %s", describe(t))
		}
	}
}

// typePath reads name or prefix/name (nexus accepts neither '/' nor
// prefixes; the validation names the type).
func (p *zedParser) typePath(what string) (string, pos, error) {
	t, err := p.expectName(what)
	if err != nil {
		return "", t.at, err
	}
	name := t.text
	for p.is(tokPunct, "/") {
		p.next()
		n, err := p.expectName("a name after `/`")
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
	if _, err := p.expect(tokPunct, "{"); err != nil {
		return err
	}
	for {
		tok := p.next()
		switch {
		case tok.kind == tokPunct && tok.text == "}":
			return nil
		case tok.kind == tokPunct && tok.text == ";":
		case tok.kind == tokWord && tok.text == "relation":
			if err := p.parseRelation(t); err != nil {
				return err
			}
		case tok.kind == tokWord && tok.text == "permission":
			if err := p.parsePermission(t); err != nil {
				return err
			}
		case tok.kind == tokPunct && tok.text == "...":
			return unsupportedErr(tok.at, "SpiceDB partials", "...%s", p.peek().text)
		default:
			return p.fail(tok, "want `relation`, `permission` or `}`, found %s", describe(tok))
		}
	}
}

func (p *zedParser) parseRelation(t *typeDef) error {
	name, err := p.expectName("a relation name")
	if err != nil {
		return err
	}
	md, err := t.addMember(name.text, name.at)
	if err != nil {
		return err
	}
	if _, err := p.expect(tokPunct, ":"); err != nil {
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
		case p.is(tokPunct, ":"):
			p.next()
			if _, err := p.expect(tokPunct, "*"); err != nil {
				return err
			}
			return unsupportedErr(at, "wildcard subjects", "%s:* in relation %s", typ, name.text)
		case p.is(tokPunct, "#"):
			p.next()
			if p.is(tokPunct, "...") {
				p.next() // type#... is the type itself
			} else {
				rel, err := p.expectName("a relation after `#`")
				if err != nil {
					return err
				}
				s.rel = rel.text
			}
		}
		if p.is(tokWord, "with") {
			w := p.next()
			what := p.peek()
			if what.text == "expiration" {
				return unsupportedErr(w.at, "SpiceDB relationship expiration", "%s with expiration", s)
			}
			return unsupportedErr(w.at, "SpiceDB caveats", "%s with %s", s, what.text)
		}
		md.direct = append(md.direct, s)
		if !p.is(tokPunct, "|") {
			return nil
		}
		p.next()
	}
}

func (p *zedParser) parsePermission(t *typeDef) error {
	name, err := p.expectName("a permission name")
	if err != nil {
		return err
	}
	md, err := t.addMember(name.text, name.at)
	if err != nil {
		return err
	}
	if p.is(tokPunct, ":") { // a type annotation, only checked by SpiceDB
		p.next()
		for {
			if _, _, err := p.typePath("a type"); err != nil {
				return err
			}
			if !p.is(tokPunct, "|") {
				break
			}
			p.next()
		}
	}
	if _, err := p.expect(tokPunct, "="); err != nil {
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

func (p *zedParser) parseBinary(level, depth int) (*node, error) {
	if level == len(zedOps) {
		return p.parseArrow(depth)
	}
	l, err := p.parseBinary(level+1, depth)
	if err != nil {
		return nil, err
	}
	for p.is(tokPunct, zedOps[level].tok) {
		op := p.next()
		r, err := p.parseBinary(level+1, depth)
		if err != nil {
			return nil, err
		}
		l = &node{kind: zedOps[level].kind, l: l, r: r, at: op.at}
	}
	return l, nil
}

func (p *zedParser) parseArrow(depth int) (*node, error) {
	t := p.peek()
	switch {
	case t.kind == tokPunct && t.text == "(":
		if depth >= maxDepth {
			return nil, syntaxErr(t.at, "expression nested too deeply")
		}
		p.next()
		e, err := p.parseBinary(0, depth+1)
		if err != nil {
			return nil, err
		}
		if _, err := p.expect(tokPunct, ")"); err != nil {
			return nil, err
		}
		return e, nil
	case t.kind == tokWord && t.text == "nil":
		return nil, unsupportedErr(t.at, "SpiceDB nil", "nexus has no empty expression; drop the nil")
	case t.kind == tokWord && t.text == "self":
		return nil, unsupportedErr(t.at, "SpiceDB self", "")
	}
	name, err := p.expectName("a relation or permission name, or `(`")
	if err != nil {
		return nil, err
	}
	e := &node{kind: nodeRef, name: name.text, at: name.at}
	for {
		switch {
		case p.is(tokPunct, "->"):
			arrow := p.next()
			target, err := p.expectName("a relation or permission name after `->`")
			if err != nil {
				return nil, err
			}
			if e.kind != nodeRef {
				return nil, unsupportedErr(arrow.at, "nested arrows", "%s->%s->%s", e.via, e.name, target.text)
			}
			e = &node{kind: nodeArrow, via: e.name, viaAt: e.at, name: target.text, at: target.at}
		case p.is(tokPunct, "."):
			dot := p.next()
			fn, err := p.expectName("any or all after `.`")
			if err != nil {
				return nil, err
			}
			if fn.text != "any" && fn.text != "all" {
				return nil, syntaxErr(fn.at, "want any or all after `.`, found `%s`", fn.text)
			}
			if _, err := p.expect(tokPunct, "("); err != nil {
				return nil, err
			}
			target, err := p.expectName("a relation or permission name")
			if err != nil {
				return nil, err
			}
			if _, err := p.expect(tokPunct, ")"); err != nil {
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
