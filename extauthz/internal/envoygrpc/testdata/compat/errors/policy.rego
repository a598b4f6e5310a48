# Results the plugin answers with a gRPC error, not a CheckResponse: an
# undefined decision, an evaluation error, and results that are not
# decisions. The x-case header chooses the result.
package envoy.authz

import rego.v1

case := input.attributes.request.http.headers["x-case"]

allow := true if case == "ok"

allow := {"allowed": "yes"} if case == "allowed-string"

allow := {"allow": true} if case == "allow-alias"

allow := "yes" if case == "string-result"

allow := {"allowed": false, "http_status": 418} if case == "teapot-status"

allow := {"allowed": false, "http_status": 403.5} if case == "fractional-status"

allow := {"allowed": true, "dynamic_metadata": null} if case == "null-metadata"

allow := {"allowed": true, "headers": {"x-count": 1}} if case == "number-header"

allow := {"allowed": false, "body": {"error": "no"}} if case == "object-body"

allow := {"allowed": true, "query_parameters_to_set": [{"a": "b"}]} if case == "query-array"

# Two values for one decision: an evaluation error.
allow := true if case == "conflict"

allow := false if case == "conflict"

# No rule for "undefined".
