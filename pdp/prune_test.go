package pdp_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/defaults/policy"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
	"github.com/nexuspdp/nexus/pdp/internal/input"
	"github.com/nexuspdp/nexus/pdp/internal/prune"
)

// TestPrunedInputSameDecision evaluates the default policy on the full
// input document and on the pruned one: the results must be identical.
func TestPrunedInputSameDecision(t *testing.T) {
	ts := newFixture(t)
	ctx := context.Background()
	b, err := fixture.DefaultBundle()
	if err != nil {
		t.Fatal(err)
	}
	paths, ok := b.Manifest.InputPaths(b.Data)
	if !ok {
		t.Fatal("the default policy's input paths are unknown: it would not be pruned")
	}
	tree := prune.New(paths)
	eng := fixture.LoadedEngine(t, ts.store, b)
	reqs := []*authv3.CheckRequest{
		fixture.EnvoyRequest("GET", "/tenants/acme/files/report.pdf", map[string]string{"x-user": "alice"}),
		fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob", "x-request-id": "5f0c1e2a"}),
		fixture.EnvoyRequest("PUT", "/files/report.pdf", map[string]string{"x-user": "bob"}),
		fixture.EnvoyRequest("GET", "/files/anything", map[string]string{"x-user": "erin", "x-tenant": "acme"}),
		fixture.EnvoyRequest("GET", "/files/report.pdf", nil),
		fixture.EnvoyRequest("GET", "/nowhere?x=1", map[string]string{"x-user": "alice"}),
	}
	for _, r := range reqs {
		full, err := input.AppendEnvoy(nil, r, input.Options{})
		if err != nil {
			t.Fatal(err)
		}
		pruned, err := tree.Append(nil, full)
		if err != nil {
			t.Fatal(err)
		}
		// The headers the policy names in data are kept, no others: a
		// request id must not make every request a new cache key.
		if bytes.Contains(full, []byte("x-request-id")) && bytes.Contains(pruned, []byte("x-request-id")) {
			t.Fatalf("pruned input keeps a header the policy does not read: %s", pruned)
		}
		if bytes.Contains(full, []byte(`"x-user"`)) && !bytes.Contains(pruned, []byte(`"x-user"`)) {
			t.Fatalf("pruned input lost the subject header: %s", pruned)
		}
		if len(pruned) >= len(full) {
			t.Fatalf("pruning kept %d of %d bytes", len(pruned), len(full))
		}
		a, errA := eng.Eval(ctx, policy.EnvoyEntrypoint, full, nil)
		p, errP := eng.Eval(ctx, policy.EnvoyEntrypoint, pruned, nil)
		if string(a) != string(p) || (errA == nil) != (errP == nil) {
			t.Fatalf("%s %s: full input gives %s (%v), pruned gives %s (%v)", r.Attributes.Request.Http.Method, r.Attributes.Request.Http.Path, a, errA, p, errP)
		}
	}
}

// TestPrunePerEntrypoint: the input is pruned for the rules the
// entrypoint reaches. A rule nothing reaches that reads the body does not
// get it parsed (a malformed body is decided, not refused); a rule of
// another package reached through a function gets it parsed (refused).
// What the authz entrypoint (t/decision) reads does not count for the
// envoy one.
func TestPrunePerEntrypoint(t *testing.T) {
	ctx := context.Background()
	const lib = "package lib\nimport rego.v1\nbody_ok(x) if input.parsed_body.ok == x\n"
	for _, tt := range []struct {
		name, module string
		parsed       bool
	}{
		{"unreached", "package t\nimport rego.v1\nallow if input.attributes.request.http.method == \"POST\"\nunused if input.parsed_body.ok\ndecision := {\"allow\": input.parsed_body.ok}\n", false},
		{"through-function", "package t\nimport rego.v1\nallow if { input.attributes.request.http.method == \"POST\"; not data.lib.body_ok(false) }\ndecision := {\"allow\": true}\n", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := compiler.Compile(ctx, compiler.Options{
				Modules:     map[string]string{"t.rego": tt.module, "lib.rego": lib},
				Entrypoints: []string{"t/allow", "t/decision"},
			})
			if err != nil {
				t.Fatal(err)
			}
			store := fixture.DemoStore(t)
			p, err := pdp.New(ctx, pdp.Config{Engine: fixture.StoreEngine(t, store), Store: store, Policy: b, EnvoyEntrypoint: "t/allow", AuthzEntrypoint: "t/decision"})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(ctx)
			req := fixture.EnvoyRequest("POST", "/x", map[string]string{"content-type": "application/json"})
			req.Attributes.Request.Http.Body = "{not json"
			d, err := p.Envoy(ctx, pdp.IfaceGRPC, req)
			if tt.parsed {
				if !errors.Is(err, input.ErrInvalidBody) {
					t.Fatalf("decision %+v, %v; want the body refused (the policy reads it)", d, err)
				}
				return
			}
			if err != nil || !d.Allowed {
				t.Fatalf("decision %+v, %v; want allowed, the body unread", d, err)
			}
		})
	}
}
