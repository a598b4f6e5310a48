package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexuspdp/nexus/internal/cli"
	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
	"github.com/nexuspdp/nexus/pdp"
	"github.com/nexuspdp/nexus/policyload"
)

// opaRunFlags are opa run's flags as opa-envoy-plugin deployments pass
// them.
type opaRunFlags struct {
	server        bool
	configFile    string
	addrs         []string
	diagnostic    []string
	set, setFile  []string
	logLevel      string
	logFormat     string
	ignore        []string
	bundle        bool
	shutdownGrace int
	tlsCert       string
	tlsKey        string
}

// opaRunRefused are opa run's flags that nexus does not implement, each
// with why; giving one is an error that names it.
var opaRunRefused = []struct{ name, short, why string }{
	{"watch", "w", "nexus does not reload policy files when they change; restart it, or load policies through the admin API"},
	{"watch-config", "", "nexus does not reload its configuration; restart it"},
	{"h2c", "", "nexus' HTTP listener does not serve HTTP/2 over clear text"},
	{"authentication", "", "nexus' APIs take their own keys (the nexus section's app_api_key, admin_token)"},
	{"authorization", "", "nexus' APIs are authorized by their keys, not by a policy"},
	{"pprof", "", "profiles are served on nexus' admin listener (nexus serve --pprof)"},
	{"tls-ca-cert-file", "", "client certificates are set with the nexus section's http_tls.client_ca_file"},
	{"tls-cert-refresh-period", "", "nexus reads its certificates at start"},
	{"min-tls-version", "", "nexus' listeners require TLS 1.2 or later"},
	{"tls-cipher-suites", "", "nexus uses Go's default cipher suites"},
	{"unix-socket-perm", "", "nexus' HTTP listener does not listen on a Unix socket"},
	{"shutdown-wait-period", "", "nexus starts shutting down at once (its grace is --shutdown-grace-period)"},
	{"ready-timeout", "", "nexus is ready when it has started"},
	{"log-level-request", "", "nexus logs no HTTP access log"},
	{"log-timestamp-format", "", "nexus' log timestamps are RFC 3339"},
	{"skip-known-schema-check", "", "nexus does not type-check input schemas"},
	{"v0-compatible", "", "give Rego v1 policies"},
	{"v1-compatible", "", "policies are Rego v1 already"},
	{"verification-key", "", "bundles given on the command line are not verified"},
	{"verification-key-id", "", "bundles given on the command line are not verified"},
	{"signing-alg", "", "bundles given on the command line are not verified"},
	{"scope", "", "bundles given on the command line are not verified"},
	{"skip-verify", "", "bundles given on the command line are not verified"},
	{"exclude-files-verify", "", "bundles given on the command line are not verified"},
	{"max-errors", "m", "nexus reports every compile error"},
	{"read-ast-values-from-store", "", "nexus evaluates compiled policies"},
	{"history", "H", "nexus has no interactive shell"},
	{"format", "f", "nexus has no interactive shell"},
}

func newRunCmd() *cobra.Command { return runCommand(runServe) }

