// Package cli holds what the nexus and nexus-bench commands keep alike
// so that scripts can rely on them: the exit statuses, exit status 2 for
// every wrong invocation of a cobra command tree, and the --format flag
// (pretty or json).
//
//	root := &cobra.Command{Use: "nexus"}
//	cli.Scriptable(root)
//	if err := root.Execute(); err != nil {
//		os.Exit(cli.ExitCode(err))
//	}
package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Exit statuses every command keeps.
const (
	ExitOK      = 0
	ExitFailure = 1 // the command failed (an error, a failed test)
	ExitUsage   = 2 // a wrong invocation: unknown command or flag, bad arguments or values
	ExitDenied  = 3 // a deny, with --fail-deny
)

// exitError carries the process exit status of an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// WithExit makes err (not nil) exit with code.
func WithExit(code int, err error) error { return &exitError{code, err} }

// ExitCode is the exit status for err: what a command chose with
// [WithExit], or [ExitFailure].
func ExitCode(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return ExitFailure
}

// UsageError makes err a wrong invocation of cmd ([ExitUsage]); an err
// that already carries a status keeps it.
func UsageError(cmd *cobra.Command, err error) error {
	var e *exitError
	if errors.As(err, &e) {
		return err
	}
	return &exitError{ExitUsage, fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())}
}

// Scriptable makes every wrong invocation under root exit with [ExitUsage]:
// an unknown command (also under a command group, where cobra would print
// the help and succeed), an unknown or malformed flag, a missing required
// flag, the wrong number of arguments.
func Scriptable(root *cobra.Command) {
	root.SetFlagErrorFunc(UsageError)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.HasAvailableSubCommands() && !c.Runnable() {
			// A group: without a subcommand it prints its help; with an
			// argument that names none it is a wrong invocation.
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return UsageError(cmd, fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath()))
				}
				return cmd.Help()
			}
			return
		}
		if check := c.Args; check != nil {
			c.Args = func(cmd *cobra.Command, args []string) error {
				if err := check(cmd, args); err != nil {
					return UsageError(cmd, err)
				}
				return nil
			}
		}
		// cobra checks required flags after PreRunE: check them here first.
		pre := c.PreRunE
		c.PreRunE = func(cmd *cobra.Command, args []string) error {
			if err := cmd.ValidateRequiredFlags(); err != nil {
				return UsageError(cmd, err)
			}
			if err := cmd.ValidateFlagGroups(); err != nil {
				return UsageError(cmd, err)
			}
			if pre != nil {
				return pre(cmd, args)
			}
			return nil
		}
	}
	walk(root)
}

// Output formats of the commands scripts read (--format).
const (
	FormatPretty = "pretty" // for people: the default
	FormatJSON   = "json"   // one JSON document on one line
)

// FormatFlag adds --format to cmd, stored in f.
func FormatFlag(cmd *cobra.Command, f *string) {
	cmd.Flags().StringVar(f, "format", FormatPretty, "output format: pretty (for people) or json (one JSON document, for scripts)")
}

// CheckFormat refuses a --format other than pretty and json
// ([ExitUsage]).
func CheckFormat(cmd *cobra.Command, f string) error {
	if f != FormatPretty && f != FormatJSON {
		return UsageError(cmd, fmt.Errorf("--format %q: want pretty or json", f))
	}
	return nil
}

// WriteJSON writes v as one line of JSON.
func WriteJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}
