package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

// Exit statuses every command keeps, so that scripts can rely on them:
// those of nexus.
const (
	exitOK      = 0
	exitFailure = 1 // the command failed (an error, a failed test)
	exitUsage   = 2 // a wrong invocation: unknown command or flag, bad arguments or values
)

// cliExitError carries the process exit status of an error.
type cliExitError struct {
	code int
	err  error
}

func (e *cliExitError) Error() string { return e.err.Error() }
func (e *cliExitError) Unwrap() error { return e.err }

// exitCodeOf is the exit status for err: what a command chose, or 1.
func exitCodeOf(err error) int {
	var e *cliExitError
	if errors.As(err, &e) {
		return e.code
	}
	return exitFailure
}

// usageError makes err a wrong invocation of cmd (exit 2).
func usageError(cmd *cobra.Command, err error) error {
	var e *cliExitError
	if errors.As(err, &e) {
		return err
	}
	return &cliExitError{exitUsage, fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())}
}

// scriptable makes every wrong invocation under root exit 2: an unknown
// command (also under a command group, where cobra would print the help
// and succeed), an unknown or malformed flag, a missing required flag,
// the wrong number of arguments.
func scriptable(root *cobra.Command) {
	root.SetFlagErrorFunc(usageError)
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
					return usageError(cmd, fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath()))
				}
				return cmd.Help()
			}
			return
		}
		if check := c.Args; check != nil {
			c.Args = func(cmd *cobra.Command, args []string) error {
				if err := check(cmd, args); err != nil {
					return usageError(cmd, err)
				}
				return nil
			}
		}
		// cobra checks required flags after PreRunE: check them here first.
		pre := c.PreRunE
		c.PreRunE = func(cmd *cobra.Command, args []string) error {
			if err := cmd.ValidateRequiredFlags(); err != nil {
				return usageError(cmd, err)
			}
			if err := cmd.ValidateFlagGroups(); err != nil {
				return usageError(cmd, err)
			}
			if pre != nil {
				return pre(cmd, args)
			}
			return nil
		}
	}
	walk(root)
}
