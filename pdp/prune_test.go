package pdp_test

import (
	"bytes"
	"context"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/nexuspdp/nexus/internal/defaults/policy"
	"github.com/nexuspdp/nexus/internal/fixture"
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
