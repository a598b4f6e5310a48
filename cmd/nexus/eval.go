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

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/engine"
)

func newEvalCmd() *cobra.Command {
	var (
		bundlePath string
		entrypoint string
		inputPath  string
		timeout    time.Duration
		fail       bool
	)
	cmd := &cobra.Command{
		Use:   "eval -b bundle.tar.gz -e ENTRYPOINT [-i input.json]",
		Short: "Evaluate an entrypoint of a bundle against an input, like opa eval",
		Long: `Load a bundle, evaluate one entrypoint against the input document (a JSON
file, or - for standard input) and print the result as JSON. An undefined
result prints "undefined" (and exits non-zero with --fail). nexus' relationship
builtins are not available here: they need the datastore of nexus serve.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			f, err := os.Open(bundlePath)
			if err != nil {
				return fmt.Errorf("eval: %w", err)
			}
			b, err := bundle.Read(f)
			f.Close()
			if err != nil {
				return fmt.Errorf("eval: %s: %w", bundlePath, err)
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
				fmt.Fprintln(cmd.OutOrStdout(), "undefined")
				if fail {
					return fmt.Errorf("eval: %s is undefined", entrypoint)
				}
				return nil
			}
			if err != nil {
				return err
			}
			var pretty bytes.Buffer
			if json.Indent(&pretty, out, "", "  ") != nil {
				pretty.Reset()
				pretty.Write(out)
			}
			pretty.WriteByte('\n')
			_, err = cmd.OutOrStdout().Write(pretty.Bytes())
			return err
		},
	}
	f := cmd.Flags()
	f.StringVarP(&bundlePath, "bundle", "b", "bundle.tar.gz", "bundle file")
	f.StringVarP(&entrypoint, "entrypoint", "e", "", "entrypoint to evaluate, e.g. nexus/authz/allow")
	f.StringVarP(&inputPath, "input", "i", "", "input JSON file (- for standard input; default: no input)")
	f.DurationVar(&timeout, "timeout", 10*time.Second, "evaluation deadline (0: none)")
	f.BoolVar(&fail, "fail", false, "exit non-zero when the result is undefined")
	_ = cmd.MarkFlagRequired("entrypoint")
	return cmd
}
