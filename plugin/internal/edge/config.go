package edge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Config is the plugin configuration, the JSON document Envoy hands to
// proxy_on_configure. Zero values are documented field by field; Validate
// fills the defaults.
type Config struct {
	// PDPCluster is the Envoy cluster of the PDP's admin listener. Required.
	PDPCluster string `json:"pdp_cluster"`
	// SnapshotPath is the path of the snapshot; "" means "/v1/edge/snapshot".
	SnapshotPath string `json:"snapshot_path"`
	// Authority is the :authority of the snapshot request; "" means PDPCluster.
	Authority string `json:"authority"`
	// Token, if set, is sent as "authorization: Bearer <token>" (the PDP's
	// admin API is behind a bearer token).
	Token string `json:"token"`
	// RefreshPeriodMS is the tick period between snapshot polls; 0 means 5000.
	// At least 100.
	RefreshPeriodMS uint32 `json:"refresh_period_ms"`
	// MaxAgeMS is how long a snapshot may be used after the PDP last confirmed
	// it (200 or 304); past it the filter takes no decision. 0 means six
	// refresh periods. At least RefreshPeriodMS.
	MaxAgeMS uint32 `json:"max_age_ms"`
	// CallTimeoutMS is the timeout of the snapshot request; 0 means the
	// smaller of RefreshPeriodMS and 5000.
	CallTimeoutMS uint32 `json:"call_timeout_ms"`
	// MaxSnapshotBytes bounds a snapshot reply's body; 0 means 16 MiB.
	MaxSnapshotBytes int `json:"max_snapshot_bytes"`
	// Subject says where the subject id is. Required.
	Subject SubjectSource `json:"subject"`
	// Tenant says where the tenant id is when a route's path has no {tenant}
	// segment. Zero means routes must capture {tenant}.
	Tenant TenantSource `json:"tenant"`
	// Routes map requests to an action on a resource type; the first match
	// wins. A request that matches none is passed on untouched. Required.
	Routes []Route `json:"routes"`
	// OnNoSnapshot is what happens to a request a route matches while no
	// snapshot is loaded or the snapshot is past MaxAgeMS: "continue" (the
	// default, "") passes it on to ext_authz, "deny" answers 403.
	OnNoSnapshot string `json:"on_no_snapshot"`
}

// SubjectSource says where the subject id of a request is: exactly one of
// Header, or JWTHeader with Claim.
type SubjectSource struct {
	// Header is a request header holding the subject id, e.g. "x-user-id".
	Header string `json:"header"`
	// JWTHeader is a request header holding the payload of a JWT that
	// jwt_authn has already verified (its forward_payload_header: the
	// base64url payload), or a whole compact JWT; the filter decodes it
	// without verifying.
	JWTHeader string `json:"jwt_header"`
	// Claim is the top-level string claim of the payload that holds the
	// subject id; "" means "sub".
	Claim string `json:"claim"`
}

// TenantSource says where the tenant id of a request is.
type TenantSource struct {
	// Header is a request header holding the tenant id.
	Header string `json:"header"`
}

// Route maps a method and path pattern to an action and resource type.
type Route struct {
	// Method is an HTTP method; "" or "*" matches any.
	Method string `json:"method"`
	// Path is a pattern of "/"-separated segments: a literal, "*" (any one
	// segment), "{tenant}" (any one segment, taken as the tenant id) or, last
	// only, "**" (any number of segments, including none). The query string
	// is ignored.
	Path string `json:"path"`
	// Action is the action the request performs, e.g. "read". Required.
	Action string `json:"action"`
	// ResourceType is the resource type it acts on, e.g. "file". Required.
	ResourceType string `json:"resource_type"`
}

// On-no-snapshot behaviours.
const (
	OnNoSnapshotContinue = "continue"
	OnNoSnapshotDeny     = "deny"
)

// ParseConfig decodes and validates a plugin configuration. Unknown fields are
// rejected, so a misspelt option fails the plugin start instead of being
// silently ignored.
func ParseConfig(b []byte) (*Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrBadConfig)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate fills defaults and rejects nonsense with a precise message.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, args...)...)
	}
	if c.PDPCluster == "" {
		return bad("pdp_cluster is required")
	}
	if c.SnapshotPath == "" {
		c.SnapshotPath = "/v1/edge/snapshot"
	}
	if !strings.HasPrefix(c.SnapshotPath, "/") {
		return bad("snapshot_path %q must start with /", c.SnapshotPath)
	}
	if c.Authority == "" {
		c.Authority = c.PDPCluster
	}
	if c.RefreshPeriodMS == 0 {
		c.RefreshPeriodMS = 5000
	}
	if c.RefreshPeriodMS < 100 {
		return bad("refresh_period_ms %d is below 100", c.RefreshPeriodMS)
	}
	if c.MaxAgeMS == 0 {
		c.MaxAgeMS = 6 * c.RefreshPeriodMS
	}
	if c.MaxAgeMS < c.RefreshPeriodMS {
		return bad("max_age_ms %d is below refresh_period_ms %d", c.MaxAgeMS, c.RefreshPeriodMS)
	}
	if c.CallTimeoutMS == 0 {
		c.CallTimeoutMS = min(c.RefreshPeriodMS, 5000)
	}
	if c.MaxSnapshotBytes == 0 {
		c.MaxSnapshotBytes = 16 << 20
	}
	if c.MaxSnapshotBytes < 0 {
		return bad("max_snapshot_bytes %d is negative", c.MaxSnapshotBytes)
	}
	s := &c.Subject
	switch {
	case s.Header != "" && s.JWTHeader != "":
		return bad("subject: set header or jwt_header, not both")
	case s.Header != "":
		if s.Claim != "" {
			return bad("subject: claim needs jwt_header")
		}
		if err := checkHeaderName("subject.header", s.Header); err != nil {
			return err
		}
	case s.JWTHeader != "":
		if s.Claim == "" {
			s.Claim = "sub"
		}
		if err := checkHeaderName("subject.jwt_header", s.JWTHeader); err != nil {
			return err
		}
	default:
		return bad("subject: header or jwt_header is required")
	}
	if c.Tenant.Header != "" {
		if err := checkHeaderName("tenant.header", c.Tenant.Header); err != nil {
			return err
		}
	}
	switch c.OnNoSnapshot {
	case "":
		c.OnNoSnapshot = OnNoSnapshotContinue
	case OnNoSnapshotContinue, OnNoSnapshotDeny:
	default:
		return bad("on_no_snapshot %q, want %q or %q", c.OnNoSnapshot, OnNoSnapshotContinue, OnNoSnapshotDeny)
	}
	if len(c.Routes) == 0 {
		return bad("routes: at least one route is required")
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		if r.Method == "" {
			r.Method = "*"
		}
		if r.Action == "" || r.ResourceType == "" {
			return bad("routes[%d]: action and resource_type are required", i)
		}
		p, err := compilePattern(r.Path)
		if err != nil {
			return bad("routes[%d]: %v", i, err)
		}
		if !p.tenant && c.Tenant.Header == "" {
			return bad("routes[%d]: path %q has no {tenant} segment and tenant.header is not set", i, r.Path)
		}
	}
	return nil
}

func checkHeaderName(field, name string) error {
	if name != strings.ToLower(name) || strings.ContainsAny(name, " \t\r\n:") {
		return fmt.Errorf("%w: %s %q must be a lower-case header name", ErrBadConfig, field, name)
	}
	return nil
}
