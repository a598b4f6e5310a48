package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/internal/cli"
	bundlesync "github.com/nexuspdp/nexus/opacompat/bundles"
)

func newCompileCmd() *cobra.Command {
	var (
		out         string
		entrypoints []string
		revision    string
		roots       []string
		optimize    int
		regoV0      bool
		withPrint   bool
		sign        bundlesync.SignOptions
	)
	cmd := &cobra.Command{
		Use:   "compile [-o bundle.tar.gz] [-e ENTRYPOINT]... PATH...",
		Short: "Compile Rego policies and data into a WebAssembly bundle",
		Long: `Compile Rego files and JSON/YAML data files (or directories of them) into an
OPA-format bundle: /.manifest, /policy.wasm and /data.json. Entrypoints are
rule paths without the data prefix, e.g. nexus/authz/allow; the decision
log's mask and drop rules (system/log/mask, system/log/drop) are added when
the policy defines them. Errors are printed as file:line:col: message.

With --signing-key the bundle carries a /.signatures.json as opa build
--signing-key writes it, which OPA and nexus verify against the public key
configured for the bundle (keys and bundles.<name>.signing in OPA's
configuration).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(entrypoints) == 0 {
				return cli.UsageError(cmd, fmt.Errorf("compile: at least one -e ENTRYPOINT is required"))
			}
			b, err := compiler.Compile(cmd.Context(), compiler.Options{
				Paths:               args,
				Entrypoints:         entrypoints,
				OptionalEntrypoints: defaultLogRules,
				Revision:            revision,
				Roots:               roots,
				OptimizationLevel:   optimize,
				RegoV0:              regoV0,
				EnablePrint:         withPrint,
			})
			if err != nil {
				return err
			}
			var buf bytes.Buffer
			if err := b.Write(&buf); err != nil {
				return err
			}
			if sign.Key == "" && (cmd.Flags().Changed("signing-alg") || sign.ClaimsFile != "" || sign.Scope != "" || cmd.Flags().Changed("signing-key-id")) {
				return cli.UsageError(cmd, fmt.Errorf("compile: --signing-alg, --signing-key-id, --claims-file and --scope need --signing-key"))
			}
			if sign.Key != "" {
				signed, err := bundlesync.Sign(buf.Bytes(), sign)
				if err != nil {
					return fmt.Errorf("compile: %w", err)
				}
				buf.Reset()
				buf.Write(signed)
			}
			// Write to a temporary file and rename: no partial bundle on failure.
			dir := filepath.Dir(out)
			tmp, err := os.CreateTemp(dir, ".bundle-*.tar.gz")
			if err != nil {
				return fmt.Errorf("compile: %w", err)
			}
			defer os.Remove(tmp.Name())
			if _, err := tmp.Write(buf.Bytes()); err != nil {
				tmp.Close()
				return fmt.Errorf("compile: %w", err)
			}
			if err := tmp.Close(); err != nil {
				return fmt.Errorf("compile: %w", err)
			}
			if err := os.Rename(tmp.Name(), out); err != nil {
				return fmt.Errorf("compile: %w", err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%d bytes, entrypoints %v)\n", out, buf.Len(), b.Manifest.Entrypoints)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVarP(&out, "output", "o", "bundle.tar.gz", "bundle file to write")
	f.StringArrayVarP(&entrypoints, "entrypoint", "e", nil, "rule to expose, e.g. nexus/authz/allow (repeatable)")
	f.StringVarP(&revision, "revision", "r", "", "revision recorded in the manifest")
	f.StringArrayVar(&roots, "root", nil, "bundle root (repeatable; default: the packages and top-level data keys)")
	f.IntVarP(&optimize, "optimize", "O", 0, "OPA optimisation level (0-2)")
	f.BoolVar(&regoV0, "v0-compatible", false, "parse policies as Rego v0")
	f.BoolVar(&withPrint, "enable-print", false, "keep print() calls (nexus eval shows their output on stderr)")
	f.StringVar(&sign.Key, "signing-key", "", "sign the bundle with this private key (PEM file, or the HMAC secret for HS algorithms)")
	f.StringVar(&sign.Algorithm, "signing-alg", "RS256", "signing algorithm (RS256, PS256, ES256, HS256, ... as OPA)")
	f.StringVar(&sign.KeyID, "signing-key-id", "default", "key id recorded in the signature (the key name under keys in OPA's configuration)")
	f.StringVar(&sign.ClaimsFile, "claims-file", "", "JSON file of further claims for the signature")
	f.StringVar(&sign.Scope, "scope", "", "scope claim of the signature (bundles.<name>.signing.scope)")
	return cmd
}
