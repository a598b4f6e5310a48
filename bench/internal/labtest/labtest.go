// Package labtest starts a real nexus server (extauthz) inside a test
// process, for the lab's tests: the one place in this module that
// constructs a server. It reads the product's default policy and demo
// data from the product's source tree (this module lives in its bench/
// directory), and builds the decision core as nexus serve does.
//
//	b, err := labtest.DefaultBundle()
//	srv := labtest.Start(t, labtest.DemoStore(t), b, pdp.Config{}, extauthz.Config{AppAPIKey: key})
//	target := srv.GRPCAddr()
//
// # Caveats
//
// It finds the product's tree from this file's path at build time, so it
// works only in a checkout (go test), not from a module cache.
package labtest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/builtins"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/pdp"
)

// ProductDir is the product module's directory, or "" when this file's
// path is unknown.
func ProductDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return ""
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// Compile compiles files of fsys with the default entrypoints; data names
// the data file among them (or is empty). The load generator and the
// tests are the trusted hop: they send the subject in the x-user header,
// which the default policy accepts only when data.nexus.subject_header
// names it (nexus serve --trusted-subject-header x-user), so base data
// names it here.
func Compile(fsys fs.FS, files []string, data string, rev string) (*bundle.Bundle, error) {
	mods := map[string]string{}
	var dataJSON []byte
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, fmt.Errorf("labtest: %w", err)
		}
		if f == data {
			dataJSON = b
			continue
		}
		mods[f] = string(b)
	}
	return compiler.Compile(context.Background(), compiler.Options{
		Modules: mods, DataJSON: dataJSON, Revision: rev,
		Data:        map[string]any{"nexus": map[string]any{"subject_header": "x-user"}},
		Entrypoints: []string{pdp.DefaultEnvoyEntrypoint, pdp.DefaultAuthzEntrypoint},
	})
}

// DefaultBundle is the product's default policy
// (defaults/policy), compiled once by Compile.
var DefaultBundle = sync.OnceValues(func() (*bundle.Bundle, error) {
	dir := filepath.Join(ProductDir(), "defaults", "policy")
	return Compile(os.DirFS(dir), []string{"authz.rego", "envoy.rego", "data.json"}, "data.json", "default")
})

// DemoStore opens a store in a temporary directory holding the product's
// drive schema and demo tuples (defaults/drive), as nexus serve
// writes them on first start. Start closes it.
func DemoStore(tb testing.TB) *datastore.BoltStore {
	tb.Helper()
	ctx := context.Background()
	dir := filepath.Join(ProductDir(), "defaults", "drive")
	schemaSrc, err := os.ReadFile(filepath.Join(dir, "schema.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	tuples, err := os.Open(filepath.Join(dir, "tuples.txt"))
	if err != nil {
		tb.Fatal(err)
	}
	defer tuples.Close()
	sc, err := schema.Parse(schemaSrc)
	if err != nil {
		tb.Fatal(err)
	}
	store, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(tb.TempDir(), "nexus.db")})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := store.WriteSchema(ctx, sc, false); err != nil {
		_ = store.Close()
		tb.Fatal(err)
	}
	if _, err := store.Import(ctx, tuples, datastore.ImportOptions{Format: datastore.FormatText}); err != nil {
		_ = store.Close()
		tb.Fatal(err)
	}
	return store
}

// Server is a real extauthz server in the test process.
type Server struct {
	srv   *extauthz.Server
	pdp   *pdp.PDP
	store *datastore.BoltStore
	eng   *engine.Engine
	once  sync.Once
	err   error
}

// GRPCAddr is the ext_authz gRPC listener's address.
func (s *Server) GRPCAddr() string { return s.srv.Addr("grpc").String() }

// HTTPAddr is the HTTP listener's address.
func (s *Server) HTTPAddr() string { return s.srv.Addr("http").String() }

// MetricsURL is the admin listener's /metrics.
func (s *Server) MetricsURL() string { return "http://" + s.srv.Addr("admin").String() + "/metrics" }

// Stop shuts the server down and closes its decision core, engine and
// store.
func (s *Server) Stop(ctx context.Context) error {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		s.err = errors.Join(s.srv.Shutdown(ctx), s.pdp.Close(ctx), s.eng.Close(ctx), s.store.Close())
	})
	return s.err
}

// Start starts a server on store with policy b, the decision core's
// settings core (its Engine, Store, Policy and Relations, nexus serve's,
// are set here) and the server's cfg (its PDP and Store are set
// here; empty listener addresses become loopback port 0), stopped when the
// test ends. The server owns store.
func Start(tb testing.TB, store *datastore.BoltStore, b *bundle.Bundle, core pdp.Config, cfg extauthz.Config) *Server {
	tb.Helper()
	ctx := context.Background()
	eng, err := builtins.NewEngine(ctx, store, engine.Config{})
	if err != nil {
		_ = store.Close()
		tb.Fatal(err)
	}
	core.Engine, core.Store, core.Policy = eng, store, b
	core.Relations = store
	if cfg.Registerer == nil {
		reg := extauthz.NewRegistry()
		cfg.Registerer, cfg.Gatherer = reg, reg
	}
	core.Registerer = cfg.Registerer
	for _, a := range []*string{&cfg.GRPCAddr, &cfg.HTTPAddr, &cfg.AdminAddr} {
		if *a == "" {
			*a = "127.0.0.1:0"
		}
	}
	p, err := pdp.New(ctx, core)
	if err != nil {
		_ = eng.Close(ctx)
		_ = store.Close()
		tb.Fatal(err)
	}
	cfg.PDP, cfg.Store = p, store
	srv, err := extauthz.New(cfg)
	if err == nil {
		err = srv.Start(ctx)
	}
	if err != nil {
		_ = p.Close(ctx)
		_ = eng.Close(ctx)
		_ = store.Close()
		tb.Fatal(err)
	}
	s := &Server{srv: srv, pdp: p, store: store, eng: eng}
	tb.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}
