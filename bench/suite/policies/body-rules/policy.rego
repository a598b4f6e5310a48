# Request bodies: a JSON transfer is allowed when its amount is within the
# caller's limit for its currency and the source account is the caller's;
# a truncated body is never allowed.
package envoy.authz

import input.attributes.request.http

default allow := false

allow if {
	http.method == "POST"
	input.parsed_path == ["v1", "transfers"]
	not input.truncated_body
	body := input.parsed_body
	body.from == data.accounts[http.headers["x-user"]]
	body.amount > 0
	body.amount <= data.limits[http.headers["x-tier"]][body.currency]
	count(body.memo) <= 140
}
