package pdp

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// The envoy entrypoint t/result puts the clock in a header; the authz
// entrypoint t/decision gives a random reason, or, in the deterministic
// variant, the subject.
const (
	clockPolicy = `package t
import rego.v1
result := {"allowed": true, "headers": {"x-now": sprintf("%d", [time.now_ns()])}}
decision := {"allow": true, "reason": sprintf("r%d", [rand.intn("k", 1000000000)])}
`
	steadyPolicy = `package t
import rego.v1
result := {"allowed": true, "headers": {"x-user": object.get(input.attributes.request.http.headers, "x-user", "")}}
decision := {"allow": true, "reason": input.subject.id}
`
	mixedPolicy = `package t
import rego.v1
result := {"allowed": true, "headers": {"x-now": sprintf("%d", [time.now_ns()])}}
decision := {"allow": true, "reason": input.subject.id}
`
)

func compileT(t *testing.T, src string) *bundle.Bundle {
	t.Helper()
	b, err := compiler.Compile(context.Background(), compiler.Options{
		Modules: map[string]string{"t.rego": src}, Entrypoints: []string{"t/result", "t/decision"}, Revision: "t",
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// unrecorded is b as opa build would have written it: no record of the
// builtins its entrypoints reach.
func unrecorded(b *bundle.Bundle) *bundle.Bundle {
	nb := *b
	nb.Manifest.Metadata = map[string]any{}
	for k, v := range b.Manifest.Metadata {
		if k != bundle.MetadataNondeterministic {
			nb.Manifest.Metadata[k] = v
		}
	}
	return &nb
}

// TestNondeterministicBypassesCache: two identical requests to an
// entrypoint whose policy reads the clock or randomness get two answers,
// neither from the cache, unless the configuration opts in; a policy that
// reads neither is cached as before.
func TestNondeterministicBypassesCache(t *testing.T) {
	tests := []struct {
		name       string
		bundle     *bundle.Bundle
		optIn      bool
		wantEnvoy  string // Cache of the second decision
		wantAuthz  string
		sameEnvoy  bool // the two answers are equal
		sameReason bool
	}{
		{"clock and random", compileT(t, clockPolicy), false, CacheDisabled, CacheDisabled, false, false},
		{"clock and random, opted in", compileT(t, clockPolicy), true, CacheHit, CacheHit, true, true},
		{"deterministic", compileT(t, steadyPolicy), false, CacheHit, CacheHit, true, true},
		{"per entrypoint", compileT(t, mixedPolicy), false, CacheDisabled, CacheHit, false, true},
		{"a bundle that does not say", unrecorded(compileT(t, steadyPolicy)), false, CacheDisabled, CacheDisabled, true, true},
		{"a bundle that does not say, opted in", unrecorded(compileT(t, steadyPolicy)), true, CacheHit, CacheHit, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			store := fixture.DemoStore(t)
			p, err := New(ctx, Config{
				Engine: fixture.StoreEngine(t, store), Store: store, Policy: tt.bundle,
				EnvoyEntrypoint: "t/result", AuthzEntrypoint: "t/decision",
				CacheNondeterministic: tt.optIn,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close(ctx) })

			req := fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob"})
			var envoy [2]Decision
			for i := range envoy {
				if envoy[i], err = p.Envoy(ctx, IfaceGRPC, req); err != nil {
					t.Fatal(err)
				}
			}
			if envoy[1].Cache != tt.wantEnvoy {
				t.Errorf("second Envoy decision: cache %s, want %s", envoy[1].Cache, tt.wantEnvoy)
			}
			if h0, h1 := headerOf(envoy[0], "x-now")+headerOf(envoy[0], "x-user"), headerOf(envoy[1], "x-now")+headerOf(envoy[1], "x-user"); (h0 == h1) != tt.sameEnvoy || h0 == "" {
				t.Errorf("headers %q then %q; want them equal: %v", h0, h1, tt.sameEnvoy)
			}

			c := &Check{Subject: Subject{Type: "user", ID: "bob"}, Action: "read", Resource: Resource{Type: "file", ID: "report.pdf"}}
			var authz [2]Decision
			for i := range authz {
				if authz[i], err = p.Check(ctx, IfaceAuthZEN, c); err != nil {
					t.Fatal(err)
				}
			}
			if authz[1].Cache != tt.wantAuthz {
				t.Errorf("second check: cache %s, want %s", authz[1].Cache, tt.wantAuthz)
			}
			if (authz[0].Reason == authz[1].Reason) != tt.sameReason {
				t.Errorf("reasons %q then %q; want them equal: %v", authz[0].Reason, authz[1].Reason, tt.sameReason)
			}
		})
	}
}

func headerOf(d Decision, key string) string {
	for _, h := range d.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return ""
}

// TestNondeterministicLoggedOnce: loading a bundle says which builtins
// keep which entrypoint out of the cache, once: not again when a schema
// change reloads the same bundle.
func TestNondeterministicLoggedOnce(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	store := fixture.DemoStore(t)
	p, err := New(ctx, Config{
		Engine: fixture.StoreEngine(t, store), Store: store, Policy: compileT(t, mixedPolicy),
		EnvoyEntrypoint: "t/result", AuthzEntrypoint: "t/decision",
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(ctx) })
	if err := p.Load(ctx, nil); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if n := strings.Count(out, "bypass the decision cache"); n != 1 || !strings.Contains(out, "entrypoint=t/result builtins=[time.now_ns]") {
		t.Fatalf("log after a load and a reload (want one line naming t/result and time.now_ns):\n%s", out)
	}
	if strings.Contains(out, "t/decision") {
		t.Fatalf("the deterministic entrypoint is named in the log:\n%s", out)
	}
	if err := p.Load(ctx, unrecorded(compileT(t, steadyPolicy))); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); strings.Count(out, "does not say") != 2 {
		t.Fatalf("log after loading a bundle that does not say (want a warning per entrypoint):\n%s", out)
	}
}
