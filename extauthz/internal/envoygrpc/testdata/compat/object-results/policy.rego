# Object results with every member the plugin reads: headers for the
# upstream (a string or an array of strings per name, or an array of such
# objects), request_headers_to_remove, response_headers_to_add, query
# parameters to set and to remove, dynamic_metadata; on deny, the status,
# headers and body. The path chooses the result.
package envoy.authz

import rego.v1

default allow := {"allowed": false}

allow := {
	"allowed": true,
	"headers": {"x-tenant": "acme", "x-groups": ["eng", "ops"]},
	"request_headers_to_remove": ["cookie", "x-debug"],
	"response_headers_to_add": [{"cache-control": "no-store"}, {"set-cookie": ["a=1", "b=2"]}],
	"query_parameters_to_set": {"tenant": "acme", "tag": ["x", "y"]},
	"query_parameters_to_remove": ["access_token"],
	"dynamic_metadata": {"tenant": "acme", "score": 0.5, "checks": 3, "flags": {"beta": true}, "none": null},
} if input.parsed_path == ["full"]

allow := {"allowed": true} if input.parsed_path == ["bare"]

# On deny the plugin reads neither the headers to remove nor the query
# parameters: their wrong types do not matter.
allow := {
	"allowed": false,
	"http_status": 429,
	"headers": [{"retry-after": "30"}, {"x-reason": ["rate", "limit"]}],
	"body": "{\"error\":\"slow down\"}",
	"dynamic_metadata": {"limited": true},
	"request_headers_to_remove": 42,
	"query_parameters_to_set": "ignored",
} if input.parsed_path == ["limited"]

# On allow it reads neither body nor http_status.
allow := {"allowed": true, "body": 7, "http_status": "teapot"} if input.parsed_path == ["unread"]

# The plugin overwrites a decision_id of the policy's.
allow := {"allowed": true, "dynamic_metadata": {"decision_id": "the policy's"}} if input.parsed_path == ["decision-id"]

# Header values built by json.marshal and by concat over a set: OPA writes
# an object's keys sorted, escapes <, > and &, and joins a set sorted.
roles contains r if some r in ["viewer", "admin", "editor"]

allow := {"allowed": true, "headers": {
	"x-claims": json.marshal({"sub": "alice", "aud": "a&b", "<x>": 1}),
	"x-roles": concat(",", roles),
}} if input.parsed_path == ["encoded"]
