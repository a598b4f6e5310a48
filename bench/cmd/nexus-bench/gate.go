package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexuspdp/nexus/bench/internal/lab"
	"github.com/nexuspdp/nexus/internal/cli"
)

func newGateCmd() *cobra.Command {
	var target, iface, file, apiKey, format string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "gate --target ADDR --file GATE",
		Short: "Run a gate file of checks against a server; fail unless every decision is right",
		Long: `Send every check of a gate file (NDJSON, written by nexus-bench gen) to a
running server and compare each decision with the expected one. Exits
1 and lists the wrong checks unless all are right; --format json prints
{"file", "interface", "passed", "checks", "right", "wrong": [...]}.

--interface grpc sends Envoy-shaped CheckRequests to the ext_authz gRPC
listener (GET/PUT/DELETE /tenants/{tenant}/files/{id} with the x-user
header: start the server with --trusted-subject-header x-user); allowed
and authzen POST to the HTTP listener.`,
		Example: `  nexus-bench gate --target 127.0.0.1:9191 --file bench-data/gate-rebac3.ndjson
  nexus-bench gate --target 127.0.0.1:8181 --interface authzen --file bench-data/gate-rbac.ndjson`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch iface {
			case lab.InterfaceGRPC, lab.InterfaceAllowed, lab.InterfaceAuthZEN:
			default:
				return cli.UsageError(cmd, fmt.Errorf("--interface %q: want grpc, allowed or authzen", iface))
			}
			if err := cli.CheckFormat(cmd, format); err != nil {
				return err
			}
			if apiKey == "" {
				apiKey = os.Getenv("NEXUS_APP_API_KEY")
			}
			checks, err := lab.ReadChecksFile(file)
			if err != nil {
				return err
			}
			t, err := lab.NewTarget(lab.TargetConfig{Interface: iface, Addr: target, Timeout: timeout, APIKey: apiKey})
			if err != nil {
				return err
			}
			defer t.Close()
			res, err := lab.Gate(cmd.Context(), t, checks)
			out := cmd.OutOrStdout()
			if err != nil && !errors.Is(err, lab.ErrGateFailed) {
				return err
			}
			if format == cli.FormatJSON {
				if res.Wrong == nil {
					res.Wrong = []lab.WrongCheck{}
				}
				if werr := cli.WriteJSON(out, struct {
					File      string `json:"file"`
					Interface string `json:"interface"`
					Passed    bool   `json:"passed"`
					lab.GateResult
					Wrong []lab.WrongCheck `json:"wrong"` // [] when none
				}{file, iface, res.Passed(), res, res.Wrong}); werr != nil {
					return werr
				}
				return err
			}
			for _, w := range res.Wrong {
				c := w.Check
				if w.Error != "" {
					fmt.Fprintf(out, "line %d: %s %s %s:%s in %s: error: %s\n", w.Line, c.User, c.Action, c.Type, c.ID, c.Tenant, w.Error)
					continue
				}
				fmt.Fprintf(out, "line %d: %s %s %s:%s in %s: got allow=%v, want %v\n", w.Line, c.User, c.Action, c.Type, c.ID, c.Tenant, w.Got, c.Allow)
			}
			fmt.Fprintf(out, "gate %s over %s: %d/%d right\n", file, iface, res.Right, res.Checks)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&target, "target", "127.0.0.1:9191", "server address: the gRPC listener (grpc) or the HTTP listener (allowed, authzen)")
	f.StringVar(&iface, "interface", lab.InterfaceGRPC, "grpc, allowed or authzen")
	f.StringVar(&file, "file", "", "gate file (NDJSON)")
	f.DurationVar(&timeout, "timeout", 5*time.Second, "timeout of one check")
	cli.FormatFlag(cmd, &format)
	f.StringVar(&apiKey, "api-key", "", "the server's application API key, for allowed and authzen (default $NEXUS_APP_API_KEY)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}
