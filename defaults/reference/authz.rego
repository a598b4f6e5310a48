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

# decide answers one check: {"allow": bool, "reason": string}. The store
# is asked for the resource's tenants once.
decide(subject, action, resource) := decide_stored(subject, action, resource, stored_tenants(resource))

decide_stored(subject, action, resource, stored) := {"allow": false, "reason": "tenant_mismatch"} if {
	claimed := object.get(resource, "tenant", "")
	claimed != ""
	count(stored) > 0
	not claimed in stored
} else := {"allow": false, "reason": "no_tenant"} if {
	count(stored) == 0
	resource.id != ""
	object.get(object.get(data.nexus.tenancy, type_of(concat(":", [resource.type, resource.id])), {}), "required", false)
} else := decide_in_tenant(subject, action, resource, tenant_of(resource, stored))

# stored_tenants are the tenants the store assigns the resource to (none
# for a resource without an id): its own, else those it inherits.
stored_tenants(resource) := ts if {
	resource.id != ""
	obj := concat(":", [resource.type, resource.id])
	own := own_tenants(obj)
	ts := tenants_or_inherited(obj, own)
} else := set()

tenants_or_inherited(_, own) := own if count(own) > 0

tenants_or_inherited(obj, own) := inherited_tenants(obj) if count(own) == 0

# type_of is the type of the object "type:id" (up to its first ':').
type_of(obj) := substring(obj, 0, indexof(obj, ":"))

# own_tenants are the tenants obj's own "tenant" relation names (none for
# a type without a tenant relation to the tenant type).
own_tenants(obj) := {t |
	data.nexus.tenanted[type_of(obj)]
	prefix := concat("", [data.nexus.tenant_type, ":"])
	some s in nexus.relations(obj, "tenant")
	startswith(s, prefix)
	t := substring(s, count(prefix), -1)
}

# inherit are the relations obj's type inherits a tenant through.
inherit(obj) := object.get(object.get(data.nexus.tenancy, type_of(obj), {}), "inherit", [])

# step is the next level of the walk up from level: the objects the
# inherit relations of level's objects without a tenant of their own lead
# to, leaving out those seen.
step(level, seen) := {p |
	some o in level
	count(own_tenants(o)) == 0
	some rel in inherit(o)
	some p in nexus.relations(o, rel)
	not contains(p, "#")
	not p in seen
}

# inherited_tenants are the tenants of the objects reached from obj, which
# has none of its own, level by level through objects without one; Rego
# has no recursion, so the 32 levels the walk may go up are spelled out,
# and an object on a 33rd is an error (as the store's builtin makes it).
inherited_tenants(obj) := ts if {
	s0 := {obj}
	l1 := step(s0, s0)
	s1 := s0 | l1
	l2 := step(l1, s1)
	s2 := s1 | l2
	l3 := step(l2, s2)
	s3 := s2 | l3
	l4 := step(l3, s3)
	s4 := s3 | l4
	l5 := step(l4, s4)
	s5 := s4 | l5
	l6 := step(l5, s5)
	s6 := s5 | l6
	l7 := step(l6, s6)
	s7 := s6 | l7
	l8 := step(l7, s7)
	s8 := s7 | l8
	l9 := step(l8, s8)
	s9 := s8 | l9
	l10 := step(l9, s9)
	s10 := s9 | l10
	l11 := step(l10, s10)
	s11 := s10 | l11
	l12 := step(l11, s11)
	s12 := s11 | l12
	l13 := step(l12, s12)
	s13 := s12 | l13
	l14 := step(l13, s13)
	s14 := s13 | l14
	l15 := step(l14, s14)
	s15 := s14 | l15
	l16 := step(l15, s15)
	s16 := s15 | l16
	l17 := step(l16, s16)
	s17 := s16 | l17
	l18 := step(l17, s17)
	s18 := s17 | l18
	l19 := step(l18, s18)
	s19 := s18 | l19
	l20 := step(l19, s19)
	s20 := s19 | l20
	l21 := step(l20, s20)
	s21 := s20 | l21
	l22 := step(l21, s21)
	s22 := s21 | l22
	l23 := step(l22, s22)
	s23 := s22 | l23
	l24 := step(l23, s23)
	s24 := s23 | l24
	l25 := step(l24, s24)
	s25 := s24 | l25
	l26 := step(l25, s25)
	s26 := s25 | l26
	l27 := step(l26, s26)
	s27 := s26 | l27
	l28 := step(l27, s27)
	s28 := s27 | l28
	l29 := step(l28, s28)
	s29 := s28 | l29
	l30 := step(l29, s29)
	s30 := s29 | l30
	l31 := step(l30, s30)
	s31 := s30 | l31
	l32 := step(l31, s31)
	s32 := s31 | l32
	l33 := step(l32, s32)
	count(l33) == 0
	ts := {t | some o in s32; some t in own_tenants(o)}
} else := nexus.relations("", "tenant") # an error: "" is no object

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
