# Data lookups and comprehensions: a user's teams are computed from the
# membership lists, their path prefixes from the teams' grants, and the
# request is allowed under any granted prefix with a granted method.
package envoy.authz

import input.attributes.request.http

default allow := false

user := http.headers["x-user"]

teams := {team | some team, members in data.teams; user in members}

grants := [g | some team in teams; some g in data.grants[team]]

allow if {
	some g in grants
	http.method in g.methods
	startswith(http.path, g.prefix)
}

allow if {
	user in data.admins
}
