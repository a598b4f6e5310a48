package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/builtins"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/defaults/demo"
	"github.com/nexuspdp/nexus/defaults/policy"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/internal/cli"
	"github.com/nexuspdp/nexus/internal/gctune"
	"github.com/nexuspdp/nexus/internal/version"
	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
	"github.com/nexuspdp/nexus/pdp"
	"github.com/nexuspdp/nexus/policyload"
	"github.com/nexuspdp/nexus/savedpolicy"
)

// serveConfig is the YAML config file of `nexus serve`; flags given on the
// command line override it. The decision core's settings (Core) and the
// server's (Server) are their packages' own Config types, decoded inline
// (their yaml keys are the file's); what is left here is the command's:
// where things are, secrets' files, logging, the cluster.
type serveConfig struct {
	Core   pdp.Config      `yaml:",inline"`
	Server extauthz.Config `yaml:",inline"`

	AdminTokenFile       string        `yaml:"admin_token_file"`
	AppAPIKeyFile        string        `yaml:"app_api_key_file"`
	DataDir              string        `yaml:"data_dir"`
	Policy               string        `yaml:"policy"`
	PolicyIgnore         []string      `yaml:"policy_ignore"`
	TrustedSubjectHeader string        `yaml:"trusted_subject_header"`
	Schema               string        `yaml:"schema"`
	Entrypoints          []string      `yaml:"entrypoints"`
	DecisionLog          string        `yaml:"decision_log"`
	WasmOnly             bool          `yaml:"wasm_only"` // deprecated, no effect
	BundleDataLimit      int64         `yaml:"bundle_data_limit"`
	HTTPStdOnly          bool          `yaml:"http_std_only"` // deprecated, no effect
	LogLevel             string        `yaml:"log_level"`
	ShutdownGrace        time.Duration `yaml:"shutdown_grace"`
	MaxInstances         int           `yaml:"max_instances"`
	ScrubRate            int           `yaml:"scrub_rate"`
	ScrubInterval        time.Duration `yaml:"scrub_interval"`
	Cluster              clusterConfig `yaml:"cluster"`

	// opa holds what an OPA configuration or nexus run sets (opaconfig.go).
	opa opaSettings
}

