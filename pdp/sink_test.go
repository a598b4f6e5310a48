package pdp_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
)

type recorder struct {
	mu   sync.Mutex
	recs []*pdp.DecisionRecord
}

func (r *recorder) Record(rec *pdp.DecisionRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
}

// TestDecisionSink: the sink gets each decision's ID, path, input and raw
// result, from the cache as from an evaluation; the log rules are
// evaluated only when the bundle has them; without a sink the core keeps
// no raw result.
func TestDecisionSink(t *testing.T) {
	ctx := context.Background()
	b, err := compiler.Compile(ctx, compiler.Options{
		Modules: map[string]string{
			"e.rego": "package envoy.authz\n\nallow := {\"allowed\": true, \"headers\": {\"x-seen\": input.attributes.request.http.path}, \"extra\": [1, 2]}\n",
			"a.rego": "package app\n\ndecision := {\"allow\": true}\n",
			"m.rego": "package system.log\n\nmask contains \"/input/attributes\" if input.path == \"envoy/authz/allow\"\n",
		},
		Entrypoints:         []string{"envoy/authz/allow", "app/decision"},
		OptionalEntrypoints: []string{pdp.DefaultMaskDecision, pdp.DefaultDropDecision},
		Revision:            "r9",
	})
	if err != nil {
		t.Fatal(err)
	}
	store := fixture.DemoStore(t)
	eng := fixture.StoreEngine(t, store)
	rec := &recorder{}
	p, err := pdp.New(ctx, pdp.Config{Engine: eng, Store: store, Policy: b, EnvoyEntrypoint: "envoy/authz/allow", AuthzEntrypoint: "app/decision", DecisionSink: rec})
	if err != nil {
		t.Fatal(err)
	}
	req := fixture.EnvoyRequest("GET", "/files/x", nil)
	var ids []string
	for range 2 { // a miss, then a hit
		d, err := p.Envoy(ctx, pdp.IfaceGRPC, req)
		if err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		ids = append(ids, d.ID)
	}
	if len(rec.recs) != 2 {
		t.Fatalf("%d records", len(rec.recs))
	}
	for i, r := range rec.recs {
		if r.ID != ids[i] || r.Path != "envoy/authz/allow" || r.Revision != "r9" || r.Interface != pdp.IfaceGRPC || r.ErrorCode != "" || r.HandlerNanos < r.EvalNanos || r.EvalNanos <= 0 {
			t.Fatalf("record %d: %+v", i, r)
		}
		var res map[string]any
		if err := json.Unmarshal(r.Result, &res); err != nil || res["extra"] == nil || res["headers"].(map[string]any)["x-seen"] != "/files/x" {
			t.Fatalf("record %d: result %s", i, r.Result)
		}
		// The policy reads the path alone; the log gets the whole input
		// document, as OPA logs it.
		var in struct {
			Attributes struct {
				Request struct {
					HTTP struct {
						Method, Path string
					} `json:"http"`
				} `json:"request"`
			} `json:"attributes"`
			ParsedPath []string `json:"parsed_path"`
		}
		if err := json.Unmarshal(r.Input, &in); err != nil || in.Attributes.Request.HTTP.Method != "GET" || in.Attributes.Request.HTTP.Path != "/files/x" || len(in.ParsedPath) != 2 {
			t.Fatalf("record %d: input %s", i, r.Input)
		}
	}
	if rec.recs[0].Cache != pdp.CacheMiss || rec.recs[1].Cache != pdp.CacheHit {
		t.Fatalf("cache %s, %s", rec.recs[0].Cache, rec.recs[1].Cache)
	}
	mask, err := p.LogMask(ctx, []byte(`{"path":"envoy/authz/allow"}`))
	if err != nil || string(mask) != `["/input/attributes"]` {
		t.Fatalf("mask %s, %v", mask, err)
	}
	if mask, err := p.LogMask(ctx, []byte(`{"path":"other"}`)); err != nil || string(mask) != `[]` {
		t.Fatalf("mask of another path %s, %v", mask, err)
	}
	// The bundle has no drop rule: nothing is dropped, nothing evaluated.
	if drop, err := p.LogDrop(ctx, []byte(`{}`)); drop || err != nil {
		t.Fatalf("drop %v, %v", drop, err)
	}

	// Without a sink, no raw result is kept.
	q, err := pdp.New(ctx, pdp.Config{Engine: fixture.StoreEngine(t, store), Store: store, Policy: b, EnvoyEntrypoint: "envoy/authz/allow", AuthzEntrypoint: "app/decision"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := q.Envoy(ctx, pdp.IfaceGRPC, req)
	if err != nil || d.Raw != nil {
		t.Fatalf("raw %s, %v", d.Raw, err)
	}
}
