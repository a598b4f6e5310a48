package checkapi

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Permit-compatible request shapes (the PDP's /allowed family).
type (
	permitUser struct {
		Key        string         `json:"key"`
		Attributes map[string]any `json:"attributes"`
	}
	permitResource struct {
		Type       string         `json:"type"`
		Key        string         `json:"key"`
		Tenant     string         `json:"tenant"`
		Attributes map[string]any `json:"attributes"`
	}
	// PermitQuery is one /allowed query.
	PermitQuery struct {
		User     json.RawMessage `json:"user"`
		Action   string          `json:"action"`
		Resource json.RawMessage `json:"resource"`
		Context  map[string]any  `json:"context"`
	}
)

// ReadPermit reads the body of POST /allowed.
func ReadPermit(r io.Reader) (Check, error) {
	var q PermitQuery
	if err := decode(r, &q); err != nil {
		return Check{}, err
	}
	return q.Check()
}

// ReadPermitBulk reads the body of POST /allowed/bulk: a JSON array of
// queries, or an object {"checks": [...]}.
func ReadPermitBulk(r io.Reader, max int) ([]Check, error) {
	var raw json.RawMessage
	if err := decode(r, &raw); err != nil {
		return nil, err
	}
	var qs []PermitQuery
	if err := json.Unmarshal(raw, &qs); err != nil {
		var obj struct {
			Checks []PermitQuery `json:"checks"`
		}
		if err2 := json.Unmarshal(raw, &obj); err2 != nil || obj.Checks == nil {
			return nil, fmt.Errorf("%w: the body must be an array of queries or an object with \"checks\"", ErrBadRequest)
		}
		qs = obj.Checks
	}
	if len(qs) > max {
		return nil, fmt.Errorf("%w: %d queries, at most %d in one request", ErrBadRequest, len(qs), max)
	}
	out := make([]Check, len(qs))
	for i := range qs {
		c, err := qs[i].Check()
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out[i] = c
	}
	return out, nil
}

// Check converts the query; the user may be a key string or an object,
// the resource an object or a "type:key" string.
func (q *PermitQuery) Check() (Check, error) {
	var u permitUser
	if err := stringOrObject(q.User, &u.Key, &u, "user"); err != nil {
		return Check{}, err
	}
	var res permitResource
	var resStr string
	if err := stringOrObject(q.Resource, &resStr, &res, "resource"); err != nil {
		return Check{}, err
	}
	if resStr != "" {
		t, k, _ := strings.Cut(resStr, ":")
		res = permitResource{Type: t, Key: k}
	}
	c := Check{
		Subject:  Subject{Type: "user", ID: u.Key, Attributes: u.Attributes},
		Action:   q.Action,
		Resource: Resource{Type: res.Type, ID: res.Key, Tenant: res.Tenant, Attributes: res.Attributes},
		Context:  q.Context,
	}
	if c.Subject.ID == "" {
		return Check{}, fmt.Errorf("%w: user.key is required", ErrBadRequest)
	}
	return c, c.Validate()
}

func stringOrObject(raw json.RawMessage, s *string, obj any, field string) error {
	if len(raw) == 0 || string(raw) == "null" {
		return fmt.Errorf("%w: %s is required", ErrBadRequest, field)
	}
	if raw[0] == '"' {
		return json.Unmarshal(raw, s)
	}
	if raw[0] != '{' {
		return fmt.Errorf("%w: %s must be a string or an object", ErrBadRequest, field)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(obj); err != nil {
		return fmt.Errorf("%w: %s: %s", ErrBadRequest, field, describeJSONError(err))
	}
	return nil
}

// PermitResponse is the body of an /allowed answer: "allow", and the
// legacy "result" that older SDKs read.
type PermitResponse struct {
	Allow  bool           `json:"allow"`
	Result bool           `json:"result"`
	Debug  map[string]any `json:"debug,omitempty"`
}

// PermitBulkResponse is the body of an /allowed/bulk answer.
type PermitBulkResponse struct {
	Allow []PermitResponse `json:"allow"`
}
