package checkapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/nexuspdp/nexus/extauthz/internal/wire"
	"github.com/nexuspdp/nexus/pdp"
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
	if c, ok, err := readPermitFlat(r); ok {
		return c, err
	}
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
		return nil, pdp.Errorf(pdp.ErrTooLarge, "%d queries, at most %d in one request", len(qs), max)
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
	return permitCheck(u, res, resStr, q.Action, q.Context)
}

// permitCheck is the check of a query with user u, resource res (or
// resStr, "type:key", when not ""), action and context.
func permitCheck(u permitUser, res permitResource, resStr, action string, ctx map[string]any) (Check, error) {
	if resStr != "" {
		t, k, _ := strings.Cut(resStr, ":")
		res = permitResource{Type: t, Key: k}
	}
	c := Check{
		Subject:  Subject{Type: "user", ID: u.Key, Attributes: u.Attributes},
		Action:   action,
		Resource: Resource{Type: res.Type, ID: res.Key, Tenant: res.Tenant, Attributes: res.Attributes},
		Context:  ctx,
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
	// raw is a value of a body that decoded, so valid JSON and UTF-8.
	if raw[0] == '"' {
		if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 {
			*s = string(inner) // no escapes: the text is the value
			return nil
		}
		return json.Unmarshal(raw, s)
	}
	if raw[0] != '{' {
		return fmt.Errorf("%w: %s must be a string or an object", ErrBadRequest, field)
	}
	if bytes.IndexByte(raw, '\\') < 0 && !bytes.Contains(raw, []byte(`"attributes"`)) {
		// No attributes (not even spelled with escapes): only strings
		// to decode.
		if json.Unmarshal(raw, obj) == nil {
			return nil
		}
	}
	// Attributes keep their numbers exact (json.Number); an error is
	// described in the request's terms.
	return wire.DecodeJSON(raw, obj, false, field)
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

// PermitUser reads a Permit user: a key string or an object with "key".
func PermitUser(raw json.RawMessage) (Subject, error) {
	var u permitUser
	if err := stringOrObject(raw, &u.Key, &u, "user"); err != nil {
		return Subject{}, err
	}
	s := Subject{Type: "user", ID: u.Key, Attributes: u.Attributes}
	if s.ID == "" {
		return Subject{}, fmt.Errorf("%w: user.key is required", ErrBadRequest)
	}
	probe := Check{Subject: s, Action: "-", Resource: Resource{Type: "-"}}
	return s, probe.Validate()
}

// PermitURLQuery is the body of POST /allowed_url: may the user send
// this request? The route rules map it to a check.
type PermitURLQuery struct {
	User     Subject
	Method   string
	Segments []string // the URL's path, percent-decoded, split at "/"
	Tenant   string
	Context  map[string]any
	RawURL   string
}

// ReadPermitURL reads the body of POST /allowed_url: user, http_method,
// url (an http or https URL, or a path) and, optionally, tenant and
// context.
func ReadPermitURL(r io.Reader) (PermitURLQuery, error) {
	var q struct {
		User       json.RawMessage `json:"user"`
		HTTPMethod string          `json:"http_method"`
		URL        string          `json:"url"`
		Tenant     string          `json:"tenant"`
		Context    map[string]any  `json:"context"`
	}
	if err := decode(r, &q); err != nil {
		return PermitURLQuery{}, err
	}
	u, err := PermitUser(q.User)
	if err != nil {
		return PermitURLQuery{}, err
	}
	if q.HTTPMethod == "" {
		return PermitURLQuery{}, fmt.Errorf("%w: http_method is required", ErrBadRequest)
	}
	if q.URL == "" {
		return PermitURLQuery{}, fmt.Errorf("%w: url is required", ErrBadRequest)
	}
	segs, err := PathSegments(q.URL)
	if err != nil {
		return PermitURLQuery{}, err
	}
	return PermitURLQuery{User: u, Method: strings.ToUpper(q.HTTPMethod), Segments: segs, Tenant: q.Tenant, Context: q.Context, RawURL: q.URL}, nil
}

// PathSegments splits the path of an http or https URL (or of a path
// that starts with "/") as opa-envoy-plugin computes parsed_path: the
// whole path percent-decoded, its leading slashes dropped, split at "/".
// A path or query that does not parse is an error, not another path.
func PathSegments(raw string) ([]string, error) {
	p := raw
	if !strings.HasPrefix(raw, "/") {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%w: url %q must be an http or https URL, or a path", ErrBadRequest, raw)
		}
		p = u.EscapedPath()
		if u.RawQuery != "" {
			p += "?" + u.RawQuery
		}
	}
	rawPath, rawQuery, _ := strings.Cut(p, "?")
	rawPath, _, _ = strings.Cut(rawPath, "#")
	decoded, err := url.PathUnescape(rawPath)
	if err != nil {
		return nil, fmt.Errorf("%w: url %q: the path does not parse: %v", ErrBadRequest, raw, err)
	}
	if _, err := url.ParseQuery(rawQuery); err != nil {
		return nil, fmt.Errorf("%w: url %q: the query does not parse: %v", ErrBadRequest, raw, err)
	}
	return strings.Split(strings.TrimLeft(decoded, "/"), "/"), nil
}

// KongQuery is what /kong reads of the input Kong's OPA plugin sends.
type KongQuery struct {
	Method, Path string
	// Consumer is the consumer Kong authenticated ("" when the plugin
	// was not told to include it).
	Consumer string
}

// ReadKong reads the body of POST /kong: {"input": {"request": {"http":
// {"method", "path", ...}}, "consumer": {"username"}, ...}}.
func ReadKong(r io.Reader) (KongQuery, error) {
	var q struct {
		Input *struct {
			Request struct {
				HTTP struct {
					Method string `json:"method"`
					Path   string `json:"path"`
				} `json:"http"`
			} `json:"request"`
			Consumer *struct {
				Username string `json:"username"`
			} `json:"consumer"`
		} `json:"input"`
	}
	if err := decode(r, &q); err != nil {
		return KongQuery{}, err
	}
	if q.Input == nil {
		return KongQuery{}, fmt.Errorf("%w: input is required", ErrBadRequest)
	}
	h := q.Input.Request.HTTP
	if h.Method == "" || h.Path == "" {
		return KongQuery{}, fmt.Errorf("%w: input.request.http.method and path are required", ErrBadRequest)
	}
	k := KongQuery{Method: strings.ToUpper(h.Method), Path: h.Path}
	if q.Input.Consumer != nil {
		k.Consumer = q.Input.Consumer.Username
	}
	return k, nil
}
