# In the spirit of OPA's Envoy tutorial and policy primer: an HS256 bearer
# token carries a role; guests read people, admins also add them (but not
# themselves, by the first name in the JSON body).
package envoy.authz

import input.attributes.request.http

default allow := false

allow if {
	http.method == "GET"
	claims.role in {"guest", "admin"}
	glob.match("/people/*", ["/"], http.path)
}

allow if {
	http.method == "POST"
	claims.role == "admin"
	http.path == "/people"
	lower(input.parsed_body.firstname) != claims.sub
}

claims := payload if {
	[scheme, token] := split(http.headers.authorization, " ")
	lower(scheme) == "bearer"
	[valid, _, payload] := io.jwt.decode_verify(token, {"secret": "suite-hs256-secret", "alg": "HS256"})
	valid
}
