# Body rules on parsed_body: JSON, form and multipart bodies (Envoy sends
# the body with with_request_body, as text or, with pack_as_bytes, as
# raw_body), and truncated_body when Envoy sent only part of it.
package envoy.authz

import rego.v1

default allow := {"allowed": false, "http_status": 403, "body": "not allowed"}

allow := {"allowed": false, "http_status": 413, "body": "the whole body is needed"} if input.truncated_body

# POST /people with an adult in a JSON body
allow := {"allowed": true, "headers": {"x-person": input.parsed_body.firstname}} if {
	input.attributes.request.http.method == "POST"
	input.parsed_path == ["people"]
	input.parsed_body.age >= 18
}

# POST /login with a form
allow := {"allowed": true, "headers": {"x-login": input.parsed_body.user[0]}} if {
	input.parsed_path == ["login"]
	count(input.parsed_body.user) == 1
	"books" in input.parsed_body.scope
}

# POST /upload, multipart: a JSON part "meta" naming the owner, and files
allow := {"allowed": true, "headers": {"x-owner": input.parsed_body.meta[0].owner, "x-files": format_int(count(input.parsed_body.file), 10)}} if {
	input.parsed_path == ["upload"]
	input.parsed_body.meta[0].owner != ""
}
