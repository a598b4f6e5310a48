package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"go.yaml.in/yaml/v3"

	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
	"github.com/nexuspdp/nexus/pdp"
)

// opaSettings are the serve settings that come from an OPA configuration
// file or from nexus run's opa run flags, have no flag of nexus serve and
// are no setting of the decision core or the server. (Those that are, as
// opa run's --diagnostic-addr and the envoy_ext_authz_grpc plugin's
// settings, are set in serveConfig.Core and Server.)
type opaSettings struct {
	// AwaitBundle: no policy was given and the bundles section brings it;
	// every check is denied, and the server is not ready, until the first
	// bundle is active.
	AwaitBundle bool
	// PolicyIsBundle: nexus run's --bundle named the policy path a bundle,
	// so decision log events name it in their bundles as OPA does.
	PolicyIsBundle bool
	// LogFormat is "text" (nexus' default) or "json".
	LogFormat string
	// Labels are the configuration's labels, which identify this instance
	// in status reports and decision logs uploaded to a service.
	Labels map[string]string
	// Config is the whole OPA configuration (services, and the bundles,
	// keys, decision_logs and status sections as written); nil when serve
	// read nexus' own YAML.
	Config *opaconfig.Config
	// MissingEnv are the ${VAR} references of the configuration whose
	// variable is not set, warned about at start.
	MissingEnv []string
}

// readOPAServeConfig reads an OPA configuration file as serve's settings.
func readOPAServeConfig(path string, raw []byte) (serveConfig, error) {
	cfg, err := opaconfig.Parse(raw)
	if err != nil {
		return serveConfig{}, fmt.Errorf("config %s: %w", path, err)
	}
	c, err := serveFromOPA(cfg, false)
	if err != nil {
		return serveConfig{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// serveFromOPA maps an OPA configuration onto serve's settings: the
// nexus section first, then what OPA's sections say. A setting given both
// ways must agree: one setting chooses, never two silently. run is set
// for nexus run (opa run's defaults: no admin listener, and no ext_authz
// listener unless the plugin is configured).
func serveFromOPA(cfg *opaconfig.Config, run bool) (serveConfig, error) {
	var c serveConfig
	if cfg.Nexus != nil {
		dec := yaml.NewDecoder(bytes.NewReader(cfg.Nexus)) // JSON is YAML
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
			return c, fmt.Errorf("nexus: %w", err)
		}
	}
	if err := managementSections(cfg); err != nil {
		return c, err
	}
	c.opa.Labels = cfg.Labels
	c.opa.Config = cfg
	c.opa.MissingEnv = cfg.MissingEnv
	if cfg.PersistenceDirectory != "" {
		// OPA keeps what must survive a restart there; so does nexus'
		// data directory.
		if err := agree(&c.DataDir, cfg.PersistenceDirectory, "persistence_directory", "nexus.data_dir"); err != nil {
			return c, err
		}
	}
	if run && c.Server.AdminAddr == "" {
		c.Server.AdminAddr = "-" // opa run has no admin API: nexus' is opted into
	}
	p := cfg.Envoy
	if p == nil {
		if run && c.Server.GRPCAddr == "" {
			c.Server.GRPCAddr = "-" // as OPA without the plugin: no ext_authz server
		}
		return c, nil
	}
	where := "plugins." + opaconfig.PluginName
	if err := agree(&c.Server.GRPCAddr, p.Addr, where+".addr", "nexus.grpc_addr"); err != nil {
		return c, err
	}
	if err := agree(&c.Core.EnvoyEntrypoint, p.Entrypoint, where+".path", "nexus.envoy_entrypoint"); err != nil {
		return c, err
	}
	// An opa-envoy-plugin policy has no application decision: the AuthZEN
	// and Permit-compatible checks stay off unless the nexus section names
	// one.
	c.Core.AuthzEntrypoint = cmp.Or(c.Core.AuthzEntrypoint, pdp.Disabled)
	c.Entrypoints = c.compileEntrypoints()
	if c.Server.Reflection && !p.EnableReflection {
		return c, fmt.Errorf("nexus.reflection and %s.enable-reflection disagree: set it once", where)
	}
	c.Server.Reflection = p.EnableReflection
	c.Core.DryRun = p.DryRun
	c.Core.SkipRequestBodyParse = p.SkipRequestBodyParse
	c.Server.GRPCMaxRecvMsgSize = p.GRPCMaxRecvMsgSize
	// The plugin bounds a request body by the gRPC message alone: nexus'
	// body limit (1 MiB by default) would refuse bodies the plugin reads.
	c.Core.MaxBodyBytes = cmp.Or(c.Core.MaxBodyBytes, int64(p.GRPCMaxRecvMsgSize))
	c.Server.GRPCMaxSendMsgSize = p.GRPCMaxSendMsgSize
	c.Server.PerformanceMetrics = p.EnablePerformanceMetrics
	c.Server.PerformanceMetricsBuckets = p.GRPCRequestDurationSecondsBuckets
	return c, nil
}

// agree sets *dst to v unless the nexus section already set it to
// something else, which is an error naming both settings.
func agree(dst *string, v, opaName, nexusName string) error {
	if *dst != "" && *dst != v {
		return fmt.Errorf("%s %q and %s %q disagree: set it once", opaName, v, nexusName, *dst)
	}
	*dst = v
	return nil
}

// managementSections refuses the sections of OPA's management APIs that
// nexus does not read yet: OPA's deprecated single bundle. The bundles
// and keys sections are read by the bundle downloader (bundles.go), the
// decision_logs and status sections by startOPALogging.
func managementSections(cfg *opaconfig.Config) error {
	if cfg.Bundle != nil {
		return errors.New("bundle: not supported yet by nexus: write it as a bundles section (bundles.<name>.service, resource, ...)")
	}
	return checkOPALogSections(cfg)
}

// newLogger is serve's operational logger: text (nexus' default) or JSON
// lines (opa run --log-format json).
func newLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// warnOPA logs what an OPA configuration asks to be told at start.
func warnOPA(log *slog.Logger, c serveConfig) {
	if len(c.opa.MissingEnv) > 0 {
		log.Warn("the configuration names environment variables that are not set; their ${...} references are kept as written, as OPA keeps them", "variables", strings.Join(c.opa.MissingEnv, ","))
	}
	if c.Core.DryRun {
		log.Warn("dry-run: every ext_authz gRPC request is allowed; the decision log records the policy's decisions")
	}
}
