package schemaconv

import (
	"errors"
	"fmt"
)

// ErrSyntax is matched (errors.Is) by every *Error with CodeSyntax: the
// input is not a well-formed OpenFGA model, SpiceDB schema or tuple file.
var ErrSyntax = errors.New("schemaconv: syntax error")

// ErrUnsupported is matched by every *Error with CodeUnsupported: the input
// is valid in its own language but uses a feature nexus does not have
// (conditions, caveats, wildcards, ...). Error.Feature names it.
var ErrUnsupported = errors.New("schemaconv: unsupported feature")

// ErrInvalid is matched by every *Error with CodeInvalid: the input parses
// but does not make a schema (an unknown type or relation, a name nexus does
// not accept, an arrow through a permission, ...).
var ErrInvalid = errors.New("schemaconv: invalid model")

// ErrUnknownFormat is returned by ParseFormat for a name it does not know.
var ErrUnknownFormat = errors.New("schemaconv: unknown format")

// Stable codes of Error.
const (
	CodeSyntax      = "syntax"
	CodeUnsupported = "unsupported"
	CodeInvalid     = "invalid"
)

// Error is one problem at a position of the input. Line and Column are
// 1-based (Column counts bytes); both are 0 when the problem has no place.
type Error struct {
	Code    string // CodeSyntax, CodeUnsupported or CodeInvalid
	Line    int
	Column  int
	Feature string // for CodeUnsupported: the feature, e.g. "OpenFGA conditions"
	Msg     string
}

// Error formats the error as "line:col: message".
func (e *Error) Error() string {
	msg := e.Msg
	if e.Code == CodeUnsupported {
		msg = "nexus does not support " + e.Feature
		if e.Msg != "" {
			msg += ": " + e.Msg
		}
	}
	if e.Line == 0 {
		return msg
	}
	return fmt.Sprintf("%d:%d: %s", e.Line, e.Column, msg)
}

// Is matches the sentinel error of the code.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case CodeSyntax:
		return target == ErrSyntax
	case CodeUnsupported:
		return target == ErrUnsupported
	case CodeInvalid:
		return target == ErrInvalid
	}
	return false
}

// pos is a 1-based position in the source.
type pos struct{ line, col int }

func syntaxErr(p pos, format string, args ...any) *Error {
	return &Error{Code: CodeSyntax, Line: p.line, Column: p.col, Msg: fmt.Sprintf(format, args...)}
}

func invalidErr(p pos, format string, args ...any) *Error {
	return &Error{Code: CodeInvalid, Line: p.line, Column: p.col, Msg: fmt.Sprintf(format, args...)}
}

func unsupportedErr(p pos, feature, format string, args ...any) *Error {
	return &Error{Code: CodeUnsupported, Line: p.line, Column: p.col, Feature: feature, Msg: fmt.Sprintf(format, args...)}
}
