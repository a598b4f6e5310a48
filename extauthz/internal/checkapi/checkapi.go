// Package checkapi reads the application-facing check requests (AuthZEN
// 1.0 and Permit's /allowed) into one canonical nexus check, and writes
// their responses.
package checkapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/nexuspdp/nexus/pdp"
)

// ErrBadRequest reports a request body that is not a valid check request.
var ErrBadRequest = pdp.ErrBadRequest

// Subject, Resource and Check are the core's application check.
type (
	Subject  = pdp.Subject
	Resource = pdp.Resource
	Check    = pdp.Check
)

// decode reads one JSON value into v: numbers stay exact, trailing data
// and invalid UTF-8 are errors.
func decode(r io.Reader, v any) error {
	var body []byte
	if b, ok := r.(*bytes.Buffer); ok {
		body = b.Next(b.Len()) // already in memory: no second copy
	} else {
		var err error
		if body, err = io.ReadAll(r); err != nil {
			return err
		}
	}
	if !utf8.Valid(body) {
		return fmt.Errorf("%w: the body is not valid UTF-8", ErrBadRequest)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s", ErrBadRequest, describeJSONError(err))
	}
	if dec.More() {
		return fmt.Errorf("%w: unexpected data after the JSON value", ErrBadRequest)
	}
	return nil
}

func describeJSONError(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		if typ.Field != "" {
			return fmt.Sprintf("%s must be %s, not %s", typ.Field, typeName(typ.Type.Kind().String()), typ.Value)
		}
		return fmt.Sprintf("the body must be %s, not %s", typeName(typ.Type.Kind().String()), typ.Value)
	case errors.Is(err, io.EOF):
		return "the body is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends early"
	}
	return err.Error()
}

func typeName(kind string) string {
	switch kind {
	case "map", "struct":
		return "an object"
	case "slice":
		return "an array"
	case "bool":
		return "a boolean"
	}
	return "a " + kind
}
