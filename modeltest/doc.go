// Package modeltest runs model tests offline: a schema (nexus, OpenFGA or
// SpiceDB), tuples and assertions, checked on a temporary store, in the
// spirit of fga model test and zed validate. nexus rel test is its command.
//
//	suite, err := modeltest.Load("drive.test.yaml")
//	report, err := suite.Run(ctx)
//	for _, f := range report.Failures {
//		fmt.Println(f) // drive.test.yaml:12: check file:f1 read user:bob: want true, got false
//	}
//
// # The test file
//
//	schema_file: schema.yaml       # or schema: | (inline); .fga, .json and .zed are converted
//	from: openfga                  # optional: the schema's language, else from the
//	                               # extension, else from its first word
//	tuples:                        # object#relation@subject, {object, relation, subject}
//	  - folder:root#viewer@user:bob  # or OpenFGA's {user, relation, object}
//	tuple_file: tuples.txt         # or tuple_files: [...]; .txt, .csv, .json, .jsonl, .yaml
//	check:
//	  - object: file:report.pdf
//	    permission: read           # or relation:
//	    subject: user:bob          # or user:
//	    expected: true
//
// Files named in it are relative to its directory. Tuples written to an
// OpenFGA relation that the conversion split go to its stored relation.
//
// The runner also reads the files of the tools it stands in for. OpenFGA's
// store files (.fga.yaml): model or model_file, tuples, tuple_file(s), and
// tests, each with its own tuples (added for that test only), check
// ({user, object, assertions: {relation: bool}}), list_objects ({user,
// type, assertions: {relation: [objects]}}) and list_users ({object,
// user_filter: [{type}], assertions: {relation: {users: [...]}}}). And
// SpiceDB's validation files: schema or schemaFile, relationships (one per
// line) and assertions with assertTrue and assertFalse.
//
// # Caveats
//
//   - What nexus lacks is refused, not skipped: conditions and check
//     context, caveats (assertCaveated), wildcards, and caveated or
//     expiring relationships.
//   - Not checked, and listed in Report.Skipped: SpiceDB's validation
//     section (expected relations) and list_users with a userset filter.
//   - list_objects and list_users compare plain objects: a userset such as
//     group:eng#member found by OpenFGA's list_users is not one nexus lists.
package modeltest
