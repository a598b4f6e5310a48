# The reference specification of the default policy (see reference.go):
# the decisions of ../policy, spelled out without its host builtins.
#
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
# is the "sub" of a JWT verified by Envoy's jwt_authn filter (its payload in
# the request's metadata) or, only without one, the header
# data.nexus.subject_header, which the server sets only when told that a
# trusted hop sets it (nexus serve --trusted-subject-header); the tenant
# comes from a path segment or the header data.nexus.tenant_header. The
# server also indexes the route rules (data.nexus.route_index, below).
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

path_length := count(input.parsed_path)

# A wildcard ("*", "{id}", "{tenant}") matches any segment, anything else
# only itself. (One rule per wildcard: no set is built per segment.)
segment_matches("*", _)

segment_matches("{id}", _)

segment_matches("{tenant}", _)

segment_matches(pattern, value) if pattern == value

method_matches(m) if m == method

method_matches("*")

route_matches(r) if {
	method_matches(r.method)
	parts := segments(r)
	count(parts) == path_length
	every i, p in parts {
		segment_matches(p, input.parsed_path[i])
	}
}

# The candidates are the rules whose path has as many segments as the
# request's and whose method is the request's or "*". The server indexes the
# rules so when it loads the policy (data.nexus.route_index: by segment count,
# then method, the rules' positions); without the index every rule is a
# candidate. The first matching rule in data order wins.
candidates contains i if {
	some m in [method, "*"]
	some i in data.nexus.route_index[path_length][m]
}

candidates contains i if {
	not data.nexus.route_index
	some i, _ in data.nexus.routes
}

route := data.nexus.routes[min({i | some i in candidates; route_matches(data.nexus.routes[i])})]

route_segments := segments(route)

jwt_subjects contains sub if {
	some _, payload in input.attributes.metadataContext.filterMetadata["envoy.filters.http.jwt_authn"]
	sub := payload.sub
}

# A verified JWT decides; the header counts only when no JWT came with the
# request (a JWT without exactly one "sub" names no subject at all).
claimed_subject := s if {
	count(jwt_subjects) == 1
	some s in jwt_subjects
}

claimed_subject := subject_header if not input.attributes.metadataContext.filterMetadata["envoy.filters.http.jwt_authn"]

# A result names the subject it decided for ("subject"): nexus' decision
# log records it. Envoy ignores the field.
#
# The subject, the tenant and the resource ID must be IDs the store can
# hold (letters, digits and _-.=+/|~, at most 256 bytes): anything else, a
# header sent twice (joined with ","), a space, an empty value, is the
# client's error, answered before the store is asked.
valid_id(s) if {
	is_string(s)
	s != ""
	s != "." # a path segment a server may resolve
	s != ".."
	nexus.valid_ids(s, "", "")
}

subject_id := claimed_subject if valid_id(claimed_subject)

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

# invalid names the first part of the request that is not a valid ID.
invalid := "subject" if {
	claimed_subject
	not subject_id
} else := "tenant" if {
	tenant != ""
	not valid_id(tenant)
} else := "resource" if {
	"{id}" in route_segments
	not valid_id(resource_id)
}

authz := data.nexus.authz.decide(
	{"type": "user", "id": subject_id},
	route.action,
	{"type": route.type, "id": resource_id, "tenant": tenant},
)

default result := {"allowed": false, "http_status": 403, "reason": "no_route", "body": "{\"error\":\"no route rule matches this request\"}", "headers": {"content-type": "application/json"}}

# The early denials name the subject too when the request named a valid one.
default named_subject := {}

named_subject := {"subject": subject_id} if subject_id

result := {"allowed": false, "http_status": 403, "reason": "no_route", "subject": subject_id, "body": "{\"error\":\"no route rule matches this request\"}", "headers": {"content-type": "application/json"}} if {
	not route
	subject_id
}

result := {"allowed": false, "http_status": 401, "reason": "no_subject", "body": "{\"error\":\"no subject: a verified JWT is required\"}", "headers": {"content-type": "application/json", "www-authenticate": "Bearer realm=\"nexus\""}} if {
	route
	not claimed_subject
}

result := object.union({
	"allowed": false,
	"http_status": 400,
	"reason": "invalid_request",
	"body": concat("", ["{\"error\":\"the request's ", invalid, " is not a valid ID\"}"]),
	"headers": {"content-type": "application/json"},
}, named_subject) if {
	route
	claimed_subject
	invalid
}

result := {
	"allowed": true,
	"reason": authz.reason,
	"subject": subject_id,
	"headers": {"x-nexus-subject": subject_id, "x-nexus-decision": authz.reason},
} if {
	not invalid
	authz.allow
}

result := {
	"allowed": false,
	"http_status": 403,
	"reason": authz.reason,
	"subject": subject_id,
	"body": concat("", ["{\"error\":\"forbidden\",\"reason\":\"", authz.reason, "\"}"]),
	"headers": {"content-type": "application/json", "x-nexus-decision": authz.reason},
} if {
	not invalid
	not authz.allow
}
