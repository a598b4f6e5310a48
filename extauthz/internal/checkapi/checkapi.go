// Package checkapi reads the application-facing check requests (AuthZEN
// 1.0 and Permit's /allowed) into one canonical nexus check, and writes
// their responses.
package checkapi

import (
	"bytes"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/nexuspdp/nexus/extauthz/internal/wire"
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
// and invalid UTF-8 are errors. The handlers scanned the body already
// (wire.ReadJSON): its depth and keys are checked.
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
	return wire.DecodeJSON(body, v, false, "")
}
