// Package archtest holds the test that keeps the import rules of
// ARCHITECTURE.md: it reads the module's import graph with `go list` and
// fails when a package imports what its layer must not.
package archtest
