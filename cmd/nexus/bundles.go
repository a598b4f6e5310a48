package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	opabundle "github.com/open-policy-agent/opa/v1/bundle"
	"go.yaml.in/yaml/v3"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/internal/bundlesync"
	"github.com/nexuspdp/nexus/internal/opaconfig"
)

// opaBundles is what serve takes from an OPA configuration file to fetch
// bundles: the services, and the bundles and keys sections as JSON.
type opaBundles struct {
	Services map[string]*opaconfig.Service
	Bundles  json.RawMessage
	Keys     json.RawMessage
}

// opaSectionsRead are the sections of an OPA configuration serve reads.
var opaSectionsRead = []string{"services", "bundles", "keys"}

// readOPABundles reads an OPA configuration file (YAML or JSON) for its
// services, bundles and keys. Any other section is refused by name: nexus
// does not run it, and a setting silently ignored would mislead.
func readOPABundles(path string) (opaBundles, error) {
	var out opaBundles
	raw, err := os.ReadFile(path)
	if err != nil {
		return out, fmt.Errorf("opa config: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return out, fmt.Errorf("opa config %s: %w", path, err)
	}
	var others []string
	for k := range doc {
		if !slices.Contains(opaSectionsRead, k) {
			others = append(others, k)
		}
	}
	if len(others) > 0 {
		sort.Strings(others)
		return out, fmt.Errorf("opa config %s: %s: %w (nexus serve reads %s)", path, strings.Join(others, ", "), opaconfig.ErrUnsupported, strings.Join(opaSectionsRead, ", "))
	}
	section := func(k string) (json.RawMessage, error) {
		v, ok := doc[k]
		if !ok {
			return nil, nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("opa config %s: %s: %w", path, k, err)
		}
		return b, nil
	}
	svcs, err := section("services")
	if err != nil {
		return out, err
	}
	if out.Services, err = opaconfig.ParseServices(svcs); err != nil {
		return out, fmt.Errorf("opa config %s: %w", path, err)
	}
	if out.Bundles, err = section("bundles"); err != nil {
		return out, err
	}
	if out.Keys, err = section("keys"); err != nil {
		return out, err
	}
	return out, nil
}

// startBundles starts keeping the configured bundles up to date: each new
// bundle is compiled when it holds Rego (for the entrypoints), given the
// trusted subject header, and loaded with load; the last good one keeps
// serving when one fails. Persisted bundles live under
// <dataDir>/bundles/<name>/. It returns nil when no bundle is configured.
func startBundles(ctx context.Context, cfg opaBundles, dataDir string, entrypoints []string, subjectHeader string, log *slog.Logger, load func(context.Context, *bundle.Bundle) error) (*bundlesync.Syncer, error) {
	srcs, err := bundlesync.ParseConfig(cfg.Bundles, cfg.Keys, cfg.Services)
	if err != nil {
		return nil, fmt.Errorf("opa config: %w", err)
	}
	if len(srcs) == 0 {
		return nil, nil
	}
	s, err := bundlesync.New(bundlesync.Options{
		Sources: srcs,
		Dir:     filepath.Join(dataDir, "bundles"),
		Compile: func(ctx context.Context, raw []byte) (*bundle.Bundle, error) {
			b, err := compileFetched(ctx, raw, entrypoints)
			if err != nil {
				return nil, err
			}
			return trustSubjectHeader(b, subjectHeader)
		},
		OnBundle: load,
		Logger:   log.With("component", "bundles"),
	})
	if err != nil {
		return nil, err
	}
	for _, src := range srcs {
		log.Info("fetching the policy bundle", "bundle", src.Name, "service", src.Service.Name, "resource", src.Resource, "signed", src.Signed(), "persist", src.Persist)
	}
	go s.Run(ctx)
	return s, nil
}

// compileFetched turns a downloaded archive into a bundle: one holding
// policy.wasm is used as it is; an OPA bundle of Rego sources and data
// (opa build) is compiled for the entrypoints, keeping its revision and
// roots.
func compileFetched(ctx context.Context, raw []byte, entrypoints []string) (*bundle.Bundle, error) {
	ob, err := opabundle.NewReader(bytes.NewReader(raw)).WithSkipBundleVerification(true).Read()
	if err != nil {
		return nil, err
	}
	if len(ob.WasmModules) > 0 {
		return bundle.Read(bytes.NewReader(raw))
	}
	mods := make(map[string]string, len(ob.Modules))
	for _, m := range ob.Modules {
		mods[m.Path] = string(m.Raw)
	}
	data, err := json.Marshal(ob.Data)
	if err != nil {
		return nil, err
	}
	var roots []string
	if ob.Manifest.Roots != nil && !(len(*ob.Manifest.Roots) == 1 && (*ob.Manifest.Roots)[0] == "") {
		roots = *ob.Manifest.Roots
	}
	return compiler.Compile(ctx, compiler.Options{
		Modules: mods, DataJSON: data, Entrypoints: entrypoints,
		Revision: ob.Manifest.Revision, Roots: roots,
		RegoV0: ob.Manifest.RegoVersion != nil && *ob.Manifest.RegoVersion == 0,
	})
}

// serveBundles starts the bundles of serve's --opa-config, if any, into
// load (the server's LoadPolicy).
func serveBundles(ctx context.Context, c serveConfig, log *slog.Logger, load func(context.Context, *bundle.Bundle) error) (*bundlesync.Syncer, error) {
	if c.OPAConfig == "" {
		return nil, nil
	}
	cfg, err := readOPABundles(c.OPAConfig)
	if err != nil {
		return nil, err
	}
	eps := c.Entrypoints
	if len(eps) == 0 {
		eps = []string{c.EnvoyEntrypoint, c.AuthzEntrypoint}
	}
	return startBundles(ctx, cfg, c.DataDir, eps, c.TrustedSubjectHeader, log, load)
}
