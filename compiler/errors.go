package compiler

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNoEntrypoint is returned by Compile when no entrypoint was given.
var ErrNoEntrypoint = errors.New("compiler: at least one entrypoint is required")

// ErrNoPolicy is returned by Compile when neither paths nor in-memory modules
// hold any Rego.
var ErrNoPolicy = errors.New("compiler: no Rego modules given")

// Stable error codes of [Error].
const (
	CodeParse              = "parse_error"
	CodeType               = "type_error"
	CodeCompile            = "compile_error"
	CodeUnsupportedBuiltin = "unsupported_builtin"
	CodeLoad               = "load_error"
)

// Error is one compile error at a source location.
type Error struct {
	// Code is one of the Code* constants.
	Code string
	// File, Line and Column locate the error; File is empty and Line 0 when
	// the error has no location.
	File   string
	Line   int
	Column int
	// Message describes the error.
	Message string
}

// Error formats the error as "file:line:col: message".
func (e *Error) Error() string {
	if e.File == "" && e.Line == 0 {
		return e.Message
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Message)
}

// Errors is the error Compile returns for bad policies: every problem found,
// one per line.
type Errors []*Error

// Error joins the errors, one per line.
func (es Errors) Error() string {
	var sb strings.Builder
	for i, e := range es {
		if i > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(e.Error())
	}
	return sb.String()
}

// Code is the code of the first error, for metrics and exit paths.
func (es Errors) Code() string {
	if len(es) == 0 {
		return ""
	}
	return es[0].Code
}
