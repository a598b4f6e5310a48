package extauthz_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
)

const (
	certDir = "testdata/authzen-certification"
	certKey = "authzen-certification"
)

// certCase is one request of the certification scenario and what its
// answer must be (testdata/authzen-certification/scenario.json).
type certCase struct {
	ID          string          `json:"id"`
	Level       string          `json:"level"`
	What        string          `json:"what"`
	Method      string          `json:"method"`
	Path        string          `json:"path"`
	Body        json.RawMessage `json:"body"`
	Raw         *string         `json:"raw"`
	ContentType string          `json:"content_type"`
	RequestID   string          `json:"request_id"`
	Repeat      int             `json:"repeat"`
	Status      int             `json:"status"`
	Decision    *bool           `json:"decision"`
	Evaluations []*bool         `json:"evaluations"`
	Include     []string        `json:"results_include"`
	Exactly     []string        `json:"results_exactly"`
	SameAs      string          `json:"same_results_as"`
	FollowPages bool            `json:"follow_tokens"`
	Metadata    bool            `json:"metadata"`
}

// certServer serves the scenario's fixture over HTTPS: its schema and
// tuples in a real store, its policy compiled to Wasm, the AuthZEN
// endpoints on a TLS listener.
func certServer(t *testing.T) (base string, client *http.Client) {
	t.Helper()
	ctx := context.Background()
	store, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(t.TempDir(), "nexus.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	src, err := os.ReadFile(filepath.Join(certDir, "schema.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := schema.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.WriteSchema(ctx, sc, false); err != nil {
		t.Fatal(err)
	}
	tuples, err := os.ReadFile(filepath.Join(certDir, "tuples.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Import(ctx, bytes.NewReader(tuples), datastore.ImportOptions{Format: datastore.FormatText}); err != nil {
		t.Fatal(err)
	}
	rego, err := os.ReadFile(filepath.Join(certDir, "authz.rego"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := compiler.Compile(ctx, compiler.Options{Modules: map[string]string{"authz.rego": string(rego)}, Entrypoints: []string{pdp.DefaultAuthzEntrypoint}, Revision: "authzen-certification"})
	if err != nil {
		t.Fatal(err)
	}
	pki := newPKI(t)
	srv, _, err := testConfig{
		Config: extauthz.Config{
			Store: store, GRPCAddr: "-", AdminAddr: "-", HTTPAddr: "127.0.0.1:0",
			HTTPTLS:   extauthz.TLS{CertFile: pki.certFile, KeyFile: pki.keyFile},
			AppAPIKey: certKey,
		},
		Core: pdp.Config{Engine: fixture.StoreEngine(t, store), Policy: b, EnvoyEntrypoint: pdp.Disabled},
	}.build(t)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool}}}
	t.Cleanup(client.CloseIdleConnections)
	return "https://" + srv.Addr("http").String(), client
}

// TestAuthZENCertification runs the AuthZEN Authorization API 1.0
// certification scenario (Basic, Batch, Search and Discovery, Core and
// Properties) against a real server over HTTPS: every request, the
// status, the structure of every answer, and the decisions and search
// results the scenario fixes.
func TestAuthZENCertification(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(certDir, "scenario.json"))
	if err != nil {
		t.Fatal(err)
	}
	var scenario struct {
		Cases []certCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &scenario); err != nil {
		t.Fatal(err)
	}
	base, client := certServer(t)
	results := map[string][]string{} // search results by case id
	passed := map[string]int{}
	total := map[string]int{}
	for _, c := range scenario.Cases {
		total[c.Level]++
		ok := t.Run(c.ID+"/"+strings.ReplaceAll(c.What, " ", "_"), func(t *testing.T) {
			send := func(body []byte) (int, http.Header, []byte) {
				t.Helper()
				method := c.Method
				if method == "" {
					method = http.MethodPost
				}
				req, err := http.NewRequest(method, base+c.Path, bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if method == http.MethodPost {
					ct := c.ContentType
					if ct == "" {
						ct = "application/json"
					}
					req.Header.Set("Content-Type", ct)
				}
				req.Header.Set("Authorization", "Bearer "+certKey)
				if c.RequestID != "" {
					req.Header.Set("X-Request-ID", c.RequestID)
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				out, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				return resp.StatusCode, resp.Header, out
			}
			body := []byte(c.Body)
			if c.Raw != nil {
				body = []byte(*c.Raw)
			}
			status, h, out := send(body)
			if status != c.Status {
				t.Fatalf("status %d, want %d: %s", status, c.Status, out)
			}
			if got := h.Get("X-Request-ID"); got != c.RequestID {
				t.Fatalf("X-Request-ID %q, want %q", got, c.RequestID)
			}
			if status != 200 {
				return
			}
			if ct := h.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
			var doc map[string]any
			if err := json.Unmarshal(out, &doc); err != nil {
				t.Fatalf("answer is not a JSON object: %s", out)
			}
			switch {
			case c.Metadata:
				checkMetadata(t, base, doc)
			case strings.Contains(c.Path, "/search/"):
				kind := c.Path[strings.LastIndex(c.Path, "/")+1:]
				var req map[string]map[string]any
				_ = json.Unmarshal(c.Body, &req)
				wantType, _ := req[kind]["type"].(string)
				got := checkSearch(t, kind, wantType, doc)
				if c.FollowPages {
					for pages := 1; ; pages++ {
						next := doc["page"].(map[string]any)["next_token"].(string)
						if next == "" {
							break
						}
						if pages > 10 {
							t.Fatal("the pages do not end")
						}
						var q map[string]any
						_ = json.Unmarshal(c.Body, &q)
						q["page"].(map[string]any)["token"] = next
						nb, _ := json.Marshal(q)
						status, _, out := send(nb)
						if status != 200 {
							t.Fatalf("page %d: status %d: %s", pages+1, status, out)
						}
						doc = nil
						if err := json.Unmarshal(out, &doc); err != nil {
							t.Fatal(err)
						}
						if _, ok := doc["page"].(map[string]any); !ok {
							t.Fatalf("page %d has no page object: %s", pages+1, out)
						}
						got = append(got, checkSearch(t, kind, wantType, doc)...)
					}
				}
				for _, want := range c.Include {
					if !slices.Contains(got, want) {
						t.Fatalf("results %v lack %q", got, want)
					}
				}
				if c.Exactly != nil && !slices.Equal(got, c.Exactly) {
					t.Fatalf("results %v, want %v", got, c.Exactly)
				}
				sort.Strings(got)
				if c.SameAs != "" {
					if want, ok := results[c.SameAs]; !ok || !slices.Equal(got, want) {
						t.Fatalf("results %v, want those of %s: %v", got, c.SameAs, want)
					}
				}
				if _, seen := results[c.ID]; !seen {
					results[c.ID] = got
				}
			case c.Evaluations != nil:
				evs, ok := doc["evaluations"].([]any)
				if !ok || len(evs) != len(c.Evaluations) {
					t.Fatalf("want an evaluations array of %d: %s", len(c.Evaluations), out)
				}
				for i, e := range evs {
					d := checkDecision(t, e)
					if want := c.Evaluations[i]; want != nil && d != *want {
						t.Fatalf("evaluation %d: decision %v, want %v: %s", i, d, *want, out)
					}
				}
			default:
				for n := 0; ; n++ {
					d := checkDecision(t, doc)
					if c.Decision != nil && d != *c.Decision {
						t.Fatalf("decision %v, want %v: %s", d, *c.Decision, out)
					}
					if n+1 >= c.Repeat {
						break
					}
					if _, _, out = send(body); json.Unmarshal(out, &doc) != nil {
						t.Fatalf("repeat %d: %s", n+1, out)
					}
				}
			}
		})
		if ok {
			passed[c.Level]++
		}
	}
	for _, l := range []string{"basic-core", "basic-properties", "batch-core", "batch-properties", "search-core", "search-properties", "discovery"} {
		t.Logf("%-17s %d/%d requests as the scenario wants", l, passed[l], total[l])
	}
}

// checkDecision requires a Decision object: a boolean decision and, if
// present, an object context.
func checkDecision(t *testing.T, v any) bool {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("a decision is not an object: %v", v)
	}
	d, ok := m["decision"].(bool)
	if !ok {
		t.Fatalf("decision is not a boolean: %v", m)
	}
	if c, has := m["context"]; has {
		if _, ok := c.(map[string]any); !ok {
			t.Fatalf("context is not an object: %v", m)
		}
	}
	return d
}

// checkSearch requires a search answer: a results array of entities of
// wantType with ids (or actions with names), and a page object with a
// string next_token if there is a page. It returns the ids or names.
func checkSearch(t *testing.T, kind, wantType string, doc map[string]any) []string {
	t.Helper()
	rs, ok := doc["results"].([]any)
	if !ok {
		t.Fatalf("results is not an array: %v", doc)
	}
	if p, has := doc["page"]; has {
		pm, ok := p.(map[string]any)
		if !ok {
			t.Fatalf("page is not an object: %v", doc)
		}
		if _, ok := pm["next_token"].(string); !ok {
			t.Fatalf("page.next_token is not a string: %v", doc)
		}
	}
	out := []string{}
	for _, r := range rs {
		m, _ := r.(map[string]any)
		if kind == "action" {
			name, _ := m["name"].(string)
			if name == "" {
				t.Fatalf("an action result without a name: %v", r)
			}
			out = append(out, name)
			continue
		}
		typ, _ := m["type"].(string)
		id, _ := m["id"].(string)
		if typ != wantType || id == "" {
			t.Fatalf("result %v: want type %q and an id", r, wantType)
		}
		out = append(out, id)
	}
	return out
}

// checkMetadata requires the PDP metadata: policy_decision_point is the
// base URL asked, every endpoint an https URL under it.
func checkMetadata(t *testing.T, base string, doc map[string]any) {
	t.Helper()
	if doc["policy_decision_point"] != base {
		t.Fatalf("policy_decision_point %v, want %s", doc["policy_decision_point"], base)
	}
	if _, ok := doc["access_evaluation_endpoint"]; !ok {
		t.Fatal("no access_evaluation_endpoint")
	}
	for k, v := range doc {
		if !strings.HasSuffix(k, "_endpoint") {
			continue
		}
		s, _ := v.(string)
		u, err := url.Parse(s)
		if err != nil || u.Scheme != "https" || !strings.HasPrefix(s, base+"/") {
			t.Fatalf("%s = %v: want an https URL under %s", k, v, base)
		}
	}
	if caps, has := doc["capabilities"]; has {
		if _, ok := caps.([]any); !ok {
			t.Fatalf("capabilities is not an array: %v", caps)
		}
	}
}
