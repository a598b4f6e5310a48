# In the spirit of opa-envoy-plugin's Istio quick start: the user comes
# from HTTP basic auth, roles and their permissions from data.
package envoy.authz

import input.attributes.request.http as req

default allow := false

allow if {
	input.parsed_path[0] == "health"
	req.method == "GET"
}

allow if {
	some role in data.user_roles[user]
	some perm in data.role_perms[role]
	perm.method == req.method
	perm.path == req.path
}

user := name if {
	[_, encoded] := split(req.headers.authorization, " ")
	[name, _] := split(base64.decode(encoded), ":")
}
