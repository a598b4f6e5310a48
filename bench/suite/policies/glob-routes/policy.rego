# Path globbing: a route table of glob patterns in data, each with the
# methods and the scope a caller's x-scopes header must hold.
package envoy.authz

import input.attributes.request.http

default allow := false

scopes := {s | some s in split(object.get(http.headers, "x-scopes", ""), ",")}

allow if {
	some route in data.routes
	http.method in route.methods
	glob.match(route.pattern, ["/"], http.path)
	route.scope in scopes
}

allow if {
	some pattern in data.public
	glob.match(pattern, ["/"], http.path)
}
