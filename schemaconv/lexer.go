package schemaconv

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// One lexer reads the OpenFGA DSL and the SpiceDB schema language; a
// dialect holds what the two differ in.

type tokKind uint8

const (
	tokEOF tokKind = iota
	tokNL          // a run of newlines, in a dialect where they are tokens
	tokWord
	tokPunct
	tokBad // a rune that starts no token, or an unterminated /* comment
)

type token struct {
	kind tokKind
	text string
	at   pos
}

type dialect struct {
	newlines      bool     // a newline is a token (OpenFGA), not a blank
	slashComments bool     // // and /* */ are comments (SpiceDB)
	wordBytes     string   // what a word may hold besides letters, digits and '_'
	puncts        []string // the punctuation, each before its prefixes
	keywords      []string // the words that are not names
}

type lexer struct {
	dialect
	src       string
	i         int
	line, col int
	peeked    *token
	err       *Error // an unterminated comment
}

func newLexer(d dialect, src string) *lexer {
	return &lexer{dialect: d, src: src, line: 1, col: 1}
}

// maxDepth bounds the parentheses of a definition or expression (the nexus
// expression it becomes may need up to twice as many, and nexus accepts
// 64).
const maxDepth = 30

func (l *lexer) isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || strings.IndexByte(l.wordBytes, c) >= 0
}

func (l *lexer) advance(n int) {
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

// skip passes over blanks and comments. It returns the token they make, if
// any: tokNL at the first newline of a run (with the blanks between), or
// tokBad for an unterminated /* comment.
func (l *lexer) skip() (token, bool) {
	nl, sawNL := token{kind: tokNL, text: "newline"}, false
	for l.i < len(l.src) {
		rest := l.src[l.i:]
		switch {
		case rest[0] == '\n' && l.newlines && !sawNL:
			nl.at, sawNL = pos{l.line, l.col}, true
			l.advance(1)
		case strings.IndexByte(" \t\r\f\n", rest[0]) >= 0:
			l.advance(1)
		case l.slashComments && strings.HasPrefix(rest, "//"):
			for l.i < len(l.src) && l.src[l.i] != '\n' {
				l.advance(1)
			}
		case l.slashComments && strings.HasPrefix(rest, "/*"):
			at := pos{l.line, l.col}
			end := strings.Index(rest[2:], "*/")
			if end < 0 {
				l.err = syntaxErr(at, "unterminated /* comment")
				l.advance(len(rest))
				return token{kind: tokBad, text: "/*", at: at}, true
			}
			l.advance(end + 4)
		default:
			return nl, sawNL
		}
	}
	return nl, sawNL
}

func (l *lexer) lex() token {
	if t, ok := l.skip(); ok {
		return t
	}
	at := pos{l.line, l.col}
	if l.i >= len(l.src) {
		return token{kind: tokEOF, at: at}
	}
	if l.isWordByte(l.src[l.i]) {
		start := l.i
		for l.i < len(l.src) && l.isWordByte(l.src[l.i]) {
			l.advance(1)
		}
		return token{kind: tokWord, text: l.src[start:l.i], at: at}
	}
	for _, p := range l.puncts {
		if strings.HasPrefix(l.src[l.i:], p) {
			l.advance(len(p))
			return token{kind: tokPunct, text: p, at: at}
		}
	}
	_, n := utf8.DecodeRuneInString(l.src[l.i:])
	l.advance(n)
	return token{kind: tokBad, text: l.src[l.i-n : l.i], at: at}
}

func (l *lexer) peek() token {
	if l.peeked == nil {
		t := l.lex()
		l.peeked = &t
	}
	return *l.peeked
}

func (l *lexer) next() token {
	t := l.peek()
	l.peeked = nil
	return t
}

func describe(t token) string {
	switch t.kind {
	case tokEOF:
		return "end of input"
	case tokNL:
		return "end of line"
	}
	return "`" + t.text + "`"
}

// fail reports a syntax error at t, or the unterminated comment t is.
func (l *lexer) fail(t token, format string, args ...any) *Error {
	if t.kind == tokBad && l.err != nil {
		return l.err
	}
	return syntaxErr(t.at, format, args...)
}

// is reports whether the next token is text, of kind.
func (l *lexer) is(kind tokKind, text string) bool {
	t := l.peek()
	return t.kind == kind && t.text == text
}

// expect consumes the next token, which must be text, of kind.
func (l *lexer) expect(kind tokKind, text string) (token, error) {
	t := l.next()
	if t.kind != kind || t.text != text {
		return t, l.fail(t, "want `%s`, found %s", text, describe(t))
	}
	return t, nil
}

// expectName consumes the next token, which must be a word and no keyword;
// what says what it names.
func (l *lexer) expectName(what string) (token, error) {
	t := l.next()
	if t.kind != tokWord || slices.Contains(l.keywords, t.text) {
		return t, l.fail(t, "want %s, found %s", what, describe(t))
	}
	return t, nil
}
