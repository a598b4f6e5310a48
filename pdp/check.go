package pdp

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/internal/jsonw"

	"github.com/nexuspdp/nexus/pdp/internal/input"
)

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

// Check is an application check (AuthZEN, the Permit-compatible API): the
// input document of the authz entrypoint.
type Check struct {
	Subject Subject `json:"subject"`
	Action  string  `json:"action"`
	// ActionAttributes are the action's properties (AuthZEN's
	// action.properties): input.action_attributes.
	ActionAttributes map[string]any `json:"action_attributes,omitempty"`
	Resource         Resource       `json:"resource"`
	Context          map[string]any `json:"context,omitempty"`
}

// HTTPRequest is the part of a proxied HTTP request (forward auth) that
// becomes the opa-envoy-plugin input document. It mirrors Envoy's
// AttributeContext.HttpRequest.
type HTTPRequest = input.HTTP

// Input returns the check as the policy's input document: canonical JSON
// (fields in a fixed order, map keys sorted), so equal checks give equal
// bytes and can share a cache entry.
func (c *Check) Input() []byte {
	// The fields are written by hand (what json.Marshal writes, without
	// its reflection); a map is written by json.Marshal.
	b := make([]byte, 0, 160)
	b = append(b, `{"subject":{"type":`...)
	b = jsonw.String(b, c.Subject.Type)
	b = append(b, `,"id":`...)
	b = jsonw.String(b, c.Subject.ID)
	b = appendMap(b, "attributes", c.Subject.Attributes)
	b = append(b, `},"action":`...)
	b = jsonw.String(b, c.Action)
	b = appendMap(b, "action_attributes", c.ActionAttributes)
	b = append(b, `,"resource":{"type":`...)
	b = jsonw.String(b, c.Resource.Type)
	if c.Resource.ID != "" {
		b = append(b, `,"id":`...)
		b = jsonw.String(b, c.Resource.ID)
	}
	if c.Resource.Tenant != "" {
		b = append(b, `,"tenant":`...)
		b = jsonw.String(b, c.Resource.Tenant)
	}
	b = appendMap(b, "attributes", c.Resource.Attributes)
	b = append(b, '}')
	b = appendMap(b, "context", c.Context)
	return append(b, '}')
}

// appendMap appends ,"name":m unless m is empty (omitempty), its keys
// sorted: strings by hand, any other value by json.Marshal.
func appendMap(b []byte, name string, m map[string]any) []byte {
	if len(m) == 0 {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	for _, v := range m {
		if _, ok := v.(string); !ok {
			return appendMarshal(b, m)
		}
	}
	return jsonw.Object(b, m, func(b []byte, v any) []byte { return jsonw.String(b, v.(string)) })
}

func appendMarshal(b []byte, v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		// Every value came from decoding JSON, so it encodes again.
		panic(fmt.Sprintf("pdp: encoding a decoded check: %v", err))
	}
	return append(b, raw...)
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
		if !utf8.ValidString(f.v) {
			return fmt.Errorf("%w: %s is not valid UTF-8", ErrBadRequest, f.name)
		}
		if len(f.v) > 256 {
			return fmt.Errorf("%w: %s is longer than 256 bytes", ErrBadRequest, f.name)
		}
		if strings.ContainsAny(f.v, "#@ \t\n") {
			return fmt.Errorf("%w: %s %q contains a reserved character (one of '#', '@' or white space)", ErrBadRequest, f.name, f.v)
		}
	}
	// IDs are what the store can hold; anything else would fail in the
	// store as the policy asks it, a server error for a client's mistake.
	for _, f := range []struct{ name, v string }{
		{"subject.id", c.Subject.ID}, {"resource.id", c.Resource.ID}, {"resource.tenant", c.Resource.Tenant},
	} {
		if f.v != "" && !api.ValidID(f.v) {
			return fmt.Errorf("%w: %s %q is not a valid ID (letters, digits and _-.=+/|~)", ErrBadRequest, f.name, f.v)
		}
	}
	return nil
}
