package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/internal/datadoc"
)

// headerName matches an HTTP header name (RFC 9110 token), lower case as
// Envoy and the HTTP listener hand headers to the policy.
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9a-z-]+$")

// resolve normalises the trusted subject header and refuses a token
// given twice. (adminToken decides the admin token.)
func (c *serveConfig) resolve() error {
	if c.AdminTokenFile != "" && c.Server.AdminToken != "" {
		return errors.New("serve: set the admin token once: --admin-token or --admin-token-file, not both")
	}
	if c.TrustedSubjectHeader != "" {
		h := strings.ToLower(strings.TrimSpace(c.TrustedSubjectHeader))
		if !headerName.MatchString(h) {
			return fmt.Errorf("serve: --trusted-subject-header %q is not a header name", c.TrustedSubjectHeader)
		}
		c.TrustedSubjectHeader = h
	}
	return nil
}

// trustSubjectHeader returns b with data.nexus.subject_header set to name:
// the header the default policy takes the subject from when no verified
// JWT came with a request. An empty name returns b unchanged. b itself is
// not modified.
func trustSubjectHeader(b *bundle.Bundle, name string) (*bundle.Bundle, error) {
	if name == "" {
		return b, nil
	}
	// Only data.nexus is decoded; the rest of the data is copied as it is.
	raw, _, err := datadoc.Member(b.Data, "nexus")
	if err != nil {
		return nil, fmt.Errorf("serve: policy data: %w", err)
	}
	nx := map[string]any{}
	if raw != nil {
		var v any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("serve: policy data: %w", err)
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("serve: policy data: data.nexus is a %T, not an object: --trusted-subject-header cannot be set", v)
		}
		nx = m
	}
	nx["subject_header"] = name
	text, err := json.Marshal(nx)
	if err != nil {
		return nil, fmt.Errorf("serve: policy data: %w", err)
	}
	data, err := datadoc.Replace(b.Data, "nexus", text)
	if err != nil {
		return nil, fmt.Errorf("serve: policy data: %w", err)
	}
	nb := *b
	nb.Data = data
	return &nb, nil
}

// dataSubjectHeader returns the subject header a bundle's own data names
// (data.nexus.subject_header), or "".
func dataSubjectHeader(data []byte) string {
	var nx struct {
		SubjectHeader string `json:"subject_header"`
	}
	raw, ok, err := datadoc.Member(data, "nexus")
	if err != nil || !ok || json.Unmarshal(raw, &nx) != nil {
		return ""
	}
	return nx.SubjectHeader
}
