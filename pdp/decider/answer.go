package decider

import (
	"strconv"

	"github.com/nexuspdp/nexus/internal/jsonw"
)

// Answer is a decision as fields rather than as the result document a
// policy's Wasm writes: AppendJSON writes that document, so the core
// reads the fields instead of parsing it.
type Answer struct {
	// Envoy marks an opa-envoy-plugin result object (allowed, headers,
	// and on a denial its status and body); otherwise the answer is an
	// application check's {"allow", "reason"}.
	Envoy   bool
	Allowed bool
	Reason  string
	// Subject is who an Envoy answer names, "" when it names nobody.
	Subject string
	// Status and Body are an Envoy denial's HTTP status and body.
	Status int
	Body   string
	// Headers[:NHeaders] are an Envoy answer's headers, sorted by key.
	Headers  [2]Header
	NHeaders int
}

// Header is one header of an Envoy answer.
type Header struct{ Key, Value string }

// AppendJSON appends the answer's result document, canonical (keys
// sorted, compact).
func (a *Answer) AppendJSON(dst []byte) []byte {
	if !a.Envoy {
		dst = append(dst, `{"allow":`...)
		dst = strconv.AppendBool(dst, a.Allowed)
		dst = append(dst, `,"reason":`...)
		return append(jsonw.String(dst, a.Reason), '}')
	}
	dst = append(dst, `{"allowed":`...)
	dst = strconv.AppendBool(dst, a.Allowed)
	if !a.Allowed {
		dst = jsonw.String(append(dst, `,"body":`...), a.Body)
	}
	dst = append(dst, `,"headers":{`...)
	for i, h := range a.Headers[:a.NHeaders] {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonw.String(append(jsonw.String(dst, h.Key), ':'), h.Value)
	}
	dst = append(dst, '}')
	if !a.Allowed {
		dst = strconv.AppendInt(append(dst, `,"http_status":`...), int64(a.Status), 10)
	}
	dst = jsonw.String(append(dst, `,"reason":`...), a.Reason)
	if a.Subject != "" {
		dst = jsonw.String(append(dst, `,"subject":`...), a.Subject)
	}
	return append(dst, '}')
}
