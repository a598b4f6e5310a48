package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/nexuspdp/nexus/internal/cli"
	"github.com/nexuspdp/nexus/internal/version"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "nexus",
		Short: "nexus is a policy decision point for proxies",
		Long: `nexus is a policy decision point for proxies.

Exit status: 0 success, 1 failure, 2 wrong invocation (an unknown command
or flag, bad arguments or flag values), 3 a deny (rel check and eval with
--fail-deny). As their OPA counterparts, nexus test exits 2 when a test
fails and nexus fmt --fail exits 2 when a file needs formatting.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newVersionCmd(),
		newServeCmd(),
		newRunCmd(),
		newRelCmd(),
		newCompileCmd(),
		newEvalCmd(),
		newTestCmd(),
		newFmtCmd(),
		newCheckCmd(),
	)
	cli.Scriptable(root)
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of nexus, its commit, and the Go, OPA and wazero inside",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := version.Get()
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "nexus %s\ncommit %s\ngo %s\nopa %s\nwazero %s\n", v.Version, v.Commit, v.GoVersion, v.OPA, v.Wazero)
			return err
		},
	}
}

// denied is the error of a deny under --fail-deny (exit 3).
func denied(format string, args ...any) error {
	return cli.WithExit(cli.ExitDenied, fmt.Errorf(format, args...))
}
