# The default nexus policy for application checks (AuthZEN, /allowed).
#
# input: {"subject": {"type", "id", "attributes"}, "action",
#         "resource": {"type", "id", "tenant", "attributes"}, "context"}
#
# A check is allowed when no ABAC condition denies it and either
#   - RBAC: a role the subject holds in the resource's tenant grants
#     "<type>:<action>" or "<type>:*" (data.nexus.roles, from the schema), or
#   - ReBAC: the relationship store says the subject has the permission named
#     by the action on the resource (folder inheritance and all).
package nexus.authz

import rego.v1

subject := concat(":", [input.subject.type, input.subject.id])

resource := concat(":", [input.resource.type, input.resource.id])

wanted := {concat(":", [input.resource.type, input.action]), concat(":", [input.resource.type, "*"])}

# rbac holds when a tenant role of the subject grants the action.
rbac if {
	input.resource.tenant != ""
	some role in nexus.roles(subject, input.resource.tenant)
	some grant in data.nexus.roles[role]
	grant in wanted
}

# rebac holds when the relationship store grants the permission.
rebac if {
	input.resource.id != ""
	input.action in object.get(data.nexus.permissions, input.resource.type, [])
	nexus.check(resource, input.action, subject)
}

# denials holds the reasons ABAC conditions (data.nexus.conditions) give to
# deny: a condition names a resource type, actions, and a resource
# attribute whose value forbids them.
denials contains c.reason if {
	some c in data.nexus.conditions
	c.type == input.resource.type
	input.action in c.actions
	object.get(input.resource.attributes, c.attribute, null) == c.value
}

default decision := {"allow": false, "reason": "no_grant"}

decision := {"allow": false, "reason": r} if {
	count(denials) > 0
	r := min(denials)
} else := {"allow": true, "reason": "rbac"} if {
	rbac
} else := {"allow": true, "reason": "rebac"} if {
	rebac
}

allow := decision.allow
