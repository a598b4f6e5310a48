package datastore

import (
	"fmt"
	"strings"

	"github.com/nexuspdp/nexus/api"
)

type exprError struct {
	pos int
	msg string
}

func (e *exprError) Error() string { return fmt.Sprintf("expression: offset %d: %s", e.pos, e.msg) }

type exprParser struct {
	s   string
	pos int
}

// parseExpr parses a permission expression:
//
//	expr  := inter (('+' | '-') inter)*
//	inter := unary ('&' unary)*
//	unary := '(' expr ')' | name | name '->' name
func parseExpr(s string) (*expr, error) {
	p := &exprParser{s: s}
	e, err := p.parseUnion(0)
	if err != nil {
		return nil, err
	}
	p.skip()
	if p.pos < len(p.s) {
		return nil, &exprError{p.pos, fmt.Sprintf("unexpected %q", p.s[p.pos:])}
	}
	return e, nil
}

const maxExprDepth = 64

func (p *exprParser) skip() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t' || p.s[p.pos] == '\n' || p.s[p.pos] == '\r') {
		p.pos++
	}
}

func (p *exprParser) parseUnion(depth int) (*expr, error) {
	l, err := p.parseInter(depth)
	if err != nil {
		return nil, err
	}
	for {
		p.skip()
		if p.pos >= len(p.s) || (p.s[p.pos] != '+' && p.s[p.pos] != '-') || strings.HasPrefix(p.s[p.pos:], "->") {
			return l, nil
		}
		op, pos := p.s[p.pos], p.pos
		p.pos++
		r, err := p.parseInter(depth)
		if err != nil {
			return nil, err
		}
		k := exprUnion
		if op == '-' {
			k = exprExclude
		}
		l = &expr{kind: k, l: l, r: r, pos: pos}
	}
}

func (p *exprParser) parseInter(depth int) (*expr, error) {
	l, err := p.parseUnary(depth)
	if err != nil {
		return nil, err
	}
	for {
		p.skip()
		if p.pos >= len(p.s) || p.s[p.pos] != '&' {
			return l, nil
		}
		pos := p.pos
		p.pos++
		r, err := p.parseUnary(depth)
		if err != nil {
			return nil, err
		}
		l = &expr{kind: exprIntersect, l: l, r: r, pos: pos}
	}
}

func (p *exprParser) name() (string, int, error) {
	p.skip()
	start := p.pos
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c >= 'A' && c <= 'Z' {
			p.pos++
			continue
		}
		break
	}
	n := p.s[start:p.pos]
	if n == "" {
		if p.pos >= len(p.s) {
			return "", start, &exprError{start, "unexpected end, want a relation or permission name"}
		}
		return "", start, &exprError{start, fmt.Sprintf("unexpected %q, want a relation or permission name", p.s[p.pos:p.pos+1])}
	}
	if !api.ValidName(n) {
		return "", start, &exprError{start, fmt.Sprintf("invalid name %q", n)}
	}
	return n, start, nil
}

func (p *exprParser) parseUnary(depth int) (*expr, error) {
	if depth > maxExprDepth {
		return nil, &exprError{p.pos, "expression nested too deeply"}
	}
	p.skip()
	if p.pos < len(p.s) && p.s[p.pos] == '(' {
		open := p.pos
		p.pos++
		e, err := p.parseUnion(depth + 1)
		if err != nil {
			return nil, err
		}
		p.skip()
		if p.pos >= len(p.s) || p.s[p.pos] != ')' {
			return nil, &exprError{open, "unclosed '('"}
		}
		p.pos++
		return e, nil
	}
	n, pos, err := p.name()
	if err != nil {
		return nil, err
	}
	p.skip()
	if strings.HasPrefix(p.s[p.pos:], "->") {
		p.pos += 2
		target, _, err := p.name()
		if err != nil {
			return nil, err
		}
		return &expr{kind: exprArrow, via: n, name: target, pos: pos}, nil
	}
	return &expr{kind: exprRef, name: n, pos: pos}, nil
}

// String renders the expression with full parentheses.
func (e *expr) String() string {
	switch e.kind {
	case exprRef:
		return e.name
	case exprArrow:
		return e.via + "->" + e.name
	case exprUnion:
		return "(" + e.l.String() + " + " + e.r.String() + ")"
	case exprIntersect:
		return "(" + e.l.String() + " & " + e.r.String() + ")"
	default:
		return "(" + e.l.String() + " - " + e.r.String() + ")"
	}
}
