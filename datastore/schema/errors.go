package schema

import (
	"errors"
	"fmt"
)

// ErrInvalid is matched (errors.Is) by every *Error. The store's
// datastore.ErrInvalidSchema is this error.
var ErrInvalid = errors.New("datastore: invalid schema")

// ErrInvalidTuple is returned (wrapped) by ValidateTuple when a tuple does
// not fit the schema or the syntax of package api. The store's
// datastore.ErrInvalidTuple is this error.
var ErrInvalidTuple = errors.New("datastore: invalid tuple")

// Error is one schema validation failure, with its position in the
// YAML source (Line and Column are 1-based; 0 when unknown).
type Error struct {
	Type     string // the type concerned, if any
	Relation string // the relation or permission concerned, if any
	Line     int
	Column   int
	Msg      string
}

func (e *Error) Error() string {
	where := ""
	if e.Line > 0 {
		where = fmt.Sprintf("%d:%d: ", e.Line, e.Column)
	}
	subj := ""
	switch {
	case e.Type != "" && e.Relation != "":
		subj = e.Type + "#" + e.Relation + ": "
	case e.Type != "":
		subj = e.Type + ": "
	}
	return "schema: " + where + subj + e.Msg
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *Error) Is(target error) bool { return target == ErrInvalid }