// runCommand is nexus run, serving with serve (runServe; tests look at the
// settings instead).
func runCommand(serve func(context.Context, serveConfig, io.Writer) error) *cobra.Command {
	var f opaRunFlags
	cmd := &cobra.Command{
		Use:   "run --server [flags] POLICY",
		Short: "Run the decision server as opa run starts OPA with the Envoy plugin",
		Long: `Run the decision server, started as opa run starts OPA with
opa-envoy-plugin: the same configuration file (--config-file), the same
--set and --set-file overrides and the same flags, so that a deployment
of opa-envoy-plugin moves to nexus by changing its image.

The configuration's plugins.envoy_ext_authz_grpc section sets the ext_authz
gRPC listener and the decision; --addr is nexus' HTTP listener (forward
auth and the application APIs) and --diagnostic-addr serves /health,
/healthz, /readyz and /metrics alone. nexus' own settings go under a
"nexus" section of the configuration. The admin listener is off unless
that section sets admin_addr.

POLICY is one .rego file, a directory of Rego and data files, or a bundle.
A flag of opa run that nexus does not implement is an error naming it.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := serveFromRun(cmd, f, args)
			if err != nil {
				return cli.UsageError(cmd, err)
			}
			return serve(cmd.Context(), c, cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.BoolVarP(&f.server, "server", "s", false, "run the server (required: nexus has no interactive shell)")
	fs.StringVarP(&f.configFile, "config-file", "c", "", "OPA configuration file (YAML or JSON)")
	fs.StringSliceVarP(&f.addrs, "addr", "a", []string{"localhost:8181"}, "HTTP listener: forward auth and the application APIs")
	fs.StringSliceVar(&f.diagnostic, "diagnostic-addr", nil, "listener of /health, /healthz, /readyz and /metrics alone")
	fs.StringArrayVar(&f.set, "set", nil, "override configuration values (a.b=c; commas separate several)")
	fs.StringArrayVar(&f.setFile, "set-file", nil, "override configuration values with files' contents (a.b=path)")
	fs.StringVarP(&f.logLevel, "log-level", "l", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "json", "json, json-pretty (written as json) or text")
	fs.StringSliceVar(&f.ignore, "ignore", nil, "file and directory names to skip while loading the policy path, as opa run does (e.g. '.*' skips dot-files and the ..data directory of a Kubernetes ConfigMap mount); repeatable")
	fs.BoolVarP(&f.bundle, "bundle", "b", false, "the policy path is a bundle (nexus recognises bundles without it)")
	fs.IntVar(&f.shutdownGrace, "shutdown-grace-period", 10, "seconds in-flight requests may take after SIGTERM")
	fs.StringVar(&f.tlsCert, "tls-cert-file", "", "TLS certificate of the HTTP listener (PEM)")
	fs.StringVar(&f.tlsKey, "tls-private-key-file", "", "TLS key of the HTTP listener (PEM)")
	fs.Bool("skip-version-check", false, "accepted: nexus never checks for new versions")
	fs.Bool("disable-telemetry", false, "accepted: nexus sends no telemetry")
	for _, r := range opaRunRefused {
		fs.StringP(r.name, r.short, "", "not supported by nexus: "+r.why)
		fs.Lookup(r.name).NoOptDefVal = "true"
		_ = fs.MarkHidden(r.name)
	}
	return cmd
}

// serveFromRun maps opa run's flags and configuration onto serve's
// settings.
func serveFromRun(cmd *cobra.Command, f opaRunFlags, args []string) (serveConfig, error) {
	var c serveConfig
	for _, r := range opaRunRefused {
		if cmd.Flags().Changed(r.name) {
			return c, fmt.Errorf("--%s: %w: %s", r.name, opaconfig.ErrUnsupported, r.why)
		}
	}
	if !f.server {
		return c, errors.New("nexus run needs --server: nexus has no interactive shell")
	}
	if len(args) > 1 {
		return c, fmt.Errorf("nexus run: %d policy paths: nexus loads one (a .rego file, a directory or a bundle); put the files in one directory", len(args))
	}
	var raw []byte
	if f.configFile != "" {
		var err error
		if raw, err = os.ReadFile(f.configFile); err != nil {
			return c, fmt.Errorf("--config-file: %w", err)
		}
	}
	cfg, err := opaconfig.Load(raw, opaconfig.Overrides{Set: f.set, SetFile: f.setFile})
	if err != nil {
		if f.configFile != "" {
			return c, fmt.Errorf("--config-file %s: %w", f.configFile, err)
		}
		return c, err
	}
	if c, err = serveFromOPA(cfg, true); err != nil {
		return c, err
	}
	switch {
	case len(args) == 0 && c.Policy == "" && cfg.Bundles != nil:
		// The policy comes from a bundle server alone, as with opa run
		// and a bundles section: deny until the first bundle is active.
		c.opa.AwaitBundle = true
	case len(args) == 0 && c.Policy == "":
		return c, errors.New("nexus run: give the policy: a .rego file, a directory or a bundle, or a bundles section in the configuration")
	case len(args) == 1 && c.Policy != "" && c.Policy != args[0]:
		return c, fmt.Errorf("the policy path %q and nexus.policy %q disagree: set it once", args[0], c.Policy)
	case len(args) == 1:
		c.Policy = args[0]
	}
	c.opa.PolicyIsBundle = f.bundle && c.Policy != ""
	if len(f.ignore) > 0 {
		if _, err := policyload.IgnoreFilter(f.ignore); err != nil {
			return c, fmt.Errorf("--ignore: %w", err)
		}
		if len(c.PolicyIgnore) > 0 && !slices.Equal(c.PolicyIgnore, f.ignore) {
			return c, fmt.Errorf("--ignore %s and nexus.policy_ignore %s disagree: set them once", strings.Join(f.ignore, ","), strings.Join(c.PolicyIgnore, ","))
		}
		c.PolicyIgnore = f.ignore
	}

	if len(f.addrs) != 1 {
		return c, fmt.Errorf("--addr %s: nexus has one HTTP listener: give one address", strings.Join(f.addrs, ","))
	}
	if cmd.Flags().Changed("addr") || c.Server.HTTPAddr == "" {
		c.Server.HTTPAddr = f.addrs[0]
	}
	if strings.Contains(c.Server.HTTPAddr, "://") {
		return c, fmt.Errorf("--addr %s: want host:port (nexus' HTTP listener is TCP)", c.Server.HTTPAddr)
	}
	switch len(f.diagnostic) {
	case 0:
	case 1:
		if strings.Contains(f.diagnostic[0], "://") {
			return c, fmt.Errorf("--diagnostic-addr %s: want host:port", f.diagnostic[0])
		}
		c.Server.DiagnosticAddr = f.diagnostic[0]
	default:
		return c, fmt.Errorf("--diagnostic-addr %s: give one address", strings.Join(f.diagnostic, ","))
	}

	if cmd.Flags().Changed("log-level") || c.LogLevel == "" {
		c.LogLevel = f.logLevel
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return c, err
	}
	switch f.logFormat {
	case "json", "json-pretty":
		c.opa.LogFormat = "json"
	case "text":
		c.opa.LogFormat = "text"
	default:
		return c, fmt.Errorf("--log-format %q: want json, json-pretty or text", f.logFormat)
	}
	if f.shutdownGrace < 0 {
		return c, fmt.Errorf("--shutdown-grace-period %d: want seconds, 0 or more", f.shutdownGrace)
	}
	if cmd.Flags().Changed("shutdown-grace-period") || c.ShutdownGrace == 0 {
		c.ShutdownGrace = time.Duration(f.shutdownGrace) * time.Second
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return c, errors.New("--tls-cert-file and --tls-private-key-file go together")
	}
	if f.tlsCert != "" {
		c.Server.HTTPTLS.CertFile, c.Server.HTTPTLS.KeyFile = f.tlsCert, f.tlsKey
	}
	runDefaults(&c)
	return c, nil
}

// runDefaults fills what serve's flags would have: nexus run has none of
// them.
func runDefaults(c *serveConfig) {
	c.DataDir = cmp.Or(c.DataDir, "./nexus-data")
	c.Core.EnvoyEntrypoint = cmp.Or(c.Core.EnvoyEntrypoint, opaconfig.DefaultEnvoyEntrypoint)
	c.Core.AuthzEntrypoint = cmp.Or(c.Core.AuthzEntrypoint, pdp.Disabled)
	c.Entrypoints = c.compileEntrypoints()
}
