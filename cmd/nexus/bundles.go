package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	bundlesync "github.com/nexuspdp/nexus/opacompat/bundles"
	"github.com/nexuspdp/nexus/policyload"
)

// serveBundles starts keeping the bundles of serve's OPA configuration
// (its bundles, keys and services sections) up to date, if it has any:
// each new bundle is compiled when it holds Rego (for the entrypoints),
// given the trusted subject header, and loaded with load (the server's
// LoadPolicy); the last good one keeps serving when one fails. Persisted
// bundles live under <data-dir>/bundles/<name>/. It returns nil when no
// bundle is configured.
func serveBundles(ctx context.Context, c serveConfig, log *slog.Logger, load func(context.Context, *bundle.Bundle) error) (*bundlesync.Syncer, error) {
	cfg := c.opa.Config
	if cfg == nil || cfg.Bundles == nil {
		return nil, nil
	}
	srcs, err := bundlesync.ParseConfig(cfg.Bundles, cfg.Keys, cfg.Services)
	if err != nil {
		return nil, fmt.Errorf("opa config: %w", err)
	}
	if len(srcs) == 0 {
		return nil, nil
	}
	entrypoints := c.compileEntrypoints()
	s, err := bundlesync.New(bundlesync.Options{
		Sources: srcs,
		Dir:     filepath.Join(c.DataDir, "bundles"),
		Compile: func(ctx context.Context, raw []byte) (*bundle.Bundle, error) {
			b, err := policyload.FromTarGz(ctx, bytes.NewReader(raw), policyload.Options{Entrypoints: entrypoints, OptionalEntrypoints: logRuleEntrypoints(c), Limits: c.bundleLimits()})
			if err != nil {
				return nil, err
			}
			return trustSubjectHeader(b, c.TrustedSubjectHeader)
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
	// A bundle kept by an earlier run decides from the start.
	if err := s.LoadPersisted(ctx); err == nil {
		for _, st := range s.Status() {
			if st.ActiveRevision != "" {
				log.Info("loaded the persisted policy bundle", "bundle", st.Name, "revision", st.ActiveRevision)
			}
		}
	}
	go s.Run(ctx)
	return s, nil
}

// awaitedBundle tracks, when the policy comes from a bundle server alone,
// whether a bundle is active yet.
type awaitedBundle struct{ active atomic.Bool }

// ready is the server's extra readiness check.
func (a *awaitedBundle) ready() error {
	if !a.active.Load() {
		return errors.New("waiting for the first policy bundle")
	}
	return nil
}

// loaded wraps the server's LoadPolicy so that a successful load marks
// the bundle active. A nil awaitedBundle returns load itself.
func (a *awaitedBundle) loaded(load func(context.Context, *bundle.Bundle) error) func(context.Context, *bundle.Bundle) error {
	if a == nil {
		return load
	}
	return func(ctx context.Context, b *bundle.Bundle) error {
		if err := load(ctx, b); err != nil {
			return err
		}
		a.active.Store(true)
		return nil
	}
}

var regoIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// denyAll is the policy that decides until the first bundle arrives: each
// entrypoint a/b/c is "default c := false" in package a.b, which every
// interface answers with a denial.
func denyAll(ctx context.Context, entrypoints []string) (*bundle.Bundle, error) {
	pkgs := map[string][]string{}
	for _, ep := range entrypoints {
		segs := strings.Split(ep, "/")
		if len(segs) < 2 {
			return nil, fmt.Errorf("decision %q: a policy from a bundle server needs a decision inside a package (a/b/allow)", ep)
		}
		for _, s := range segs {
			if !regoIdent.MatchString(s) {
				return nil, fmt.Errorf("decision %q: give a policy path to start with; %q is not a Rego name", ep, s)
			}
		}
		pkg := strings.Join(segs[:len(segs)-1], ".")
		pkgs[pkg] = append(pkgs[pkg], segs[len(segs)-1])
	}
	mods := map[string]string{}
	for pkg, rules := range pkgs {
		var src strings.Builder
		src.WriteString("package " + pkg + "\n\n")
		for _, r := range rules {
			src.WriteString("default " + r + " := false\n")
		}
		mods["awaiting-bundle/"+pkg+".rego"] = src.String()
	}
	return compiler.Compile(ctx, compiler.Options{Modules: mods, Entrypoints: entrypoints, Revision: "awaiting-bundle"})
}
