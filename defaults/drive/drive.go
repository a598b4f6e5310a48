// Package drive embeds the data nexus starts with: the drive schema
// (tenants, users, groups, folders and files) and a small demo data set,
// which `nexus serve` writes into an empty data directory (package demo
// does the writing). It embeds files only and imports nothing, so every
// package's tests may use it.
//
//	s, err := datastore.ParseSchema(drive.Schema)
//	...
//	store.Import(ctx, bytes.NewReader(drive.Tuples), datastore.ImportOptions{Format: datastore.FormatText})
//
// # Caveats
//
// The demo data is tiny and meant for first steps and tests, not
// benchmarks (internal/bench generates those).
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
