package builtins

import (
	"strconv"

	"github.com/nexuspdp/nexus/internal/jsonw"
)

// answer is nexus.envoy_decide's answer, an opa-envoy-plugin result
// object, as fields: appendJSON writes its result document.
type answer struct {
	Allowed bool
	Reason  string
	// Subject is who the answer names, "" when it names nobody.
	Subject string
	// Status and Body are a denial's HTTP status and body.
	Status int
	Body   string
	// Headers[:NHeaders] are the answer's headers, sorted by key.
	Headers  [2]header
	NHeaders int
}

// header is one header of an answer.
type header struct{ Key, Value string }

// appendJSON appends the answer's result document, canonical (keys
// sorted, compact).
func (a *answer) appendJSON(dst []byte) []byte {
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

// The Envoy answers that do not depend on the store.
var (
	jsonType     = header{Key: "content-type", Value: "application/json"}
	answerNoRule = answer{Reason: "no_route", Status: 403,
		Body: `{"error":"no route rule matches this request"}`, Headers: [2]header{jsonType}, NHeaders: 1}
	answerNoSubject = answer{Reason: "no_subject", Status: 401,
		Body:    `{"error":"no subject: a verified JWT is required"}`,
		Headers: [2]header{jsonType, {Key: "www-authenticate", Value: `Bearer realm="nexus"`}}, NHeaders: 2}
)

// invalidAnswer is the 400 answer to a request of subject ("" when not
// known) whose what ("subject", "tenant" or "resource") is not a valid ID.
func invalidAnswer(what, subject string) answer {
	return answer{Reason: "invalid_request", Status: 400, Subject: subject,
		Body: `{"error":"the request's ` + what + ` is not a valid ID"}`, Headers: [2]header{jsonType}, NHeaders: 1}
}

// envoyAllow is the Envoy answer allowing subject, for reason.
func envoyAllow(reason, subject string) answer {
	return answer{Allowed: true, Reason: reason, Subject: subject,
		Headers: [2]header{{Key: "x-nexus-decision", Value: reason}, {Key: "x-nexus-subject", Value: subject}}, NHeaders: 2}
}

// envoyDeny is the Envoy answer denying subject, for reason.
func envoyDeny(reason, subject string) answer {
	return answer{Reason: reason, Subject: subject, Status: 403, Body: forbiddenBody(reason),
		Headers: [2]header{jsonType, {Key: "x-nexus-decision", Value: reason}}, NHeaders: 2}
}

// forbiddenBody is the body of a 403 for reason; the common ones are not
// built again for every denial.
func forbiddenBody(reason string) string {
	switch reason {
	case "no_grant":
		return `{"error":"forbidden","reason":"no_grant"}`
	case "tenant_mismatch":
		return `{"error":"forbidden","reason":"tenant_mismatch"}`
	}
	return `{"error":"forbidden","reason":"` + reason + `"}`
}
