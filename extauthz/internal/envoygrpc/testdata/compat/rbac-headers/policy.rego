# RBAC from a header: the proxy in front verified the user and put their
# role in x-user-role (removing any copy the client sent). The result is a
# boolean, which the plugin answers with the status alone.
package envoy.authz

import rego.v1

default allow := false

role := input.attributes.request.http.headers["x-user-role"]

# data.role_permissions: the methods each role may use on each collection
# (the first segment of the path).
allow if {
	some grant in data.role_permissions[role]
	grant.method == input.attributes.request.http.method
	grant.collection == input.parsed_path[0]
}

allow if role == "admin"