func newServeCmd() *cobra.Command {
	var (
		cfgFile string
		c       serveConfig
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the decision server (ext_authz gRPC and HTTP, AuthZEN, Permit-compatible APIs)",
		Long: `Run the decision server.

With no flags it starts on the embedded default: the drive example's schema
and demo relationships (written into --data-dir on first start) and the
default policy (RBAC tenant roles, ReBAC folder inheritance, ABAC
conditions), compiled from embedded Rego.

The subject of a proxied request is the "sub" of a JWT that Envoy's
jwt_authn filter verified. --trusted-subject-header NAME also accepts the
subject from the header NAME when no JWT came with the request: use it only
where every request reaches nexus through a hop that sets NAME itself and
removes a client's copy (the demo, nginx auth_basic, a proxy that copies a
verified JWT claim into NAME).

An admin listener on an address other than loopback requires a token
(--admin-token, --admin-token-file or $NEXUS_ADMIN_TOKEN).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := parseLevel(c.LogLevel); err != nil {
				return cli.UsageError(cmd, err)
			}
			if cfgFile != "" {
				fileCfg, err := readServeConfig(cfgFile)
				if err != nil {
					return err
				}
				mergeFlags(cmd, &c, fileCfg)
			}
			return runServe(cmd.Context(), c, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&cfgFile, "config", "", "YAML config file (flags override it)")
	addServeFlags(cmd.Flags(), &c)
	return cmd
}

// addServeFlags defines serve's flags on f, each bound to its setting in
// c (the decision core's, the server's or the command's own) and set to
// its default.
func addServeFlags(f *pflag.FlagSet, c *serveConfig) {
	f.StringVar(&c.Server.GRPCAddr, "grpc-addr", extauthz.DefaultGRPCAddr, `ext_authz gRPC listener ("-" disables)`)
	f.StringVar(&c.Server.HTTPAddr, "http-addr", extauthz.DefaultHTTPAddr, `HTTP listener: forward auth, AuthZEN, Permit APIs ("-" disables)`)
	f.StringVar(&c.Server.AdminAddr, "admin-addr", extauthz.DefaultAdminAddr, `admin listener ("-" disables)`)
	f.StringVar(&c.Server.GRPCTLS.CertFile, "grpc-tls-cert", "", "gRPC TLS certificate (PEM)")
	f.StringVar(&c.Server.GRPCTLS.KeyFile, "grpc-tls-key", "", "gRPC TLS key (PEM)")
	f.StringVar(&c.Server.GRPCTLS.ClientCAFile, "grpc-tls-client-ca", "", "gRPC client CAs: require and verify client certificates (mTLS)")
	f.StringVar(&c.Server.HTTPTLS.CertFile, "http-tls-cert", "", "HTTP TLS certificate (PEM)")
	f.StringVar(&c.Server.HTTPTLS.KeyFile, "http-tls-key", "", "HTTP TLS key (PEM)")
	f.StringVar(&c.Server.HTTPTLS.ClientCAFile, "http-tls-client-ca", "", "HTTP client CAs (mTLS)")
	f.StringVar(&c.Server.AdminTLS.CertFile, "admin-tls-cert", "", "admin TLS certificate (PEM)")
	f.StringVar(&c.Server.AdminTLS.KeyFile, "admin-tls-key", "", "admin TLS key (PEM)")
	f.StringVar(&c.Server.AdminTLS.ClientCAFile, "admin-tls-client-ca", "", "admin client CAs (mTLS)")
	f.StringVar(&c.Server.AdminToken, "admin-token", "", "bearer token the admin API requires (default: $NEXUS_ADMIN_TOKEN, else on loopback a token generated into <data-dir>/admin-token)")
	f.StringVar(&c.AdminTokenFile, "admin-token-file", "", "file holding the admin bearer token (e.g. a mounted Secret)")
	f.BoolVar(&c.Server.AdminInsecure, "admin-insecure", false, "run the admin API without a token when none is given (never on a shared network)")
	f.StringVar(&c.Server.AppAPIKey, "app-api-key", "", "bearer key the application endpoints (AuthZEN, Permit-compatible) require (default: $NEXUS_APP_API_KEY, else a key generated into <data-dir>/app-api-key)")
	f.StringVar(&c.AppAPIKeyFile, "app-api-key-file", "", "file holding the application API key (e.g. a mounted Secret)")
	f.BoolVar(&c.Server.AppAPIInsecure, "app-api-insecure", false, "run the application endpoints without a key when none is given: anyone who reaches the HTTP listener may ask for any decision")
	f.StringVar(&c.Server.PublicURL, "public-url", "", "base URL applications reach the HTTP listener at, for the AuthZEN metadata (default: from each request's Host)")
	f.StringVar(&c.DataDir, "data-dir", "./nexus-data", "directory of the relationship store")
	f.StringVar(&c.Policy, "policy", "", "policy bundle (.tar.gz) or directory of Rego and data (default: the embedded policy)")
	f.StringSliceVar(&c.PolicyIgnore, "policy-ignore", nil, "file and directory names to skip when loading --policy, as opa run's --ignore (e.g. '.*' skips dot-files and the ..data directory of a Kubernetes ConfigMap mount)")
	f.StringVar(&c.Schema, "schema", "", "schema YAML (default: the embedded drive schema)")
	f.StringVar(&c.TrustedSubjectHeader, "trusted-subject-header", "", "request header a trusted hop sets to the verified subject, used when no verified JWT came (default: none, JWT only)")
	f.StringSliceVarP(&c.Entrypoints, "entrypoint", "e", nil, "entrypoints to compile a --policy directory with (default: the envoy and authz entrypoints)")
	f.StringVar(&c.Core.EnvoyEntrypoint, "envoy-entrypoint", pdp.DefaultEnvoyEntrypoint, "entrypoint for ext_authz and forward-auth requests")
	f.StringVar(&c.Core.AuthzEntrypoint, "authz-entrypoint", pdp.DefaultAuthzEntrypoint, "entrypoint for AuthZEN and Permit checks")
	f.StringVar(&c.DecisionLog, "decision-log", "", `decision log: "stdout", "stderr" or a file path (default off)`)
	f.IntVar(&c.Core.CacheSize, "cache-size", pdp.DefaultCacheSize, "decision cache entries")
	f.BoolVar(&c.Core.CacheDisabled, "no-cache", false, "disable the decision cache")
	f.BoolVar(&c.WasmOnly, "wasm-only", false, "deprecated, no effect: every policy, the default one included, runs in Wasm")
	_ = f.MarkDeprecated("wasm-only", "every policy, the default one included, runs in Wasm")
	f.BoolVar(&c.Core.CacheNondeterministic, "cache-nondeterministic", false, "also cache decisions of policies that call non-deterministic builtins (time.now_ns, rand.intn, http.send, ...) or whose bundle does not say (opa build): one answer per input until the policy or the data changes, an opt-in like OPA's http.send cache option")
	f.DurationVar(&c.Core.EvalTimeout, "eval-timeout", pdp.DefaultEvalTimeout, "deadline of one evaluation")
	f.Int64Var(&c.Core.MaxBodyBytes, "max-body-bytes", pdp.DefaultMaxBodyBytes, "largest request body accepted")
	f.Int64Var(&c.BundleDataLimit, "bundle-data-limit", bundle.DefaultMaxDataBytes, "largest data.json a policy bundle may hold, in bytes (at --policy, downloaded, or uploaded to the admin API); a bundle's other files are bounded to 64 MiB each and 256 MiB in all")
	f.BoolVar(&c.Server.Reflection, "grpc-reflection", false, "register the gRPC reflection service")
	f.BoolVar(&c.HTTPStdOnly, "http-std-only", false, "deprecated, no effect: the HTTP listeners are always served by Go's net/http")
	_ = f.MarkDeprecated("http-std-only", "the HTTP listeners are always served by Go's net/http")
	f.IntVar(&c.Server.Limits.MaxConns, "max-conns", extauthz.DefaultMaxConns, "open connections per listener; beyond it a listener stops accepting until one closes (-1: no limit)")
	f.DurationVar(&c.Server.Limits.ReadHeaderTimeout, "read-header-timeout", extauthz.DefaultReadHeaderTimeout, "time an HTTP client has to send a request's head")
	f.DurationVar(&c.Server.Limits.RequestTimeout, "request-timeout", extauthz.DefaultRequestTimeout, "time an HTTP client has to send a whole request and nexus to answer it (not on the admin listener); also ends a gRPC call that names no deadline")
	f.DurationVar(&c.Server.Limits.IdleTimeout, "idle-timeout", extauthz.DefaultIdleTimeout, "an idle HTTP keep-alive connection is closed after this")
	f.IntVar(&c.Server.Limits.GRPCMaxStreams, "grpc-max-streams", extauthz.DefaultGRPCMaxStreams, "gRPC calls in flight on all connections; more are refused with RESOURCE_EXHAUSTED (each connection has at most 100)")
	f.BoolVar(&c.Server.Profiling, "pprof", false, "serve Go profiles under /debug/pprof/ on the admin listener")
	f.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	f.DurationVar(&c.ShutdownGrace, "shutdown-grace", 10*time.Second, "how long in-flight requests may take after SIGTERM")
	f.IntVar(&c.MaxInstances, "max-instances", 0, "policy instances (evaluations at once); 0 means GOMAXPROCS")
	f.IntVar(&c.ScrubRate, "scrub-rate", defaultScrubRate, "index keys a second the background scrub of the data file checks (0 disables it)")
	f.DurationVar(&c.ScrubInterval, "scrub-interval", defaultScrubInterval, "pause between two scrub passes over the data file (0 disables the scrub)")
	addClusterFlags(f, c)
}

func readServeConfig(path string) (serveConfig, error) {
	var c serveConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	if opaconfig.IsOPAConfig(b) {
		return readOPAServeConfig(path, b)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// mergeFlags fills c, which holds the flags' values, from the config
// file's settings: a setting the file gives (not zero) replaces the flag's
// default, and a flag given on cmd's command line wins over the file.
func mergeFlags(cmd *cobra.Command, c *serveConfig, file serveConfig) {
	overlay(reflect.ValueOf(c).Elem(), reflect.ValueOf(file))
	c.opa = file.opa
	merged := *c
	given := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addServeFlags(given, c) // binds to c's settings, and sets their defaults
	*c = merged
	cmd.Flags().Visit(func(f *pflag.Flag) {
		g := given.Lookup(f.Name)
		if g == nil {
			return // --config
		}
		if list, ok := f.Value.(pflag.SliceValue); ok {
			_ = g.Value.(pflag.SliceValue).Replace(list.GetSlice())
			return
		}
		_ = g.Value.Set(f.Value.String()) // a value the flag parsed before
	})
}

// overlay sets each exported field of dst, a struct, to src's where src's
// is not zero, through nested structs.
func overlay(dst, src reflect.Value) {
	for i := range src.NumField() {
		if !src.Type().Field(i).IsExported() {
			continue
		}
		s, d := src.Field(i), dst.Field(i)
		switch {
		case s.Kind() == reflect.Struct:
			overlay(d, s)
		case !s.IsZero() && d.CanSet():
			d.Set(s)
		}
	}
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("log level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

func runServe(ctx context.Context, c serveConfig, stderr io.Writer) error {
	start := time.Now()
	level, err := parseLevel(c.LogLevel)
	if err != nil {
		return err
	}
	log := newLogger(stderr, level, c.opa.LogFormat)
	if err := c.resolve(); err != nil {
		return err
	}
	warnOPA(log, c)
	if c.HTTPStdOnly {
		log.Warn("--http-std-only (http_std_only) is deprecated and has no effect: the HTTP listeners are always served by Go's net/http")
	}
	if c.WasmOnly {
		log.Warn("--wasm-only (wasm_only) is deprecated and has no effect: every policy, the default one included, runs in Wasm")
	}
	defer gctune.Tune(gctune.DefaultHeadroom, log).Stop()

	store, err := openStore(ctx, c, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := store.Close(); err != nil {
			log.Error("closing the store", "err", err)
		}
	}()
	token, tokenFile, err := adminToken(c, log)
	if err != nil {
		return err
	}
	appKey, appKeyFile, err := appAPIKey(c, log)
	if err != nil {
		return err
	}
	cl, err := startCluster(ctx, c, store, log)
	if err != nil {
		return err
	}
	defer cl.close()
	eng, err := builtins.NewEngine(ctx, store, engine.Config{Logger: log, MaxInstances: c.MaxInstances})
	if err != nil {
		return err
	}
	defer func() { _ = eng.Close(context.WithoutCancel(ctx)) }()
	ol, err := startOPALogging(c, log)
	if err != nil {
		return err
	}
	defer ol.closeAfter(ctx)
	bundle, err := cl.loadPolicy(ctx, c, log)
	if err != nil {
		return err
	}
	switch h := dataSubjectHeader(bundle.Data); {
	case c.TrustedSubjectHeader != "":
		log.Info("the subject header is trusted when no verified JWT comes with a request", "header", c.TrustedSubjectHeader)
	case h != "":
		log.Warn("the policy's own data trusts a subject header (data.nexus.subject_header); the default trusts none", "header", h)
	}
	var dlog io.Writer
	switch c.DecisionLog {
	case "":
	case "stdout":
		dlog = os.Stdout
	case "stderr":
		dlog = stderr
	default:
		f, err := os.OpenFile(c.DecisionLog, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("decision log: %w", err)
		}
		defer f.Close()
		dlog = f
	}
	core := c.core(eng, store, bundle, dlog, log)
	cfg := c.Server
	cfg.Store, cfg.AdminToken, cfg.AppAPIKey, cfg.BundleLimits, cfg.Logger = store, token, appKey, c.bundleLimits(), log
	if cl == nil {
		cfg.PolicySaver = &savedpolicy.File{Path: savedPolicyPath(c)}
	}
	var awaited *awaitedBundle
	if c.opa.AwaitBundle {
		awaited = &awaitedBundle{}
		cfg.Ready = awaited.ready
	}
	cl.configure(&core, &cfg)
	if cfg.Registerer == nil {
		reg := extauthz.NewRegistry()
		cfg.Registerer, cfg.Gatherer = reg, reg
	}
	core.Registerer = cfg.Registerer // /metrics serves the decision metrics too
	defer startScrub(ctx, store, c.ScrubRate, c.ScrubInterval, cfg.Registerer, log)()
	ol.apply(&core)
	// The command owns the decision core: the server serves it, and it is
	// closed (flushing the decision log) after the server has shut down.
	p, err := pdp.New(ctx, core)
	if err != nil {
		return err
	}
	defer func() { _ = p.Close(context.WithoutCancel(ctx)) }() // on the early returns; Close twice is none
	cfg.PDP = p
	srv, err := extauthz.New(cfg)
	if err != nil {
		return err
	}
	if err := cl.attach(ctx, p); err != nil {
		return err
	}
	bs, err := serveBundles(ctx, c, log, ol.reportLoads(awaited.loaded(p.Load)))
	if err != nil {
		return err
	}
	ol.bundlesFrom(bs)
	if err := srv.Start(ctx); err != nil {
		return err
	}
	ol.ready()
	log.Info("nexus ready", "startup", time.Since(start).Round(time.Millisecond), "policy_revision", bundle.Manifest.Revision, "data_dir", c.DataDir)
	if tokenFile != "" {
		log.Info("the admin API needs the token in "+tokenFile, "example", "curl -H \"Authorization: Bearer $(cat "+tokenFile+")\" http://"+c.Server.AdminAddr+"/v1/schema")
	}
	if appKeyFile != "" {
		log.Info("the application API needs the key in "+appKeyFile, "example", "curl -H \"Authorization: Bearer $(cat "+appKeyFile+")\" -H 'Content-Type: application/json' http://"+c.Server.HTTPAddr+"/access/v1/evaluation -d '{...}'")
	}
	var failed error
	select {
	case <-ctx.Done():
	case failed = <-srv.Failed():
		// A listener stopped for good: exit non-zero, so a supervisor
		// restarts the process rather than leave it half deaf.
	}
	grace := c.ShutdownGrace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	log.Info("shutting down", "grace", grace)
	err = srv.Shutdown(sctx)
	return errors.Join(failed, err, p.Close(sctx), ol.Close(sctx))
}

// openStore opens the store in the data directory. On first start (no
// schema yet) it writes the schema (--schema, or the embedded drive
// schema with its demo relationships). A --schema that differs from the
// stored one replaces it unless that would orphan tuples. A replica's
// store is only opened: it takes writes from the cluster's log alone.
func openStore(ctx context.Context, c serveConfig, log *slog.Logger) (*datastore.BoltStore, error) {
	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	store, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(c.DataDir, relDataFile), Logger: log})
	if err != nil {
		return nil, openHint(err, c.DataDir)
	}
	fail := func(err error) (*datastore.BoltStore, error) {
		_ = store.Close()
		return nil, err
	}
	if c.Cluster.enabled() {
		if err := checkReplicaStore(ctx, c, store); err != nil {
			return fail(err)
		}
		return store, nil
	}
	cur, err := store.Schema(ctx)
	if err != nil && !errors.Is(err, datastore.ErrNoSchema) {
		return fail(err)
	}
	switch {
	case c.Schema != "":
		sc, err := schemaChange(c.Schema, cur)
		if err != nil {
			return fail(err)
		}
		if sc == nil {
			break
		}
		if _, err := store.WriteSchema(ctx, sc, false); err != nil {
			return fail(err)
		}
		if cur != nil {
			log.Info("replaced the schema", "file", c.Schema)
		}
	case cur == nil:
		n, err := demo.Load(ctx, store)
		if err != nil {
			return fail(err)
		}
		log.Info("wrote the demo schema and relationships", "tuples", n)
	}
	return store, nil
}

// schemaChange reads the schema file and returns it parsed, or nil when
// it is cur (nil: no schema stored).
func schemaChange(file string, cur *schema.Schema) (*schema.Schema, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	if cur != nil && bytes.Equal(cur.Source(), src) {
		return nil, nil
	}
	return schema.Parse(src)
}

// loadPolicy compiles the embedded default policy, or loads --policy: a
// .rego file, a directory, an OPA bundle of Rego sources (opa build) or a
// compiled bundle (see policyload.Load).
func loadPolicy(ctx context.Context, c serveConfig) (*bundle.Bundle, error) {
	eps := c.compileEntrypoints()
	if c.opa.AwaitBundle {
		return denyAll(ctx, eps)
	}
	if c.Policy == "" {
		mods := map[string]string{}
		names, _ := fs.Glob(policy.FS, "*.rego") // the only error is a bad pattern
		for _, name := range names {
			b, err := policy.FS.ReadFile(name)
			if err != nil {
				return nil, err
			}
			mods[name] = string(b)
		}
		data, err := policy.FS.ReadFile("data.json")
		if err != nil {
			return nil, err
		}
		return compiler.Compile(ctx, compiler.Options{Modules: mods, DataJSON: data, Entrypoints: eps, OptionalEntrypoints: logRuleEntrypoints(c), Revision: "default-" + version.Get().Version})
	}
	return policyload.Load(ctx, c.Policy, policyload.Options{Entrypoints: eps, OptionalEntrypoints: logRuleEntrypoints(c), Ignore: c.PolicyIgnore, Limits: c.bundleLimits()})
}

// compileEntrypoints are the entrypoints to compile a policy for:
// --entrypoint, else the envoy and authz decisions, where set and not
// disabled.
func (c serveConfig) compileEntrypoints() []string {
	if len(c.Entrypoints) > 0 {
		return slices.Clone(c.Entrypoints)
	}
	var eps []string
	for _, ep := range []string{c.Core.EnvoyEntrypoint, c.Core.AuthzEntrypoint} {
		if ep != "" && ep != pdp.Disabled {
			eps = append(eps, ep)
		}
	}
	return eps
}

// core is the decision core's configuration: serve's settings of it, the
// policy bundle over the engine and the store, whose relationships the
// builtins read.
func (c serveConfig) core(eng *engine.Engine, store datastore.Store, b *bundle.Bundle, dlog io.Writer, log *slog.Logger) pdp.Config {
	core := c.Core
	core.Engine, core.Store, core.Policy, core.DecisionLog, core.Logger = eng, store, b, dlog, log
	core.Relations = store
	return core
}

// bundleLimits are the limits on a policy bundle's files: --bundle-data-limit
// for data.json, bundle's defaults for the rest.
func (c serveConfig) bundleLimits() bundle.Limits {
	return bundle.Limits{Data: c.BundleDataLimit, File: max(bundle.MaxFileBytes, c.BundleDataLimit)}
}

// savedPolicyPath is where a single node keeps the policy loaded through
// the admin API.
func savedPolicyPath(c serveConfig) string { return filepath.Join(c.DataDir, savedpolicy.Name) }

// singleNodePolicy is the policy a single node starts with, by
// precedence: --policy, then a bundle service (which replaces the start
// policy when its bundle arrives), then the policy last loaded through the
// admin API (PUT /v1/policy), then the embedded default. It logs which one
// and why. A saved admin policy that does not check out fails the start:
// falling back to another policy would silently change decisions.
func singleNodePolicy(ctx context.Context, c serveConfig, log *slog.Logger) (*bundle.Bundle, error) {
	saved := &savedpolicy.File{Path: savedPolicyPath(c)}
	ignored := func(why string) {
		if _, err := os.Stat(saved.Path); err == nil {
			log.Warn("the policy loaded through the admin API is not used: "+why, "file", saved.Path)
		}
	}
	switch {
	case c.Policy != "":
		log.Info("starting with the policy of --policy (it takes precedence over a bundle service, the admin API's saved policy and the embedded one)", "policy", c.Policy)
		ignored("--policy takes precedence")
		return loadPolicy(ctx, c)
	case c.opa.Config != nil && c.opa.Config.Bundles != nil:
		log.Info("the policy comes from the bundle service; until a bundle is loaded the start policy decides", "await_bundle", c.opa.AwaitBundle)
		ignored("a bundle service takes precedence")
		return loadPolicy(ctx, c)
	}
	s, err := saved.Read()
	if err != nil {
		return nil, err
	}
	if s == nil {
		log.Info("starting with the embedded default policy (no --policy, no bundle service, no policy loaded through the admin API)")
		return loadPolicy(ctx, c)
	}
	log.Warn("starting with the policy last loaded through the admin API (PUT /v1/policy), not the embedded one; --policy or a bundle service would take precedence",
		"policy_revision", s.Bundle.Manifest.Revision, "saved_at", s.SavedAt, "file", saved.Path)
	return s.Bundle, nil
}
