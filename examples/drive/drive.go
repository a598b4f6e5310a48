// Package drive embeds the drive example: a schema of tenants, users,
// groups, folders and files, and a small demo data set.
//
//	s, err := datastore.ParseSchema(drive.Schema)
//	...
//	store.Import(ctx, bytes.NewReader(drive.Tuples), datastore.ImportOptions{Format: datastore.FormatText})
//
// # Caveats
//
// The demo data is tiny and meant for examples and tests, not benchmarks.
package drive

import _ "embed"

// Schema is schema.yaml.
//
//go:embed schema.yaml
var Schema []byte

// Tuples is tuples.txt, in the text tuple syntax (datastore.FormatText).
//
//go:embed tuples.txt
var Tuples []byte
