# RS256 bearer tokens verified against a JWKS in data, with issuer and
# audience checked; scopes decide the method. An object result answers a
# request without a valid token with 401 and a challenge.
package envoy.authz

import input.attributes.request.http

token := t if {
	[scheme, t] := split(http.headers.authorization, " ")
	lower(scheme) == "bearer"
}

claims := payload if {
	[valid, _, payload] := io.jwt.decode_verify(token, {"cert": data.jwks, "iss": data.issuer, "aud": "orders"})
	valid
}

scopes := {s | some s in split(claims.scope, " ")}

needed := "orders:read" if http.method in {"GET", "HEAD"}

else := "orders:write"

default allow := {"allowed": false, "http_status": 401, "headers": {"www-authenticate": "Bearer realm=\"orders\""}}

allow := {"allowed": true, "headers": {"x-client": claims.sub}} if {
	needed in scopes
	glob.match("/orders/**", ["/"], http.path)
}

allow := {"allowed": false, "http_status": 403, "body": "insufficient scope"} if {
	claims
	not needed in scopes
}
