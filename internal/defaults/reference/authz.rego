# The reference specification of the default policy (see reference.go):
# the decisions of ../policy, spelled out without its host builtins.
#
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
#
# The resource's tenant is the store's when the store holds one
# (type:id#tenant@tenant:T): a request that claims another tenant is denied
# with reason "tenant_mismatch", whoever sent it. A resource the store
# assigns to no tenant is judged in the tenant the request names.
#
# The proxied-request policy (envoy.rego) calls decide() with the subject,
# action and resource its route rules found.
package nexus.authz

import rego.v1

decision := decide(input.subject, input.action, input.resource)

allow := decision.allow

# decide answers one check: {"allow": bool, "reason": string}. The store
# is asked for the resource's tenants once.
decide(subject, action, resource) := decide_stored(subject, action, resource, stored_tenants(resource))

decide_stored(subject, action, resource, stored) := {"allow": false, "reason": "tenant_mismatch"} if {
	claimed := object.get(resource, "tenant", "")
	claimed != ""
	count(stored) > 0
	not claimed in stored
} else := decide_in_tenant(subject, action, resource, tenant_of(resource, stored))

# stored_tenants are the tenants the store assigns the resource to (none
# for a type without a tenant relation, or a resource without an id).
stored_tenants(resource) := {t |
	resource.id != ""
	data.nexus.tenanted[resource.type]
	prefix := concat("", [data.nexus.tenant_type, ":"])
	some s in nexus.relations(concat(":", [resource.type, resource.id]), "tenant")
	startswith(s, prefix)
	t := substring(s, count(prefix), -1)
}

# tenant_of is the tenant a check is judged in: the one the request names
# (decide refused it if the store disagrees), else the store's single one.
tenant_of(resource, stored) := t if {
	t := object.get(resource, "tenant", "")
	t != ""
} else := t if {
	count(stored) == 1
	some t in stored
} else := ""

decide_in_tenant(subject, action, resource, tenant) := {"allow": false, "reason": min(ds)} if {
	ds := denials(action, resource)
	count(ds) > 0
} else := {"allow": true, "reason": "rbac"} if {
	rbac(concat(":", [subject.type, subject.id]), action, resource.type, tenant)
} else := {"allow": true, "reason": "rebac"} if {
	rebac(concat(":", [subject.type, subject.id]), action, resource)
} else := {"allow": false, "reason": "no_grant"}

# rbac holds when a tenant role of the subject grants the action on the
# resource type in tenant.
rbac(subject, action, type, tenant) if {
	tenant != ""
	grants := {concat(":", [type, action]), concat(":", [type, "*"])}
	some role in nexus.roles(subject, tenant)
	some grant in data.nexus.roles[role]
	grant in grants
}

# rebac holds when the relationship store grants the permission.
rebac(subject, action, resource) if {
	resource.id != ""
	action in object.get(data.nexus.permissions, resource.type, [])
	nexus.check(concat(":", [resource.type, resource.id]), action, subject)
}

# denials are the reasons the ABAC conditions (data.nexus.conditions) give
# to deny: a condition names a resource type, actions, and a resource
# attribute whose value forbids them.
denials(action, resource) := {c.reason |
	some c in data.nexus.conditions
	c.type == resource.type
	action in c.actions
	object.get(object.get(resource, "attributes", {}), c.attribute, null) == c.value
}
