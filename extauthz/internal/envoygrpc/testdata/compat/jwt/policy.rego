# JWT claims: the policy verifies the bearer token itself with
# io.jwt.decode_verify and decides on its role claim, in the style of the
# plugin's documentation. Object results: headers for the upstream on
# allow, a 401 with a challenge or a 403 with a reason on deny.
package envoy.authz

import rego.v1

http_request := input.attributes.request.http

default allow := {
	"allowed": false,
	"http_status": 401,
	"headers": {"www-authenticate": "Bearer realm=\"people\""},
	"body": "a valid bearer token is required",
}

allow := {
	"allowed": true,
	"headers": {"x-user": token.payload.sub, "x-user-role": token.payload.role},
	"request_headers_to_remove": ["authorization"],
} if {
	token.valid
	action_allowed
}

allow := {
	"allowed": false,
	"http_status": 403,
	"body": sprintf("%s may not %s %s", [token.payload.sub, http_request.method, http_request.path]),
} if {
	token.valid
	not action_allowed
}

action_allowed if {
	http_request.method == "GET"
	token.payload.role in {"guest", "admin"}
	glob.match("/people/*", ["/"], http_request.path)
}

action_allowed if {
	http_request.method == "POST"
	token.payload.role == "admin"
	http_request.path == "/people"
}

token := {"valid": valid, "payload": payload} if {
	[_, encoded] := split(http_request.headers.authorization, " ")
	[valid, _, payload] := io.jwt.decode_verify(encoded, {"secret": "secret"})
}
