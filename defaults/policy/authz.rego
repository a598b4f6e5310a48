# The default nexus policy for application checks (AuthZEN, /allowed).
#
# input: {"subject": {"type", "id", "attributes"}, "action",
#         "resource": {"type", "id", "tenant", "attributes"}, "context"}
#
# A check is allowed when no ABAC condition denies it and either
#   - RBAC: a role the subject holds in the resource's tenant grants
#     "<type>:<action>" or "<type>:*" (the schema's roles), or
#   - ReBAC: the relationship store says the subject has the permission named
#     by the action on the resource (folder inheritance and all).
#
# The resource's tenant is the store's when the store holds one
# (type:id#tenant@tenant:T), else the one it inherits through the
# relations its type's tenancy names (a file's folder's, nearest first): a
# request that claims another tenant is denied with reason
# "tenant_mismatch", whoever sent it. A resource with no tenant, own or
# inherited, is denied with reason "no_tenant" when its type's tenancy is
# required, and otherwise judged in the tenant the request names.
#
# The proxied-request policy (envoy.rego) calls decide() with the subject,
# action and resource its route rules found.
package nexus.authz

import rego.v1

decision := decide(input.subject, input.action, input.resource)

allow := decision.allow

# decide answers one check: {"allow": bool, "reason": string}.
#
# nexus.resource_tenant asks the store for the resource's tenants once:
# ["mismatch"] when the request claims a tenant the store does not hold
# the resource in, ["none"] when the resource's type requires a tenant
# and it has none, else ["ok", T], the tenant the check is judged in (the
# claimed one, else the store's only one, else ""). nexus.grant answers
# ["rbac"] when a role of the subject in that tenant grants
# "<type>:<action>" or "<type>:*" (the schema's roles), else ["rebac"] when
# the relationship store grants the permission named by the action, else
# []. The fields of subject and resource are strings (the transports make
# them so).
decide(subject, action, resource) := decide_in(subject, action, resource, obj, nexus.resource_tenant(obj, object.get(resource, "tenant", ""))) if {
	obj := concat(":", [resource.type, object.get(resource, "id", "")])
}

# A resource without a type has no tenant, role grant or permission.
decide(_, _, resource) := {"allow": false, "reason": "no_grant"} if not resource.type

decide_in(_, _, _, _, ["mismatch"]) := {"allow": false, "reason": "tenant_mismatch"}

decide_in(_, _, _, _, ["none"]) := {"allow": false, "reason": "no_tenant"}

decide_in(subject, action, resource, obj, ["ok", tenant]) := {"allow": false, "reason": min(ds)} if {
	ds := denials(action, resource)
	count(ds) > 0
} else := {"allow": true, "reason": grant[0]} if {
	grant := nexus.grant(concat(":", [subject.type, subject.id]), action, obj, tenant)
	count(grant) == 1
} else := {"allow": false, "reason": "no_grant"}

# denials are the reasons the ABAC conditions (data.nexus.conditions) give
# to deny: a condition names a resource type, actions, and a resource
# attribute whose value forbids them.
denials(action, resource) := {c.reason |
	some c in data.nexus.conditions
	c.type == resource.type
	action in c.actions
	object.get(object.get(resource, "attributes", {}), c.attribute, null) == c.value
}
