package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/nexuspdp/nexus/bundle"
)

// headerName matches an HTTP header name (RFC 9110 token), lower case as
// Envoy and the HTTP listener hand headers to the policy.
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9a-z-]+$")

// resolve normalises the trusted subject header and refuses a token
// given twice. (adminToken decides the admin token.)
func (c *serveConfig) resolve() error {
	if c.AdminTokenFile != "" && c.AdminToken != "" {
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
	doc := map[string]any{}
	if len(bytes.TrimSpace(b.Data)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(b.Data))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			return nil, fmt.Errorf("serve: policy data: %w", err)
		}
	}
	var nx map[string]any
	switch v := doc["nexus"].(type) {
	case map[string]any:
		nx = v
	case nil:
		nx = map[string]any{}
		doc["nexus"] = nx
	default:
		return nil, fmt.Errorf("serve: policy data: data.nexus is a %T, not an object: --trusted-subject-header cannot be set", v)
	}
	nx["subject_header"] = name
	data, err := json.Marshal(doc)
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
	var doc struct {
		Nexus struct {
			SubjectHeader string `json:"subject_header"`
		} `json:"nexus"`
	}
	if json.Unmarshal(data, &doc) != nil {
		return ""
	}
	return doc.Nexus.SubjectHeader
}
