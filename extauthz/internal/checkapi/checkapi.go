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
	"strings"
	"unicode/utf8"
)

// ErrBadRequest reports a request body that is not a valid check request.
var ErrBadRequest = errors.New("bad request")

// Subject is who asks.
type Subject struct {
	Type       string         `json:"type"`
	ID         string         `json:"id"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// Resource is what is asked about.
type Resource struct {
	Type       string         `json:"type"`
	ID         string         `json:"id,omitempty"`
	Tenant     string         `json:"tenant,omitempty"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// Check is the canonical check that the default policy's nexus.authz
// package reads as its input.
type Check struct {
	Subject  Subject        `json:"subject"`
	Action   string         `json:"action"`
	Resource Resource       `json:"resource"`
	Context  map[string]any `json:"context,omitempty"`
}

// Input returns the check as the policy's input document: canonical JSON
// (fields in a fixed order, map keys sorted), so equal checks give equal
// bytes and can share a cache entry.
func (c *Check) Input() []byte {
	b, err := json.Marshal(c)
	if err != nil {
		// Every value came from decoding JSON, so it encodes again.
		panic(fmt.Sprintf("checkapi: encoding a decoded check: %v", err))
	}
	return b
}

// Validate reports the first missing or malformed field.
func (c *Check) Validate() error {
	for _, f := range []struct{ name, v string }{
		{"subject.type", c.Subject.Type}, {"subject.id", c.Subject.ID},
		{"action", c.Action}, {"resource.type", c.Resource.Type},
	} {
		if f.v == "" {
			return fmt.Errorf("%w: %s is required", ErrBadRequest, f.name)
		}
	}
	for _, f := range []struct{ name, v string }{
		{"subject.type", c.Subject.Type}, {"subject.id", c.Subject.ID}, {"action", c.Action},
		{"resource.type", c.Resource.Type}, {"resource.id", c.Resource.ID}, {"resource.tenant", c.Resource.Tenant},
	} {
		if len(f.v) > 256 {
			return fmt.Errorf("%w: %s is longer than 256 bytes", ErrBadRequest, f.name)
		}
		if strings.ContainsAny(f.v, "#@ \t\n") {
			return fmt.Errorf("%w: %s %q contains a reserved character (one of '#', '@' or white space)", ErrBadRequest, f.name, f.v)
		}
	}
	return nil
}

// decode reads one JSON value into v: numbers stay exact, trailing data
// and invalid UTF-8 are errors.
func decode(r io.Reader, v any) error {
	body, err := io.ReadAll(r)
	if err != nil {
		return err
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
