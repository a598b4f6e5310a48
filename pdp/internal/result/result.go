// Package result turns a policy's result document into an authorization
// decision: a boolean, or an object in the opa-envoy-plugin shape with
// allowed, headers, response_headers_to_add, request_headers_to_remove,
// query_parameters_to_set, query_parameters_to_remove, http_status, body
// and dynamic_metadata.
//
// ParseEnvoy reads the results of Envoy and forward-auth requests exactly
// as opa-envoy-plugin does; Parse reads the results of nexus' own
// application checks, which also accept "allow" for "allowed".
package result

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/types/known/structpb"
)

// ErrInvalid reports a result document that is neither a boolean nor an
// object with a boolean "allowed" (or "allow").
var ErrInvalid = errors.New("result: invalid policy result")

// Header is one header to set.
type Header struct {
	Key, Value string
}

// QueryParameter is one query parameter to set.
type QueryParameter struct {
	Key, Value string
}

// Decision is a policy's answer for one request.
type Decision struct {
	Allowed bool
	// Raw is the result document as the policy wrote it. The core keeps
	// it only when a decision sink wants it (the decision log in OPA's
	// format); otherwise it is nil.
	Raw []byte
	// Reason is the policy's "reason" string, if it gave one.
	Reason string
	// Subject is the policy's "subject" string: who the policy decided
	// the request comes from (for the decision log), if it says.
	Subject string
	// Object reports a result that was an object: over Envoy's ext_authz
	// it is answered with an HTTP response (headers, status, body), a
	// boolean with the status only.
	Object bool
	// Headers go to the upstream on allow and to the client on deny, in
	// the policy's order: by key, and in the order of an array.
	Headers []Header
	// ResponseHeadersToAdd go to the client's response on allow.
	ResponseHeadersToAdd []Header
	// RequestHeadersToRemove are removed from the upstream request on allow.
	RequestHeadersToRemove []string
	// QueryParametersToSet are set on the upstream request on allow.
	QueryParametersToSet []QueryParameter
	// QueryParametersToRemove are removed from the upstream request on
	// allow.
	QueryParametersToRemove []string
	// HTTPStatus is the status of a denial; zero means the default (403).
	HTTPStatus int
	// Body is the body of a denial.
	Body string
	// DynamicMetadata is emitted to Envoy's dynamic metadata. It is
	// converted once, when the result is parsed, and shared read-only by
	// every response built from this decision.
	DynamicMetadata *structpb.Struct
}

var (
	litTrue  = []byte("true")
	litFalse = []byte("false")
)

// Parse reads a result document. The common answers, a bare true or false,
// take no allocation.
func Parse(doc []byte) (Decision, error) {
	doc = bytes.TrimSpace(doc)
	switch {
	case bytes.Equal(doc, litTrue):
		return Decision{Allowed: true}, nil
	case bytes.Equal(doc, litFalse):
		return Decision{}, nil
	}
	var raw struct {
		Allowed                *bool               `json:"allowed"`
		Allow                  *bool               `json:"allow"`
		Reason                 string              `json:"reason"`
		Subject                string              `json:"subject"`
		Headers                map[string]stringOr `json:"headers"`
		ResponseHeadersToAdd   map[string]stringOr `json:"response_headers_to_add"`
		RequestHeadersToRemove []string            `json:"request_headers_to_remove"`
		HTTPStatus             *json.Number        `json:"http_status"`
		Body                   string              `json:"body"`
		DynamicMetadata        json.RawMessage     `json:"dynamic_metadata"`
	}
	if err := json.Unmarshal(doc, &raw); err != nil {
		return Decision{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	d := Decision{Object: true, Reason: raw.Reason, Subject: raw.Subject, RequestHeadersToRemove: raw.RequestHeadersToRemove, Body: raw.Body}
	switch {
	case raw.Allowed != nil:
		d.Allowed = *raw.Allowed
	case raw.Allow != nil:
		d.Allowed = *raw.Allow
	default:
		return Decision{}, fmt.Errorf("%w: the object has no boolean \"allowed\"", ErrInvalid)
	}
	d.Headers = headers(raw.Headers)
	d.ResponseHeadersToAdd = headers(raw.ResponseHeadersToAdd)
	if raw.HTTPStatus != nil {
		n, err := raw.HTTPStatus.Int64()
		if err != nil || n < 100 || n > 599 {
			return Decision{}, fmt.Errorf("%w: http_status %s is not an HTTP status", ErrInvalid, raw.HTTPStatus)
		}
		d.HTTPStatus = int(n)
	}
	if len(raw.DynamicMetadata) > 0 && !bytes.Equal(raw.DynamicMetadata, []byte("null")) {
		if raw.DynamicMetadata[0] != '{' {
			return Decision{}, fmt.Errorf("%w: dynamic_metadata must be an object", ErrInvalid)
		}
		md := &structpb.Struct{}
		if err := md.UnmarshalJSON(raw.DynamicMetadata); err != nil {
			return Decision{}, fmt.Errorf("%w: dynamic_metadata: %w", ErrInvalid, err)
		}
		d.DynamicMetadata = md
	}
	return d, nil
}

// stringOr is a header value: a string or an array of strings.
type stringOr []string

func (s *stringOr) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = stringOr{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("a header value must be a string or an array of strings")
	}
	*s = many
	return nil
}

func headers(m map[string]stringOr) []Header {
	if len(m) == 0 {
		return nil
	}
	var out []Header
	for _, k := range slices.Sorted(maps.Keys(m)) {
		for _, v := range m[k] {
			out = append(out, Header{Key: k, Value: v})
		}
	}
	return out
}
