# A token Envoy's jwt_authn filter verified: its payload comes in the
# metadata context (payload_in_metadata: jwt_payload), a Struct that the
# plugin maps to the plain object it holds. Its numbers are floats to
# OPA: an exp of 1764453600 is 1.7644536e+09 when made into text.
package envoy.authz

import rego.v1

payload := input.attributes.metadataContext.filterMetadata["envoy.filters.http.jwt_authn"].jwt_payload

default allow := {"allowed": false, "http_status": 401}

allow := {
	"allowed": true,
	"headers": {
		"x-subject": payload.sub,
		"x-token-exp": sprintf("%v", [payload.exp]),
		"x-token-exp-int": format_int(payload.exp, 10),
	},
	"dynamic_metadata": {"sub": payload.sub, "groups": payload.groups},
} if {
	"readers" in payload.groups
	payload.exp > 1700000000
}

allow := {"allowed": false, "http_status": 403, "body": concat(",", payload.groups)} if {
	payload
	not "readers" in payload.groups
}
