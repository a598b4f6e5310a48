# The policy of the AuthZEN Authorization API 1.0 certification scenario
# over its fixture (schema.yaml, tuples.txt). nexus' default policy cannot
# express it: its decisions turn on a subject's role, a resource's status
# and an action's properties that requests may carry.
#
#   - read: the store's read permission (readers and writers);
#   - write: a writer of a record that is not archived, or an admin on an
#     archived record;
#   - delete: a writer, of a record that is not archived, and only a soft
#     delete (action.properties.soft is true).
#
# A record is archived when the store says so or the request says so (a
# claim that can only take access away). A subject is an admin when the
# store makes it a member of role:admin or the request gives it
# properties.role "admin": AuthZEN callers are trusted applications, and
# the scenario's rule 6 grants on that property.
package nexus.authz

import rego.v1

subject := concat(":", [input.subject.type, input.subject.id])

record := concat(":", [input.resource.type, input.resource.id])

archived if "status:archived" in nexus.relations(record, "status")

archived if input.resource.attributes.status == "archived"

admin if input.subject.attributes.role == "admin"

admin if nexus.check("role:admin", "member", subject)

grant := "reader" if {
	input.action == "read"
	nexus.check(record, "read", subject)
}

grant := "writer" if {
	input.action == "write"
	not archived
	nexus.check(record, "writer", subject)
}

grant := "archive_admin" if {
	input.action == "write"
	archived
	admin
}

grant := "soft_delete" if {
	input.action == "delete"
	input.action_attributes.soft == true
	not archived
	nexus.check(record, "writer", subject)
}

decision := {"allow": true, "reason": grant} if {
	input.resource.type == "record"
	grant
} else := {"allow": false, "reason": "no_grant"}
