package extauthz_test

// The adversarial test of the default policy over the real server (issue
// 12): random worlds of tenants, folders in parent chains, files, groups,
// tenant roles, stored tenants and direct grants, written to a real bbolt
// store; requests over real gRPC ext_authz, forward auth over HTTP and
// the application APIs, whose claimed tenant, path shape, subject header,
// JWT and method are mutated. The reference model in
// adversary_model_test.go decides each expected answer: nothing it denies
// may be allowed, and the two must agree on (nearly) every request.
//
// Explore more worlds with
//
//	go test ./extauthz -run TestAdversarialDefaultPolicy -adversary.seed=1000 -adversary.worlds=200 -adversary.requests=300
//
// or NEXUS_ADVERSARY_SEED=1000; a failure names the seed of its world.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/defaults/drive"
	"github.com/nexuspdp/nexus/defaults/policy"
	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
)

var (
	advSeed     = flag.Uint64("adversary.seed", 0, "first world seed of the adversarial test (0: the fixed seeds 1..worlds; also NEXUS_ADVERSARY_SEED)")
	advWorlds   = flag.Int("adversary.worlds", 20, "worlds in the adversarial test")
	advRequests = flag.Int("adversary.requests", 300, "requests per world in the adversarial test")
)

// advTrustedHeader is the subject header fixture.DefaultBundle trusts.
const advTrustedHeader = "x-user"

func TestAdversarialDefaultPolicy(t *testing.T) {
	start := time.Now()
	rules := advLoadRules(t)
	env := newAdvEnv(t)
	first := *advSeed
	if first == 0 {
		if s := os.Getenv("NEXUS_ADVERSARY_SEED"); s != "" {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("NEXUS_ADVERSARY_SEED: %v", err)
			}
			first = n
		}
	}
	if first == 0 {
		first = 1
	}
	worlds := *advWorlds
	if testing.Short() && !advFlagSet("adversary.worlds") {
		worlds = 4
	}
	t.Logf("setup: %v; worlds %d to %d, %d requests each", time.Since(start).Round(time.Millisecond), first, first+uint64(worlds)-1, *advRequests)
	var tally advTally
	var prev []advTuple
	for w := range worlds {
		seed := first + uint64(w)
		world := advGenWorld(rules, seed)
		env.writeWorld(t, prev, world.tuples)
		prev = world.tuples
		reqs := advGenRequests(world, seed, *advRequests)
		results := env.run(t, reqs)
		for i, r := range reqs {
			tally.add(world, seed, i, r, results[i])
		}
	}
	tally.report(t, time.Since(start))
}

func advFlagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// advEnv is the system under test: one bbolt store holding the drive
// schema, and two servers over it with the default policy, one trusting
// the x-user header (as nexus serve --trusted-subject-header x-user),
// one trusting no header (as nexus serve with no flag).
type advEnv struct {
	store     *datastore.BoltStore
	trusted   advServer
	untrusted advServer
	client    *http.Client
}

type advServer struct {
	grpc authv3.AuthorizationClient
	http string
}

