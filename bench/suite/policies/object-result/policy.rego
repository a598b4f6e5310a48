# An object result as opa-envoy-plugin reads it: allowed, headers for the
# upstream on allow, and an http_status, headers and body on deny.
package envoy.authz

import input.attributes.request.http

default allow := {"allowed": false, "http_status": 401, "headers": {"www-authenticate": "ApiKey"}, "body": "missing API key"}

key := data.keys[http.headers["x-api-key"]]

allow := {
	"allowed": true,
	"headers": {"x-tenant": key.tenant, "x-plan": key.plan},
	"response_headers_to_add": {"x-ratelimit-limit": format_int(data.plans[key.plan].rate, 10)},
} if {
	http.method in data.plans[key.plan].methods
}

allow := {
	"allowed": false,
	"http_status": 403,
	"headers": {"content-type": "application/json"},
	"body": json.marshal({"error": "plan", "plan": key.plan, "method": http.method}),
} if {
	not http.method in data.plans[key.plan].methods
}
