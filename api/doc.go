// Package api holds the types that nexus packages share: objects, subjects
// and relationship tuples, with their text syntax. It is a leaf package that
// depends on nothing but the standard library.
//
// A tuple is written
//
//	type:id#relation@type:id[#relation]
//
// for example
//
//	t, err := api.ParseTuple("folder:d1#viewer@group:eng#member")
//	// t.Object = {folder d1}, t.Relation = "viewer", t.Subject = {group eng member}
//	fmt.Println(t) // folder:d1#viewer@group:eng#member
//
// # Limits
//
// Type and relation names ([ValidName]): 1 to [MaxNameLen] bytes, a lower-case
// ASCII letter followed by lower-case letters, digits and '_'.
//
// IDs ([ValidID]): 1 to [MaxIDLen] bytes of ASCII letters, digits and the
// characters '_', '-', '.', '=', '+', '/', '|' and '~'. An ID never contains
// ':', '#', '@', whitespace, control or non-ASCII bytes, so the text syntax
// stays unambiguous and storage keys can end an ID with a 0x00 byte.
//
// # Caveats
//
// Parsing does not allocate: the parsed fields are substrings of the input,
// which therefore stays reachable as long as the result is.
package api