func newAdvEnv(t *testing.T) *advEnv {
	t.Helper()
	ctx := context.Background()
	store, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(t.TempDir(), "relations.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	sc, err := schema.Parse(drive.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.WriteSchema(ctx, sc, false); err != nil {
		t.Fatal(err)
	}
	env := &advEnv{store: store, client: &http.Client{
		Timeout: time.Minute,
		// A redirect is the answer: a proxy does not follow it.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	env.trusted = startAdvServer(t, store, fixture.Bundle(t))
	env.untrusted = startAdvServer(t, store, advUntrustingBundle(t))
	return env
}

// advUntrustingBundle is the default policy as nexus serve compiles it
// without --trusted-subject-header: no subject header is trusted.
func advUntrustingBundle(t *testing.T) *bundle.Bundle {
	t.Helper()
	mods, err := fixture.Modules(policy.FS)
	if err != nil {
		t.Fatal(err)
	}
	data, err := policy.FS.ReadFile("data.json")
	if err != nil {
		t.Fatal(err)
	}
	b, err := compiler.Compile(context.Background(), compiler.Options{
		Modules: mods, DataJSON: data, Revision: "adversary-untrusting",
		Entrypoints: []string{policy.EnvoyEntrypoint, policy.AuthzEntrypoint},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func startAdvServer(t *testing.T, store *datastore.BoltStore, b *bundle.Bundle) advServer {
	t.Helper()
	ctx := context.Background()
	srv, _, err := testConfig{
		Config: extauthz.Config{Store: store, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", AdminAddr: "-", AppAPIInsecure: true},
		Core:   pdp.Config{Engine: fixture.StoreEngine(t, store), Policy: b},
	}.build(t)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	conn, err := grpc.NewClient(srv.Addr("grpc").String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return advServer{grpc: authv3.NewAuthorizationClient(conn), http: "http://" + srv.Addr("http").String()}
}

// writeWorld replaces the tuples of the previous world with next in one
// write, and checks that the store holds exactly what the model holds.
func (e *advEnv) writeWorld(t *testing.T, prev, next []advTuple) {
	t.Helper()
	ctx := context.Background()
	conv := func(ts []advTuple) []api.Tuple {
		out := make([]api.Tuple, len(ts))
		for i, x := range ts {
			out[i] = api.Tuple{
				Object: api.Object{Type: x.objType, ID: x.objID}, Relation: x.rel,
				Subject: api.Subject{Type: x.sub.typ, ID: x.sub.id, Relation: x.sub.rel},
			}
		}
		return out
	}
	if _, err := e.store.Write(ctx, datastore.WriteRequest{Deletes: conv(prev)}); err != nil {
		t.Fatalf("deleting the previous world: %v", err)
	}
	if _, err := e.store.Write(ctx, datastore.WriteRequest{Touches: conv(next)}); err != nil {
		t.Fatalf("writing the world: %v", err)
	}
	got, err := e.store.Read(ctx, datastore.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, x := range next {
		want[x.String()] = true
	}
	if len(got) != len(want) {
		t.Fatalf("the store holds %d tuples, the model %d", len(got), len(want))
	}
	for _, x := range got {
		if !want[x.String()] {
			t.Fatalf("the store holds %s, the model does not", x)
		}
	}
}

// advReq is one generated request: a proxied request (over gRPC or
// forward auth) or a body for an application API holding one or more
// checks.
type advReq struct {
	kind string // see advKinds
	note string // the mutations applied, for messages

	// Proxied requests.
	method  string
	path    string
	headers [][2]string      // as sent, in order; HTTP may repeat a key
	jwts    []map[string]any // gRPC: the jwt_authn metadata entries (nil: none)

	// Application requests: the body and the checks it holds.
	body   string
	checks []advAppCheck
}

// advAppCheck is one application check and whether its request is
// malformed (then the model expects a deny whatever the check says).
type advAppCheck struct {
	check     advCheck
	malformed string
}

// The request kinds and their weights.
var advKinds = []struct {
	kind   string
	weight int
}{
	{"grpc", 30}, {"grpc-untrusted", 8},
	{"fwd-nginx", 9}, {"fwd-caddy", 5}, {"fwd-envoy", 7}, {"fwd-untrusted", 4},
	{"allowed", 14}, {"authzen", 14}, {"allowed-bulk", 4}, {"authzen-batch", 5},
}

func (r *advReq) proxied() bool {
	return strings.HasPrefix(r.kind, "grpc") || strings.HasPrefix(r.kind, "fwd")
}

// advResult is what nexus answered: one decision per check (one for a
// proxied request), and a description.
type advResult struct {
	allowed []bool
	answer  string
	status  int // HTTP status (of the denial for gRPC); 0 if none
}

// run sends the requests on a few workers; results[i] answers reqs[i].
func (e *advEnv) run(t *testing.T, reqs []*advReq) []advResult {
	t.Helper()
	results := make([]advResult, len(reqs))
	var wg sync.WaitGroup
	next := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				results[i] = e.send(t, reqs[i])
			}
		})
	}
	for i := range reqs {
		next <- i
	}
	close(next)
	wg.Wait()
	return results
}

func (e *advEnv) send(t *testing.T, r *advReq) advResult {
	srv := e.trusted
	if strings.HasSuffix(r.kind, "untrusted") {
		srv = e.untrusted
	}
	switch r.kind {
	case "grpc", "grpc-untrusted":
		return e.sendGRPC(t, srv, r)
	case "fwd-nginx", "fwd-caddy", "fwd-envoy", "fwd-untrusted":
		return e.sendForward(t, srv, r)
	default:
		return e.sendApp(t, srv, r)
	}
}

func (e *advEnv) sendGRPC(t *testing.T, srv advServer, r *advReq) advResult {
	h := map[string]string{}
	for _, kv := range r.headers {
		h[kv[0]] = kv[1]
	}
	req := fixture.EnvoyRequest(r.method, r.path, h)
	if r.jwts != nil {
		fields := map[string]any{}
		for i, p := range r.jwts {
			fields["provider"+strconv.Itoa(i)] = p
		}
		md, err := structpb.NewStruct(fields)
		if err != nil {
			t.Errorf("metadata: %v", err)
			return advResult{allowed: []bool{false}, answer: "test error"}
		}
		req.Attributes.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.filters.http.jwt_authn": md}}
	}
	resp, err := srv.grpc.Check(context.Background(), req)
	if err != nil {
		return advResult{allowed: []bool{false}, answer: "gRPC error " + err.Error()}
	}
	if resp.GetStatus().GetCode() == 0 {
		return advResult{allowed: []bool{true}, answer: "OK " + advHeader(resp.GetOkResponse().GetHeaders(), "x-nexus-decision")}
	}
	den := resp.GetDeniedResponse()
	return advResult{
		allowed: []bool{false}, status: int(den.GetStatus().GetCode()),
		answer: fmt.Sprintf("denied %d %s", den.GetStatus().GetCode(), advShort(den.GetBody())),
	}
}

func advHeader(hs []*corev3.HeaderValueOption, key string) string {
	for _, h := range hs {
		if h.GetHeader().GetKey() == key {
			return h.GetHeader().GetValue()
		}
	}
	return ""
}

func advShort(s string) string {
	if len(s) > 160 {
		return s[:160] + "..."
	}
	return s
}

func (e *advEnv) sendForward(t *testing.T, srv advServer, r *advReq) advResult {
	method, target := http.MethodGet, srv.http+"/ext_authz"
	var hdrs [][2]string
	switch r.kind {
	case "fwd-nginx", "fwd-untrusted":
		hdrs = append(hdrs, [2]string{"X-Original-URI", r.path}, [2]string{"X-Original-Method", r.method})
	case "fwd-caddy":
		target += "/"
		hdrs = append(hdrs, [2]string{"X-Forwarded-Uri", r.path}, [2]string{"X-Forwarded-Method", r.method}, [2]string{"X-Forwarded-Host", "drive.example.com"})
	case "fwd-envoy":
		method = r.method
	}
	req, err := http.NewRequest(method, target, nil)
	if err != nil {
		t.Errorf("%s: %v", r.kind, err)
		return advResult{allowed: []bool{false}, answer: "test error"}
	}
	if r.kind == "fwd-envoy" {
		// The proxied path as it is, appended as Envoy's http_service
		// does: the client must not re-encode it.
		p, q, hasQ := strings.Cut(r.path, "?")
		req.URL.Opaque = "/ext_authz" + p
		req.URL.RawQuery, req.URL.ForceQuery = q, hasQ && q == ""
	}
	for _, kv := range append(hdrs, r.headers...) {
		req.Header.Add(kv[0], kv[1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return advResult{allowed: []bool{false}, answer: "HTTP error " + err.Error()}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return advResult{
		allowed: []bool{resp.StatusCode == http.StatusOK}, status: resp.StatusCode,
		answer: fmt.Sprintf("%d %s %s", resp.StatusCode, resp.Header.Get("X-Nexus-Decision"), advShort(string(body))),
	}
}

func (e *advEnv) sendApp(t *testing.T, srv advServer, r *advReq) advResult {
	paths := map[string]string{
		"allowed": "/allowed", "allowed-bulk": "/allowed/bulk",
		"authzen": "/access/v1/evaluation", "authzen-batch": "/access/v1/evaluations",
	}
	deny := func(answer string, status int) advResult {
		return advResult{allowed: make([]bool, len(r.checks)), answer: answer, status: status}
	}
	resp, err := e.client.Post(srv.http+paths[r.kind], "application/json", strings.NewReader(r.body))
	if err != nil {
		return deny("HTTP error "+err.Error(), 0)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	answer := fmt.Sprintf("%d %s", resp.StatusCode, advShort(string(body)))
	if resp.StatusCode != http.StatusOK {
		return deny(answer, resp.StatusCode)
	}
	out := advResult{answer: answer, status: resp.StatusCode}
	var one struct {
		Allow    *bool `json:"allow"`
		Decision *bool `json:"decision"`
	}
	switch r.kind {
	case "allowed", "authzen":
		if err := json.Unmarshal(body, &one); err != nil {
			t.Errorf("%s: %v: %s", r.kind, err, body)
			return deny(answer, 0)
		}
		a := one.Allow
		if r.kind == "authzen" {
			a = one.Decision
		}
		out.allowed = []bool{a != nil && *a}
	case "allowed-bulk":
		var bulk struct {
			Allow []struct {
				Allow bool `json:"allow"`
			} `json:"allow"`
		}
		if err := json.Unmarshal(body, &bulk); err != nil || len(bulk.Allow) != len(r.checks) {
			t.Errorf("%s: %v: %s", r.kind, err, body)
			return deny(answer, 0)
		}
		for _, a := range bulk.Allow {
			out.allowed = append(out.allowed, a.Allow)
		}
	case "authzen-batch":
		var batch struct {
			Evaluations []struct {
				Decision bool `json:"decision"`
			} `json:"evaluations"`
		}
		if err := json.Unmarshal(body, &batch); err != nil || len(batch.Evaluations) != len(r.checks) {
			t.Errorf("%s: %v: %s", r.kind, err, body)
			return deny(answer, 0)
		}
		for _, a := range batch.Evaluations {
			out.allowed = append(out.allowed, a.Decision)
		}
	}
	return out
}

// expect is the model's verdict on each check of r.
func (w *advWorld) expect(r *advReq) []advVerdict {
	if !r.proxied() {
		out := make([]advVerdict, len(r.checks))
		// One malformed check refuses the whole body, except in an
		// AuthZEN batch, where it fails alone (AuthZEN 1.0).
		itemMalformed := func(c advAppCheck) string {
			if c.malformed != "" {
				return c.malformed
			}
			return c.check.malformed()
		}
		malformed := ""
		if r.kind != "authzen-batch" {
			for _, c := range r.checks {
				if m := itemMalformed(c); m != "" {
					malformed = m
				}
			}
		}
		for i, c := range r.checks {
			m := malformed
			if r.kind == "authzen-batch" {
				m = itemMalformed(c)
			}
			if m == "" && (r.kind == "authzen" || r.kind == "authzen-batch") && c.check.resID == "" {
				m = "AuthZEN requires resource.id"
			}
			switch {
			case m != "":
				out[i] = advDeny("malformed request: %s", m)
			default:
				out[i] = w.decide(c.check)
			}
		}
		return out
	}
	// The request a proxy asks about is the one it describes itself:
	// X-Original-* for nginx, X-Forwarded-* for Caddy, the appended path
	// for Envoy's http_service. Forwarding headers a client adds are only
	// headers.
	p := advProxied{method: r.method, path: r.path, headers: map[string]string{}, jwts: r.jwts}
	switch r.kind {
	case "grpc":
		p.trustedHeader = advTrustedHeader
		fallthrough
	case "grpc-untrusted":
		for _, kv := range r.headers {
			p.headers[kv[0]] = kv[1]
		}
	default:
		// An HTTP server lower-cases header names, trims values and the
		// forward-auth handler joins repeated ones with ",".
		if r.kind != "fwd-untrusted" {
			p.trustedHeader = advTrustedHeader
		}
		p.path = strings.Trim(p.path, " \t")
		for _, kv := range r.headers {
			k, v := strings.ToLower(kv[0]), strings.Trim(kv[1], " \t")
			if old, ok := p.headers[k]; ok {
				v = old + "," + v
			}
			p.headers[k] = v
		}
		// A proxy sets its own family of forwarding headers; a client's
		// copy of the other family that names another request makes the
		// request ambiguous, and nexus refuses it.
		var clientFams [][2]string
		switch r.kind {
		case "fwd-nginx":
			clientFams = [][2]string{{"x-forwarded-method", "x-forwarded-uri"}}
		case "fwd-caddy":
			clientFams = [][2]string{{"x-original-method", "x-original-uri"}}
		}
		for _, fam := range clientFams {
			if u := p.headers[fam[1]]; u != "" {
				if u != p.path || (p.headers[fam[0]] != "" && p.headers[fam[0]] != p.method) {
					return []advVerdict{advDeny("the client's %s names another request", fam[1])}
				}
			}
		}
		if r.kind == "fwd-envoy" {
			// The proxied path arrives appended to /ext_authz: the server
			// parses the request line, ServeMux redirects a path that is
			// not clean (the proxy gets a redirect, not an allow), and the
			// handler takes the request URI after the prefix.
			u, err := url.ParseRequestURI("/ext_authz" + r.path)
			if err != nil {
				return []advVerdict{advDeny("the HTTP server refuses the request line: %v", err)}
			}
			if esc := u.EscapedPath(); advCleanPath(esc) != esc {
				return []advVerdict{advDeny("the HTTP server redirects the unclean path %q", esc)}
			}
			p.path = strings.TrimPrefix(u.RequestURI(), "/ext_authz")
			if p.path == "" {
				p.path = "/"
			}
		}
	}
	return []advVerdict{w.decideProxied(p)}
}

// advCleanPath is net/http's cleanPath: the canonical path ServeMux
// redirects to.
func advCleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		if len(p) == len(np)+1 && strings.HasPrefix(p, np) {
			np = p
		} else {
			np += "/"
		}
	}
	return np
}

// advTally counts the answers and keeps every disagreement.
type advTally struct {
	total, modelAllows, nexusAllows int
	byKind                          map[string][3]int // requests, model allows, nexus allows
	serverErrors                    []string
	wrongAllows, wrongDenies        []string
	worlds                          map[uint64]*advWorld
}

func (ty *advTally) add(w *advWorld, seed uint64, i int, r *advReq, res advResult) {
	if ty.byKind == nil {
		ty.byKind = map[string][3]int{}
		ty.worlds = map[uint64]*advWorld{}
	}
	want := w.expect(r)
	if len(res.allowed) != len(want) {
		res.allowed = make([]bool, len(want))
	}
	if res.status >= 500 {
		ty.serverErrors = append(ty.serverErrors, fmt.Sprintf("world %d request %d: %s -> %s", seed, i, r.describe(), res.answer))
	}
	for j, v := range want {
		got := res.allowed[j]
		ty.total++
		k := ty.byKind[r.kind]
		k[0]++
		if v.allow {
			ty.modelAllows++
			k[1]++
		}
		if got {
			ty.nexusAllows++
			k[2]++
		}
		ty.byKind[r.kind] = k
		if got == v.allow {
			continue
		}
		msg := fmt.Sprintf("world %d request %d", seed, i)
		if len(want) > 1 {
			msg += fmt.Sprintf(" check %d", j)
		}
		msg += fmt.Sprintf(": %s\n    nexus: %s\n    model: allow=%v (%s)", r.describe(), res.answer, v.allow, v.why)
		if got {
			ty.wrongAllows = append(ty.wrongAllows, msg)
			ty.worlds[seed] = w
		} else {
			ty.wrongDenies = append(ty.wrongDenies, msg)
		}
	}
}

func (ty *advTally) report(t *testing.T, took time.Duration) {
	t.Helper()
	kinds := make([]string, 0, len(ty.byKind))
	for k := range ty.byKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d checks in %v: the model allows %d, nexus %d; %d wrong allows, %d wrong denies, %d server errors\n",
		ty.total, took.Round(time.Millisecond), ty.modelAllows, ty.nexusAllows, len(ty.wrongAllows), len(ty.wrongDenies), len(ty.serverErrors))
	for _, k := range kinds {
		c := ty.byKind[k]
		fmt.Fprintf(&sb, "  %-14s %5d checks, model allows %4d, nexus %4d\n", k, c[0], c[1], c[2])
	}
	t.Log(sb.String())
	for _, e := range ty.serverErrors {
		t.Logf("server error: %s", e)
	}
	// The model must stay honest: nearly every answer agrees.
	maxWrongDenies := ty.total / 200
	if len(ty.wrongAllows) > 0 || len(ty.wrongDenies) > maxWrongDenies {
		var msg strings.Builder
		fmt.Fprintf(&msg, "%d requests allowed that the reference model denies; %d denied that it allows (at most %d tolerated)\n", len(ty.wrongAllows), len(ty.wrongDenies), maxWrongDenies)
		for _, m := range ty.wrongAllows {
			fmt.Fprintf(&msg, "WRONG ALLOW %s\n", m)
		}
		for _, m := range ty.wrongDenies {
			fmt.Fprintf(&msg, "wrong deny %s\n", m)
		}
		seeds := make([]uint64, 0, len(ty.worlds))
		for s := range ty.worlds {
			seeds = append(seeds, s)
		}
		slices.Sort(seeds)
		for _, s := range seeds {
			fmt.Fprintf(&msg, "world %d (a wrong allow):\n", s)
			for _, x := range ty.worlds[s].tuples {
				fmt.Fprintf(&msg, "    %s\n", x)
			}
		}
		t.Error(msg.String())
	} else {
		for _, m := range ty.wrongDenies {
			t.Logf("wrong deny (tolerated) %s", m)
		}
	}
	// At least 15% allowed (about 20% are: requests on resources in no
	// tenant, or named in another case, are denied).
	if ty.total == 0 || ty.modelAllows*100 < ty.total*15 || ty.nexusAllows*100 < ty.total*15 {
		t.Errorf("too few allows to mean anything: the model allows %d and nexus %d of %d checks", ty.modelAllows, ty.nexusAllows, ty.total)
	}
}

func (r *advReq) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s]", r.kind)
	if r.proxied() {
		fmt.Fprintf(&b, " %q %q", r.method, r.path)
		for _, kv := range r.headers {
			fmt.Fprintf(&b, " %s=%q", kv[0], kv[1])
		}
		if r.jwts != nil {
			js, _ := json.Marshal(r.jwts)
			fmt.Fprintf(&b, " jwt_authn=%s", js)
		}
	} else {
		fmt.Fprintf(&b, " %s", r.body)
	}
	if r.note != "" {
		fmt.Fprintf(&b, " {%s}", r.note)
	}
	return b.String()
}
