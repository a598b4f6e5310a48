# The default nexus policy for proxied HTTP requests (Envoy ext_authz gRPC
# and HTTP, nginx auth_request, Caddy forward_auth, Traefik ForwardAuth).
#
# input: the opa-envoy-plugin input document.
#
# Route rules (data.nexus.routes, in order, first match wins) map the
# method and path to an action and a resource: a path segment "{id}" names
# the resource, "{tenant}" its tenant, "*" matches any one segment. The
# server adds each route's "segments" (its path split at "/") when it loads
# the policy; without them the policy splits the path itself. The subject
# comes from the header data.nexus.subject_header (or the "sub" of a JWT
# verified by Envoy's jwt_authn filter); the tenant from a path segment or
# the header data.nexus.tenant_header.
package nexus.envoy

import rego.v1

# Only the fields the policy names are read: nexus passes a policy just the
# parts of the input document it refers to.
method := input.attributes.request.http.method

# The subject and tenant headers, named in data.
subject_header := input.attributes.request.http.headers[data.nexus.subject_header]

tenant_header := input.attributes.request.http.headers[data.nexus.tenant_header]

segments(r) := r.segments

segments(r) := split(trim_prefix(r.path, "/"), "/") if not r.segments

segment_matches(pattern, _) if pattern in {"*", "{id}", "{tenant}"}

segment_matches(pattern, value) if pattern == value

route_matches(r) if {
	r.method in {method, "*"}
	parts := segments(r)
	count(parts) == count(input.parsed_path)
	every i, p in parts {
		segment_matches(p, input.parsed_path[i])
	}
}

route := [r | some r in data.nexus.routes; route_matches(r)][0]

route_segments := segments(route)

jwt_subjects contains sub if {
	some _, payload in input.attributes.metadataContext.filterMetadata["envoy.filters.http.jwt_authn"]
	sub := payload.sub
}

subject_id := subject_header

subject_id := s if {
	not subject_header
	count(jwt_subjects) == 1
	some s in jwt_subjects
}

default tenant := ""

tenant := input.parsed_path[i] if {
	some i, p in route_segments
	p == "{tenant}"
}

tenant := tenant_header if not "{tenant}" in route_segments

default resource_id := ""

resource_id := input.parsed_path[i] if {
	some i, p in route_segments
	p == "{id}"
}

authz := data.nexus.authz.decide(
	{"type": "user", "id": subject_id},
	route.action,
	{"type": route.type, "id": resource_id, "tenant": tenant},
)

default result := {"allowed": false, "http_status": 403, "reason": "no_route", "body": "{\"error\":\"no route rule matches this request\"}", "headers": {"content-type": "application/json"}}

result := {"allowed": false, "http_status": 401, "reason": "no_subject", "body": "{\"error\":\"no subject: send the subject header or a verified JWT\"}", "headers": {"content-type": "application/json"}} if {
	route
	not subject_id
}

result := {
	"allowed": true,
	"reason": authz.reason,
	"headers": {"x-nexus-subject": subject_id, "x-nexus-decision": authz.reason},
} if {
	authz.allow
}

result := {
	"allowed": false,
	"http_status": 403,
	"reason": authz.reason,
	"body": concat("", ["{\"error\":\"forbidden\",\"reason\":\"", authz.reason, "\"}"]),
	"headers": {"content-type": "application/json", "x-nexus-decision": authz.reason},
} if {
	not authz.allow
}
