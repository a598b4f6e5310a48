package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/aymanbagabas/go-udiff"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"
	"github.com/spf13/cobra"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/internal/cli"
	"github.com/nexuspdp/nexus/policyload"
)

// exitUnformatted is the status of nexus fmt --fail when a file needs
// formatting, as opa fmt --fail exits.
const exitUnformatted = 2

type fmtFlags struct {
	write, diff, list, fail, regoV0 bool
}

func newFmtCmd() *cobra.Command {
	var f fmtFlags
	cmd := &cobra.Command{
		Use:   "fmt [-w] [-d] [-l] [--fail] [PATH...]",
		Short: "Format Rego files in the canonical style, like opa fmt",
		Long: `Format the .rego files given, and those found in the directories given
(recursively), in the canonical style of opa fmt. With no path (or -), read
a policy from standard input and write it formatted.

Without -w, -d, -l or --fail the formatted policies are written to
standard output. -w rewrites the files that change; -d prints a diff of
each; -l lists their names. --fail exits 2 when a file needs formatting
(with -w, after rewriting it). Rego v1 is the default; --v0-compatible
formats Rego v0 policies.

A file that does not parse is an error (exit 1), reported as
file:line:col: message.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || (len(args) == 1 && args[0] == "-") {
				return fmtStdin(cmd, f)
			}
			var changed []string
			for _, root := range args {
				err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
					if err != nil {
						return err
					}
					if d.IsDir() || (p != root && filepath.Ext(p) != ".rego") {
						return nil
					}
					didChange, err := fmtFile(cmd.OutOrStdout(), p, f)
					if didChange {
						changed = append(changed, p)
					}
					return err
				})
				if err != nil {
					return fmt.Errorf("fmt: %w", err)
				}
			}
			if f.fail && len(changed) > 0 {
				return cli.WithExit(exitUnformatted, fmt.Errorf("fmt: not formatted: %s", strings.Join(changed, ", ")))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&f.write, "write", "w", false, "rewrite the files that need formatting")
	fl.BoolVarP(&f.diff, "diff", "d", false, "print a diff of the files that need formatting")
	fl.BoolVarP(&f.list, "list", "l", false, "list the files that need formatting")
	fl.BoolVar(&f.fail, "fail", false, "exit 2 when a file needs formatting")
	fl.BoolVar(&f.regoV0, "v0-compatible", false, "format policies as Rego v0")
	return cmd
}

// formatRego formats one policy, as OPA's formatter does.
func formatRego(name string, src []byte, regoV0 bool) ([]byte, error) {
	v := ast.RegoV1
	if regoV0 {
		v = ast.RegoV0
	}
	out, err := format.SourceWithOpts(name, src, format.Opts{
		RegoVersion:   v,
		Capabilities:  compiler.Capabilities(),
		ParserOptions: &ast.ParserOptions{RegoVersion: v, Capabilities: compiler.Capabilities()},
	})
	if err != nil {
		return nil, policyload.Located(err)
	}
	return out, nil
}

// fmtFile formats the file at p and reports whether it changes.
func fmtFile(out io.Writer, p string, f fmtFlags) (bool, error) {
	src, err := os.ReadFile(p)
	if err != nil {
		return false, err
	}
	formatted, err := formatRego(p, src, f.regoV0)
	if err != nil {
		return false, err
	}
	changed := !bytes.Equal(src, formatted)
	if f.list && changed {
		if _, err := fmt.Fprintln(out, p); err != nil {
			return changed, err
		}
	}
	if f.diff && changed {
		if _, err := io.WriteString(out, udiff.Unified(p, p+" (formatted)", string(src), string(formatted))); err != nil {
			return changed, err
		}
	}
	if f.write {
		if changed {
			st, err := os.Stat(p)
			if err != nil {
				return changed, err
			}
			if err := os.WriteFile(p, formatted, st.Mode().Perm()); err != nil {
				return changed, err
			}
		}
		return changed, nil
	}
	if !f.list && !f.diff && !f.fail {
		_, err = out.Write(formatted)
	}
	return changed, err
}

// fmtStdin formats standard input to standard output.
func fmtStdin(cmd *cobra.Command, f fmtFlags) error {
	if f.write || f.list || f.diff {
		return cli.UsageError(cmd, errors.New("fmt: -w, -l and -d need files"))
	}
	src, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<20))
	if err != nil {
		return fmt.Errorf("fmt: %w", err)
	}
	formatted, err := formatRego("stdin", src, f.regoV0)
	if err != nil {
		return fmt.Errorf("fmt: %w", err)
	}
	if _, err := cmd.OutOrStdout().Write(formatted); err != nil {
		return err
	}
	if f.fail && !bytes.Equal(src, formatted) {
		return cli.WithExit(exitUnformatted, errors.New("fmt: not formatted: stdin"))
	}
	return nil
}
