package extauthz_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/defaults/policy"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
	"github.com/nexuspdp/nexus/policytest"
)

// The policy suite (bench/suite/policies, see its README): each directory
// is a policy users write for Envoy, with requests and the decision each
// must get. TestSuite holds nexus and OPA to those decisions;
// BenchmarkSuite times both on each policy's chosen request.

const (
	suiteDir  = "../bench/suite/policies"
	suiteRoot = ".."
	// suiteEntrypoint is opa-envoy-plugin's default decision path.
	suiteEntrypoint = "envoy/authz/allow"
)

// suiteManifest is a policy directory's suite.json.
type suiteManifest struct {
	// From is a directory of the repository (from its root) holding the
	// policy (.rego files and data.json) and its requests as the
	// compatibility suite writes them (NAME.request.json, with
	// NAME.response.json or NAME.error): the expected decision is the
	// response's status, allow or deny; requests with an error are left
	// out. Empty: the policy is in the suite's directory, and its cases
	// in Cases.
	From string `json:"from"`
	// Default is nexus' default policy (with the demo store), decided at
	// its Envoy entrypoint.
	Default bool `json:"default"`
	// Cases is the directory of the cases (NAME.json), relative to the
	// policy's directory; empty means "cases".
	Cases string `json:"cases"`
	// Bench names the case the benchmarks run.
	Bench string `json:"bench"`
}

// suiteCase is one request and the decision it must get.
type suiteCase struct {
	name string
	req  *authv3.CheckRequest
	// decision is the policy's whole result, when the case gives it;
	// allowed is what it says (or the compatibility response's status).
	decision any
	allowed  bool
	// ownCase is a case of the suite's own format, which must give the
	// decision.
	ownCase bool
}

type suitePolicy struct {
	name     string
	manifest suiteManifest
	modules  map[string]string
	data     []byte
	cases    []suiteCase
	bench    *suiteCase
}

func loadSuite(tb testing.TB) []*suitePolicy {
	tb.Helper()
	dirs, err := filepath.Glob(filepath.Join(suiteDir, "*", "suite.json"))
	if err != nil || len(dirs) == 0 {
		tb.Fatalf("no policies under %s (%v)", suiteDir, err)
	}
	var out []*suitePolicy
	for _, m := range dirs {
		dir := filepath.Dir(m)
		p := &suitePolicy{name: filepath.Base(dir), modules: map[string]string{}}
		readJSON(tb, m, &p.manifest)
		src := dir
		if p.manifest.From != "" {
			src = filepath.Join(suiteRoot, p.manifest.From)
		}
		if !p.manifest.Default {
			files, _ := filepath.Glob(filepath.Join(src, "*.rego"))
			if len(files) == 0 {
				tb.Fatalf("%s: no .rego in %s", p.name, src)
			}
			for _, f := range files {
				p.modules[filepath.Base(f)] = string(readFile(tb, f))
			}
			if b, err := os.ReadFile(filepath.Join(src, "data.json")); err == nil {
				p.data = b
			} else if !os.IsNotExist(err) {
				tb.Fatal(err)
			}
		}
		if p.manifest.From != "" {
			p.cases = compatCases(tb, src)
		} else {
			cdir := p.manifest.Cases
			if cdir == "" {
				cdir = "cases"
			}
			p.cases = ownCases(tb, filepath.Join(dir, cdir))
		}
		for i := range p.cases {
			if p.cases[i].name == p.manifest.Bench {
				p.bench = &p.cases[i]
			}
		}
		if len(p.cases) == 0 || p.bench == nil {
			tb.Fatalf("%s: %d cases, bench case %q not among them", p.name, len(p.cases), p.manifest.Bench)
		}
		out = append(out, p)
	}
	return out
}

