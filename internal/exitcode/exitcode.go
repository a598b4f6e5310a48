// Package exitcode holds the exit statuses that nexus and nexus-bench
// keep, so that scripts can rely on them, and makes every wrong
// invocation of a cobra command tree exit with [Usage].
//
//	root := &cobra.Command{Use: "nexus"}
//	exitcode.Scriptable(root)
//	if err := root.Execute(); err != nil {
//		os.Exit(exitcode.Of(err))
//	}
package exitcode

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

// Exit statuses every command keeps.
const (
	OK      = 0
	Failure = 1 // the command failed (an error, a failed test)
	Usage   = 2 // a wrong invocation: unknown command or flag, bad arguments or values
	Denied  = 3 // a deny, with --fail-deny
)

// exitError carries the process exit status of an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// With makes err (not nil) exit with code.
func With(code int, err error) error { return &exitError{code, err} }

// Of is the exit status for err: what a command chose with [With], or
// [Failure].
func Of(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return Failure
}

// UsageError makes err a wrong invocation of cmd ([Usage]); an err that
// already carries a status keeps it.
func UsageError(cmd *cobra.Command, err error) error {
	var e *exitError
	if errors.As(err, &e) {
		return err
	}
	return &exitError{Usage, fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())}
}

// Scriptable makes every wrong invocation under root exit with [Usage]:
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
