// Package opaconfig reads the parts of an OPA configuration file that
// nexus shares between its bundle downloader, decision-log uploader and
// status reporter: the services (a bundle server, a log collector) and
// the strict reading every section gets. A setting nexus does not support
// is an error that names it, never a setting silently ignored.
//
// Sections arrive as JSON (an OPA configuration in YAML is converted to
// JSON first, as OPA does).
package opaconfig
