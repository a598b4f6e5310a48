package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/nexuspdp/nexus/internal/exitcode"
)

// Output formats of the commands scripts read (--format).
const (
	formatPretty = "pretty" // for people: the default
	formatJSON   = "json"   // one JSON document on one line
)

// formatFlag adds --format to cmd.
func formatFlag(cmd *cobra.Command, f *string) {
	cmd.Flags().StringVar(f, "format", formatPretty, "output format: pretty (for people) or json (one JSON document, for scripts)")
}

// checkFormat refuses a --format other than pretty and json (exit 2).
func checkFormat(cmd *cobra.Command, f string) error {
	if f != formatPretty && f != formatJSON {
		return exitcode.UsageError(cmd, fmt.Errorf("--format %q: want pretty or json", f))
	}
	return nil
}

// writeJSON writes v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// denied is the error of a deny under --fail-deny (exit 3).
func denied(format string, args ...any) error {
	return exitcode.With(exitcode.Denied, fmt.Errorf(format, args...))
}
