// Package schema is the schema language of nexus' relationship store:
// types, the relations each accepts subjects through, permissions as
// expressions over them, how a type's resources get their tenant, and
// tenant roles with their grants. It parses and validates a schema and
// answers questions about it; the store (package datastore) evaluates it.
//
//	sc, err := schema.Parse(yamlBytes)
//	sc.Permissions("file")                 // [read write]
//	sc.Grants([]string{"admin"}, "file", "read")
//	err = sc.ValidateTuple(tuple)          // does the tuple fit?
//
// A schema is YAML with two top-level keys:
//
//	types:
//	  user: {}
//	  group:
//	    relations:
//	      member: [user, group#member]     # accepted subject types; type#relation is a userset
//	  folder:
//	    relations:
//	      parent: [folder]
//	      viewer: [user, group#member]
//	    permissions:
//	      read: viewer + parent->read      # an expression, see below
//	    tenancy:                           # optional: how a folder gets its tenant
//	      inherit: [parent]                # the parent's, when it has none of its own
//	      required: true                   # a folder with no tenant is in none (denied)
//	roles:                                 # optional: tenant roles (RBAC)
//	  type: tenant                         # the type whose relations are roles (default tenant)
//	  grants:
//	    admin: [file:*, folder:*]          # type:permission, type:* or *:*
//	    viewer: [file:read, folder:read]
//
// Relations and permissions of a type share one namespace. A permission
// expression is built from names of relations or permissions of the same
// type, rel->perm (perm on every object reached through relation rel; an
// arrow follows the subject object and ignores a userset's relation), and
// the operators + (union), & (intersection) and - (exclusion), with
// parentheses. -> binds tightest, then &, then + and - (left to right):
// a + b & c - d is (a + (b & c)) - d. Every role under roles.grants must be
// a relation of the tenant type. A resource's tenant is its own (its
// "tenant" relation to the tenant type), else the one it inherits through
// the relations under tenancy.inherit (see Tenancy). Errors (*Error) name
// the type, the relation and the line:column of the YAML.
//
// # Caveats
//
//   - Wildcard subjects (user:*) and caveats are not supported.
package schema
