package schema

import (
	"fmt"
	"strings"

	"github.com/nexuspdp/nexus/api"
)

// Op is the operator at a node of a permission expression.
type Op uint8

// The operators of a permission expression.
const (
	OpRef       Op = iota // Name: a relation or permission of the same object
	OpArrow               // Via->Name: Name on every object reached through the relation Via
	OpUnion               // Left + Right
	OpIntersect           // Left & Right
	OpExclude             // Left - Right
)

// Expr is a node of a parsed permission expression. A schema's
// expressions are resolved: every name is a member of the type, and an
// arrow's Name is a member of every type its relation accepts.
type Expr struct {
	Op          Op
	Name        string // OpRef: the member; OpArrow: the member on the objects reached
	Via         string // OpArrow: the relation followed
	Left, Right *Expr  // OpUnion, OpIntersect, OpExclude
	pos         int    // byte offset in the source text
}

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
func parseExpr(s string) (*Expr, error) {
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

func (p *exprParser) parseUnion(depth int) (*Expr, error) {
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
		k := OpUnion
		if op == '-' {
			k = OpExclude
		}
		l = &Expr{Op: k, Left: l, Right: r, pos: pos}
	}
}

func (p *exprParser) parseInter(depth int) (*Expr, error) {
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
		l = &Expr{Op: OpIntersect, Left: l, Right: r, pos: pos}
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

func (p *exprParser) parseUnary(depth int) (*Expr, error) {
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
		return &Expr{Op: OpArrow, Via: n, Name: target, pos: pos}, nil
	}
	return &Expr{Op: OpRef, Name: n, pos: pos}, nil
}

// String renders the expression with full parentheses.
func (e *Expr) String() string {
	switch e.Op {
	case OpRef:
		return e.Name
	case OpArrow:
		return e.Via + "->" + e.Name
	case OpUnion:
		return "(" + e.Left.String() + " + " + e.Right.String() + ")"
	case OpIntersect:
		return "(" + e.Left.String() + " & " + e.Right.String() + ")"
	default:
		return "(" + e.Left.String() + " - " + e.Right.String() + ")"
	}
}

// clone copies e and every node below it.
func (e *Expr) clone() *Expr {
	if e == nil {
		return nil
	}
	c := *e
	c.Left, c.Right = e.Left.clone(), e.Right.clone()
	return &c
}
