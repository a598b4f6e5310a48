// Package savedpolicy keeps the policy bundle loaded through the admin API
// (PUT /v1/policy on a single node) in the data directory, so that a
// restart serves it again.
//
// The file holds one JSON header line (format, the bundle's revision, its
// length and SHA-256) followed by the bundle exactly as it was uploaded.
// A save writes a temporary file, syncs it, renames it over the saved one
// and syncs the directory: a crash leaves the old file or the new one,
// never a mix. Reading checks the header, the length and the digest and
// that the bundle reads with the revision the header names; anything else
// is a [*DamagedError], which the server reports instead of falling back
// to another policy.
//
// Example:
//
//	f := &savedpolicy.File{Path: filepath.Join(dataDir, savedpolicy.Name)}
//	err := f.Save(ctx, raw, "r7", func() error { return pdp.Load(ctx, b) })
//	...
//	s, err := f.Read() // s == nil when nothing was saved
package savedpolicy