func readFile(tb testing.TB, f string) []byte {
	tb.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func readJSON(tb testing.TB, f string, v any) {
	tb.Helper()
	if err := json.Unmarshal(readFile(tb, f), v); err != nil {
		tb.Fatalf("%s: %v", f, err)
	}
}

// ownCases reads the suite's own cases: {"request": CheckRequest in
// protojson, "decision": the policy's result}.
func ownCases(tb testing.TB, dir string) []suiteCase {
	tb.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	var out []suiteCase
	for _, f := range files {
		var raw struct {
			Request  json.RawMessage `json:"request"`
			Decision json.RawMessage `json:"decision"`
		}
		readJSON(tb, f, &raw)
		c := suiteCase{name: strings.TrimSuffix(filepath.Base(f), ".json"), req: &authv3.CheckRequest{}, ownCase: true}
		if err := protojson.Unmarshal(raw.Request, c.req); err != nil {
			tb.Fatalf("%s: request: %v", f, err)
		}
		if err := json.Unmarshal(raw.Decision, &c.decision); err != nil {
			tb.Fatalf("%s: decision: %v", f, err)
		}
		c.allowed = decisionAllowed(c.decision)
		out = append(out, c)
	}
	return out
}

// compatCases reads a compatibility suite's requests that get a
// response: allowed when its status is OK.
func compatCases(tb testing.TB, dir string) []suiteCase {
	tb.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.response.json"))
	var out []suiteCase
	for _, f := range files {
		base := strings.TrimSuffix(f, ".response.json")
		c := suiteCase{name: filepath.Base(base), req: &authv3.CheckRequest{}}
		if err := protojson.Unmarshal(readFile(tb, base+".request.json"), c.req); err != nil {
			tb.Fatalf("%s: %v", base, err)
		}
		resp := &authv3.CheckResponse{}
		if err := protojson.Unmarshal(readFile(tb, f), resp); err != nil {
			tb.Fatalf("%s: %v", f, err)
		}
		c.allowed = resp.GetStatus().GetCode() == 0
		out = append(out, c)
	}
	return out
}

// decisionAllowed is what opa-envoy-plugin reads from a result: a
// boolean, or an object's "allowed".
func decisionAllowed(v any) bool {
	switch d := v.(type) {
	case bool:
		return d
	case map[string]any:
		b, _ := d["allowed"].(bool)
		return b
	}
	return false
}

// suiteRig is one policy served by nexus (cache off) and prepared for
// OPA's evaluator.
type suiteRig struct {
	ts  *testServer
	opa rego.PreparedEvalQuery
}

func newSuiteRig(tb testing.TB, p *suitePolicy) *suiteRig {
	tb.Helper()
	ctx := context.Background()
	r := &suiteRig{}
	entrypoint := suiteEntrypoint
	if p.manifest.Default {
		entrypoint = policy.EnvoyEntrypoint
	}
	r.ts = newTestServer(tb, func(c *testConfig) {
		c.Core.CacheDisabled = true
		c.Core.DecisionLog = nil
		if p.manifest.Default {
			return // fixture.Bundle, the default policy
		}
		b, err := compiler.Compile(ctx, compiler.Options{Modules: p.modules, DataJSON: p.data, Entrypoints: []string{suiteEntrypoint}, Revision: p.name})
		if err != nil {
			tb.Fatalf("compile %s: %v", p.name, err)
		}
		c.Core.Policy = b
		c.Core.EnvoyEntrypoint = suiteEntrypoint
		c.Core.AuthzEntrypoint = pdp.Disabled
	})

	modules, data := p.modules, p.data
	var opts []func(*rego.Rego)
	if p.manifest.Default {
		// OPA runs the default policy's Rego with nexus' builtins in Go
		// over the same store, on the data the server loads.
		modules = map[string]string{}
		for _, f := range []string{"authz.rego", "envoy.rego"} {
			b, err := fs.ReadFile(policy.FS, f)
			if err != nil {
				tb.Fatal(err)
			}
			modules[f] = string(b)
		}
		sc, err := r.ts.store.Schema(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		if data, err = pdp.PolicyData(fixture.Bundle(tb).Data, sc); err != nil {
			tb.Fatal(err)
		}
		opts = policytest.RegoBuiltins(r.ts.store)
	}
	doc := map[string]any{}
	if len(data) > 0 {
		if err := json.Unmarshal(data, &doc); err != nil {
			tb.Fatalf("%s: data: %v", p.name, err)
		}
	}
	names := make([]string, 0, len(modules))
	for n := range modules {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		opts = append(opts, rego.Module(n, modules[n]))
	}
	opts = append(opts, rego.Query("data."+strings.ReplaceAll(entrypoint, "/", ".")), rego.Store(inmem.NewFromObject(doc)))
	pq, err := rego.New(opts...).PrepareForEval(ctx)
	if err != nil {
		tb.Fatalf("%s: OPA: %v", p.name, err)
	}
	r.opa = pq
	return r
}

// opaConverted is what opa-envoy-plugin does with a CheckRequest: its
// input map, OPA's value of it, and the evaluation. ok is false when the
// plugin refuses the request (a deny).
func (r *suiteRig) opaConverted(ctx context.Context, req *authv3.CheckRequest) (v any, ok bool, err error) {
	in, err := pluginInput(req)
	if err != nil {
		return nil, false, nil
	}
	val, err := ast.InterfaceToValue(in)
	if err != nil {
		return nil, false, err
	}
	return r.opaParsed(ctx, val)
}

// opaParsed evaluates OPA on input already in OPA's form.
func (r *suiteRig) opaParsed(ctx context.Context, in ast.Value) (any, bool, error) {
	rs, err := r.opa.Eval(ctx, rego.EvalParsedInput(in))
	if err != nil {
		return nil, false, err
	}
	if len(rs) != 1 {
		return nil, false, fmt.Errorf("undefined decision")
	}
	return rs[0].Expressions[0].Value, true, nil
}

// TestSuite: for every policy of the suite and each of its requests,
// nexus' decision (uncached) and OPA's, on the input opa-envoy-plugin
// builds from the request, are the request's expected decision; where
// the case gives the whole result, OPA's is that result and nexus'
// response carries its status, headers and body.
func TestSuite(t *testing.T) {
	ctx := context.Background()
	for _, p := range loadSuite(t) {
		t.Run(p.name, func(t *testing.T) {
			r := newSuiteRig(t, p)
			for _, c := range p.cases {
				t.Run(c.name, func(t *testing.T) {
					got, ok, err := r.opaConverted(ctx, c.req)
					if err != nil {
						t.Fatalf("OPA: %v", err)
					}
					if ok && decisionAllowed(got) != c.allowed {
						t.Errorf("OPA decides %v, want allowed=%v", jsonText(got), c.allowed)
					}
					if !ok && c.allowed {
						t.Errorf("the plugin refuses the request, want an allow")
					}
					if c.ownCase && c.decision == nil {
						t.Fatalf("the case gives no decision (OPA's: %s)", jsonText(got))
					}
					if c.decision != nil && ok && !reflect.DeepEqual(normJSON(t, got), normJSON(t, c.decision)) {
						t.Errorf("OPA's result %s, want %s", jsonText(got), jsonText(c.decision))
					}
					resp, err := r.ts.srv.CheckDirect(ctx, c.req)
					if err != nil {
						t.Fatalf("nexus: %v", err)
					}
					if allowed(resp) != c.allowed {
						t.Fatalf("nexus answers %v, want allowed=%v", protojson.Format(resp), c.allowed)
					}
					if obj, isObj := c.decision.(map[string]any); isObj {
						if msg := responseMatches(resp, obj); msg != "" {
							t.Errorf("nexus' response %v: %s", protojson.Format(resp), msg)
						}
					}
				})
			}
		})
	}
}

// responseMatches says how resp differs from the object result d as the
// plugin maps it ("" when it does not): the denial's HTTP status (403
// when d has none) and body, and each of d's headers and response
// headers to add.
func responseMatches(resp *authv3.CheckResponse, d map[string]any) string {
	has := func(list any, key, value string) bool {
		b, _ := json.Marshal(list)
		var hs []struct {
			Header struct{ Key, Value string } `json:"header"`
		}
		_ = json.Unmarshal(b, &hs)
		for _, h := range hs {
			if h.Header.Key == key && h.Header.Value == value {
				return true
			}
		}
		return false
	}
	headers := func(name string) map[string]any { m, _ := d[name].(map[string]any); return m }
	if dr := resp.GetDeniedResponse(); dr != nil {
		want := 403.0
		if s, ok := d["http_status"].(float64); ok {
			want = s
		}
		if float64(dr.GetStatus().GetCode()) != want {
			return fmt.Sprintf("HTTP status %d, want %v", dr.GetStatus().GetCode(), want)
		}
		if body, _ := d["body"].(string); dr.GetBody() != body {
			return fmt.Sprintf("body %q, want %q", dr.GetBody(), body)
		}
		for k, v := range headers("headers") {
			if !has(dr.GetHeaders(), k, fmt.Sprint(v)) {
				return "no header " + k
			}
		}
		return ""
	}
	ok := resp.GetOkResponse()
	for k, v := range headers("headers") {
		if !has(ok.GetHeaders(), k, fmt.Sprint(v)) {
			return "no header " + k
		}
	}
	for k, v := range headers("response_headers_to_add") {
		if !has(ok.GetResponseHeadersToAdd(), k, fmt.Sprint(v)) {
			return "no response header " + k
		}
	}
	return ""
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// normJSON is v as JSON would carry it, numbers as json.Number.
func normJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var out any
	if err := d.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// BenchmarkSuite times each policy of the suite on its chosen request:
// nexus' ext_authz handler in process with the decision cache off
// (nexus), OPA's evaluator on the input already in OPA's form
// (opa-preparsed: evaluation only), and OPA with the input converted from
// the CheckRequest as opa-envoy-plugin converts it (opa-converted: what
// the plugin pays per check before its gRPC answer). Each sub-benchmark
// first checks that its answer is the expected one.
func BenchmarkSuite(b *testing.B) {
	ctx := context.Background()
	for _, p := range loadSuite(b) {
		r := newSuiteRig(b, p)
		c := p.bench
		in, err := pluginInput(c.req)
		if err != nil {
			b.Fatalf("%s: %v", p.name, err)
		}
		parsed, err := ast.InterfaceToValue(in)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(p.name+"/nexus", func(b *testing.B) {
			if resp, err := r.ts.srv.CheckDirect(ctx, c.req); err != nil || allowed(resp) != c.allowed {
				b.Fatalf("nexus: %v, %v; want allowed=%v", resp, err, c.allowed)
			}
			b.ReportAllocs()
			cpu0 := fixture.ProcessCPU()
			for b.Loop() {
				if _, err := r.ts.srv.CheckDirect(ctx, c.req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(fixture.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
		b.Run(p.name+"/opa-preparsed", func(b *testing.B) {
			if v, ok, err := r.opaParsed(ctx, parsed); err != nil || !ok || decisionAllowed(v) != c.allowed {
				b.Fatalf("OPA: %v, %v; want allowed=%v", v, err, c.allowed)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := r.opaParsed(ctx, parsed); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(p.name+"/opa-converted", func(b *testing.B) {
			if v, ok, err := r.opaConverted(ctx, c.req); err != nil || !ok || decisionAllowed(v) != c.allowed {
				b.Fatalf("OPA: %v, %v; want allowed=%v", v, err, c.allowed)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := r.opaConverted(ctx, c.req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSuiteDump writes, when NEXUS_SUITE_DUMP names a directory, each
// policy's benchmark request twice: POLICY.request.json, the CheckRequest
// in protojson (what Envoy sends nexus), and POLICY.input.json, {"input":
// the document opa-envoy-plugin builds from it} (what a client of OPA's
// REST API sends). scripts/bench-suite-served.sh serves both.
func TestSuiteDump(t *testing.T) {
	dir := os.Getenv("NEXUS_SUITE_DUMP")
	if dir == "" {
		t.Skip("NEXUS_SUITE_DUMP is not set")
	}
	for _, p := range loadSuite(t) {
		in, err := pluginInput(p.bench.req)
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		doc, err := json.Marshal(map[string]any{"input": in})
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		req, err := protojson.Marshal(p.bench.req)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p.name+".input.json"), doc, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p.name+".request.json"), req, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
