package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/internal/cli"
	"github.com/nexuspdp/nexus/policyload"
)

func newEvalCmd() *cobra.Command {
	var (
		bundlePath string
		entrypoint string
		inputPath  string
		timeout    time.Duration
		fail       bool
		failDeny   bool
		format     string
	)
	cmd := &cobra.Command{
		Use:   "eval -b POLICY -e ENTRYPOINT [-i input.json]",
		Short: "Evaluate an entrypoint of a bundle against an input, like opa eval",
		Long: `Load a policy, evaluate one entrypoint against the input document (a JSON
file, or - for standard input) and print the result as JSON. An undefined
result prints "undefined" (and exits 1 with --fail). nexus' relationship
builtins are not available here: they need the datastore of nexus serve.

The policy (-b) is a compiled bundle, an OPA bundle of Rego sources (as
opa build writes it, or a directory with a .manifest), a directory of Rego
and data files, or a .rego file; Rego is compiled for the entrypoint.

--format json prints one line: {"result": VALUE}, or {} when undefined.
--fail-deny exits 3 when the result is a deny: false, an object whose
"allowed" (or "allow") is false, or undefined; a result that is not a
decision then exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cli.CheckFormat(cmd, format); err != nil {
				return err
			}
			ctx := cmd.Context()
			b, err := policyload.Load(ctx, bundlePath, policyload.Options{Entrypoints: []string{entrypoint}})
			if err != nil {
				return fmt.Errorf("eval: %w", err)
			}
			var input []byte
			switch inputPath {
			case "":
			case "-":
				input, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<20))
			default:
				input, err = os.ReadFile(inputPath)
			}
			if err != nil {
				return fmt.Errorf("eval: input: %w", err)
			}
			e, err := engine.New(ctx, engine.Config{MaxInstances: 1, Print: cmd.ErrOrStderr()})
			if err != nil {
				return err
			}
			defer e.Close(context.WithoutCancel(ctx))
			if err := e.Load(ctx, b); err != nil {
				return fmt.Errorf("eval: %w", err)
			}
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			out, err := e.Eval(ctx, entrypoint, bytes.TrimSpace(input), nil)
			if errors.Is(err, engine.ErrUndefined) {
				if format == cli.FormatJSON {
					fmt.Fprintln(cmd.OutOrStdout(), "{}")
				} else {
					fmt.Fprintln(cmd.OutOrStdout(), "undefined")
				}
				switch {
				case fail:
					return fmt.Errorf("eval: %s is undefined", entrypoint)
				case failDeny:
					return denied("denied: %s is undefined", entrypoint)
				}
				return nil
			}
			if err != nil {
				return err
			}
			if format == cli.FormatJSON {
				err = cli.WriteJSON(cmd.OutOrStdout(), map[string]json.RawMessage{"result": out})
			} else {
				var pretty bytes.Buffer
				if json.Indent(&pretty, out, "", "  ") != nil {
					pretty.Reset()
					pretty.Write(out)
				}
				pretty.WriteByte('\n')
				_, err = cmd.OutOrStdout().Write(pretty.Bytes())
			}
			if err != nil || !failDeny {
				return err
			}
			allowed, ok := decisionOf(out)
			if !ok {
				return fmt.Errorf("eval: --fail-deny: the result of %s is not a decision (a boolean, or an object with a boolean allowed or allow)", entrypoint)
			}
			if !allowed {
				return denied("denied: %s", entrypoint)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&bundlePath, "bundle", "b", "bundle.tar.gz", "policy: a bundle (.tar.gz), a directory or a .rego file")
	f.StringVarP(&entrypoint, "entrypoint", "e", "", "entrypoint to evaluate, e.g. nexus/authz/allow")
	f.StringVarP(&inputPath, "input", "i", "", "input JSON file (- for standard input; default: no input)")
	f.DurationVar(&timeout, "timeout", 10*time.Second, "evaluation deadline (0: none)")
	f.BoolVar(&fail, "fail", false, "exit 1 when the result is undefined")
	f.BoolVar(&failDeny, "fail-deny", false, "exit 3 when the result is a deny (false, {\"allowed\": false} or undefined)")
	cli.FormatFlag(cmd, &format)
	_ = cmd.MarkFlagRequired("entrypoint")
	return cmd
}

// decisionOf reads a policy result as a decision: a boolean, or an object
// with a boolean "allowed" (opa-envoy-plugin's results) or "allow".
func decisionOf(result []byte) (allowed, ok bool) {
	var v any
	if json.Unmarshal(result, &v) != nil {
		return false, false
	}
	switch x := v.(type) {
	case bool:
		return x, true
	case map[string]any:
		for _, k := range []string{"allowed", "allow"} {
			if b, isBool := x[k].(bool); isBool {
				return b, true
			}
		}
	}
	return false, false
}
