// Package schemaconv brings OpenFGA models and SpiceDB schemas to nexus: it
// parses either language and converts it into a nexus schema (the YAML of
// package datastore, parsed and validated), and reads OpenFGA tuple files.
//
//	res, err := schemaconv.Convert(src, schemaconv.OpenFGA) // or SpiceDB
//	os.Stdout.Write(res.YAML)                              // the nexus schema
//	_, err = store.WriteSchema(ctx, res.Schema, false)
//	err = schemaconv.ReadOpenFGATuples(f, "", func(t api.Tuple, line int) error {
//		tuples = append(tuples, res.Renames.Tuple(t)) // viewer -> viewer_direct
//		return nil
//	})
//
// # OpenFGA
//
// The DSL of schema 1.1 (model, schema, type, relations, define; direct
// assignments [user, group#member]; or, and, but not, "x from parent" and
// parentheses; # comments) and its JSON form (schema_version,
// type_definitions with this, computedUserset, tupleToUserset, union,
// intersection and difference). A relation that is only a direct
// assignment becomes a nexus relation, one without any becomes a
// permission, and "r from parent" becomes parent->r.
//
// A relation that mixes a direct assignment with computed parts
// (define viewer: [user] or editor) is split, because a nexus relation
// holds tuples and a permission computes: a relation named viewer_direct
// stores the tuples, with the types of the assignment, and a permission
// keeps the name viewer (viewer: viewer_direct + editor), so checks and
// usersets such as document#viewer keep their meaning. When the type
// already has a member named viewer_direct, the name is viewer_direct2,
// viewer_direct3 and so on (cut to fit nexus' 64 bytes). Result.Renames
// maps document#viewer to viewer_direct; Renames.Tuple rewrites the
// relation of a tuple (never a subject's relation); and the YAML marks the
// stored relation with the comment "# tuples of OpenFGA's viewer", which
// RenamesFromSchema reads back from a stored schema.
//
// Tuple files are read as the fga CLI writes and reads them: JSON or YAML
// lists of {user, relation, object} (fga tuple read --output-format
// simple-json or yaml), the full output of fga tuple read
// ({"tuples":[{"key":...}]}), JSONL, and CSV with the header
// user_type,user_id,user_relation,relation,object_type,object_id.
//
// # SpiceDB
//
// The schema language: definition, relation r: a | b#c | d#..., permission
// p = expression with + (union), & (intersection), - (exclusion), x->y,
// x.any(y) and parentheses; // and /* */ comments; ; and newlines between
// statements; permission type annotations (dropped) and "use
// typechecking". SpiceDB binds + tighter than &, and & tighter than -
// (a - b + c is a - (b + c)); nexus binds & tightest, then + and - alike,
// so the converter writes the parentheses the nexus schema needs.
// Relationships in SpiceDB's text form (document:1#viewer@user:anne) are
// nexus' own tuple syntax and import unchanged.
//
// # Errors
//
// Every error is an *Error (several are joined with errors.Join) with the
// 1-based line and column of the input and a Code: CodeSyntax
// (errors.Is ErrSyntax), CodeInvalid (ErrInvalid: an unknown type or
// relation, a name nexus does not accept, an arrow nexus cannot follow) or
// CodeUnsupported (ErrUnsupported; Feature names what nexus lacks).
//
// # Caveats
//
//   - nexus has no wildcard subjects (user:*), conditions or caveats, or
//     relationship expiration: models and tuples that use them are refused
//     with the feature and its line, never converted into something that
//     answers differently.
//   - Also refused: OpenFGA modules (module, extend type, schema 1.2) and
//     schema 1.0; SpiceDB's .all() (intersection arrows), nested arrows
//     (a->b->c), nil, self, partials, imports and "use" flags other than
//     typechecking. Expressions nested deeper than 30 parentheses are
//     refused too (nexus accepts 64, and precedence may add some).
//   - Names must be nexus names, [a-z][a-z0-9_]* of at most 64 bytes:
//     SpiceDB's prefixed definitions (app/document) and OpenFGA names with
//     capitals, '-', '.' or '/' are refused rather than renamed, since
//     every tuple would have to be renamed too. Likewise IDs must be nexus
//     IDs: an OpenFGA user such as user:anne@example.com is refused.
//   - An arrow (x from parent, parent->x) must find x on every type the
//     relation accepts; OpenFGA and SpiceDB accept it on some of them.
//   - The relation after "from" (OpenFGA) or left of -> (SpiceDB) must have
//     no computed part, as both languages require too: nexus follows
//     arrows through relations only.
//   - Comments of the source are not carried into the nexus schema.
package schemaconv
