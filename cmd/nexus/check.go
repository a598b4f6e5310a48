package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/loader"
	"github.com/spf13/cobra"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/internal/cli"
	"github.com/nexuspdp/nexus/policyload"
)

func newCheckCmd() *cobra.Command {
	var (
		strict bool
		regoV0 bool
		format string
	)
	cmd := &cobra.Command{
		Use:   "check [--strict] [--v0-compatible] PATH...",
		Short: "Parse and type-check Rego policies, like opa check",
		Long: `Parse and compile the Rego files given, and those found in the directories
given, with the builtins nexus provides (OPA's and nexus' own, such as
nexus.check), and report every error as file:line:col: message. Nothing is
written. --strict adds the checks of opa check --strict (unused local
variables and imports, deprecated builtins, ...). Rego v1 is the default;
--v0-compatible checks Rego v0 policies.

--format json prints one line: {"errors": [{"file", "line", "column",
"code", "message"}, ...]}, empty when the policies are good.

Exit status: 0 when the policies are good, 1 when one has an error.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cli.CheckFormat(cmd, format); err != nil {
				return err
			}
			errs, err := checkRego(args, strict, regoV0)
			if err != nil {
				return fmt.Errorf("check: %w", err)
			}
			if format == cli.FormatJSON {
				type jsonErr struct {
					File    string `json:"file"`
					Line    int    `json:"line"`
					Column  int    `json:"column"`
					Code    string `json:"code"`
					Message string `json:"message"`
				}
				out := struct {
					Errors []jsonErr `json:"errors"`
				}{Errors: []jsonErr{}}
				for _, e := range errs {
					out.Errors = append(out.Errors, jsonErr{e.File, e.Line, e.Column, e.Code, e.Message})
				}
				if err := cli.WriteJSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
				if len(errs) > 0 {
					return fmt.Errorf("check: %s", plural(len(errs), "error"))
				}
				return nil
			}
			if len(errs) > 0 {
				return fmt.Errorf("check: %s:\n%w", plural(len(errs), "error"), errs)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&strict, "strict", "S", false, "enable the compiler's strict checks")
	f.BoolVar(&regoV0, "v0-compatible", false, "check policies as Rego v0")
	cli.FormatFlag(cmd, &format)
	return cmd
}

// checkRego loads, parses and compiles the policies in paths. Errors in
// the policies are returned as errs; err is a failure to read them.
func checkRego(paths []string, strict, regoV0 bool) (errs compiler.Errors, err error) {
	v := ast.RegoV1
	if regoV0 {
		v = ast.RegoV0
	}
	caps := compiler.Capabilities()
	res, err := loader.NewFileLoader().
		WithRegoVersion(v).
		WithCapabilities(caps).
		WithProcessAnnotation(true).
		Filtered(paths, onlyRego)
	if err != nil {
		return located(err)
	}
	modules := make(map[string]*ast.Module, len(res.Modules))
	for name, m := range res.Modules {
		modules[name] = m.Parsed
	}
	c := ast.NewCompiler().
		SetErrorLimit(0).
		WithCapabilities(caps).
		WithEnablePrintStatements(true).
		WithStrict(strict).
		WithUseTypeCheckAnnotations(true)
	if c.Compile(modules); c.Failed() {
		return located(c.Errors)
	}
	return nil, nil
}

// located splits an error into the policies' located errors and any
// other failure.
func located(err error) (compiler.Errors, error) {
	var errs compiler.Errors
	if errors.As(policyload.Located(err), &errs) {
		return errs, nil
	}
	return nil, err
}

// onlyRego is a loader filter that keeps directories and .rego files, as
// opa check reads only policies.
func onlyRego(abspath string, info fs.FileInfo, _ int) bool {
	return !info.IsDir() && filepath.Ext(abspath) != ".rego"
}

// plural is "1 error", "2 errors".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
