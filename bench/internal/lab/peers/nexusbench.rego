# The OPA peer of nexus bench: the drive schema's question in Rego.
#
# input: {"user", "action", "type", "id", "tenant"}
# data.nexusbench: role_actions, rel_actions, roles, parents, relations
# (written by nexus-bench from the data set's tuples).
#
# Allowed when the user's role in the tenant the request names grants the
# action on files, or the user holds a relation (owner, editor, viewer)
# granting the action on the file or on a folder above it.
package nexusbench

import rego.v1

default allow := false

allow if {
	input.type == "file"
	some role in data.nexusbench.roles[input.user][input.tenant]
	input.action in data.nexusbench.role_actions[role]
}

allow if {
	some obj in graph.reachable(data.nexusbench.parents, {concat(":", [input.type, input.id])})
	some rel, users in data.nexusbench.relations[obj]
	users[input.user]
	input.action in data.nexusbench.rel_actions[rel]
}
