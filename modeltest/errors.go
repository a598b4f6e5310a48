package modeltest

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nexuspdp/nexus/schemaconv"
)

// Error is a problem with a test file, or a file it names, that keeps it
// from running. It reads "file:line:col: message"; when the cause is a
// schema or tuple error with its own position (Err), each of its errors
// gets a line of its own in that form.
type Error struct {
	File   string
	Line   int // 1-based; 0 when unknown
	Column int
	Msg    string
	Err    error // the cause, if any
}

func (e *Error) Error() string {
	if e.Err == nil {
		if e.Line > 0 {
			return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
		}
		return e.File + ": " + e.Msg
	}
	list := []error{e.Err}
	if j, ok := e.Err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	}
	var b strings.Builder
	for i, x := range list {
		if i > 0 {
			b.WriteByte('\n')
		}
		var ce *schemaconv.Error
		if errors.As(x, &ce) && ce.Line > 0 {
			b.WriteString(e.File + ":" + ce.Error()) // "L:C: message"
			continue
		}
		b.WriteString(e.File + ": " + e.Msg + x.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }
