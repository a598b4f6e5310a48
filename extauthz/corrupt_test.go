package extauthz_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/internal/fixture/damage"
	"github.com/nexuspdp/nexus/pdp"
)

// serveStore starts a real server on loopback over the store s, as
// newTestServer does over the demo store.
func serveStore(t *testing.T, s *datastore.BoltStore) *testServer {
	t.Helper()
	ctx := context.Background()
	ts := &testServer{store: s, log: &fixture.SyncBuffer{}}
	srv, p, err := testConfig{
		Config: extauthz.Config{
			Store: s, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
			AdminInsecure: true, AppAPIInsecure: true,
		},
		Core: pdp.Config{Engine: fixture.StoreEngine(t, s), Policy: fixture.Bundle(t), DecisionLog: ts.log},
	}.build(t)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	conn, err := grpc.NewClient(srv.Addr("grpc").String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ts.srv, ts.pdp, ts.conn, ts.grpc = srv, p, conn, authv3.NewAuthorizationClient(conn)
	ts.http, ts.admin = "http://"+srv.Addr("http").String(), "http://"+srv.Addr("admin").String()
	return ts
}

// TestCorruptStoreServer serves from copies of a real data file with bytes
// flipped in the pages that opening the store does not read (the leaves of
// each index and of the changelog), and sends every kind of request: each
// answers with its decision, or with 503 and the reason store_corrupt,
// never 500 or an empty reply; once one did, /readyz answers 503 with that
// reason. Damage that opening the store finds is TestRelVerify's (in
// cmd/nexus) and datastore's TestCorruptFile's.
func TestCorruptStoreServer(t *testing.T) {
	base := damage.Base(t)
	random := 30
	if testing.Short() {
		random = 5
	}
	served, failed := 0, 0
	for _, f := range damage.Flips(t, base, random, 7) {
		if f.Read || f.Page.Kind == "meta" || f.Page.Kind == "freelist" {
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			s, err := datastore.Open(context.Background(), datastore.Config{Path: f.Apply(t, base)})
			if err != nil {
				if !errors.Is(err, datastore.ErrCorrupt) {
					t.Fatalf("Open = %v, want ErrCorrupt", err)
				}
				return
			}
			t.Cleanup(func() { _ = s.Close() })
			ts := serveStore(t, s)
			if status, body := readyz(t, ts.http); status != 200 {
				t.Fatalf("readyz before any request = %d %s", status, body)
			}
			corrupt := requestAll(t, ts)
			served++
			status, body := readyz(t, ts.http)
			if corrupt {
				failed++
				if status != 503 || !strings.Contains(body, `"code":"store_corrupt"`) || !strings.Contains(body, "damaged") {
					t.Fatalf("after a store_corrupt answer, readyz = %d %s", status, body)
				}
			}
			if (status == 503) != (s.Health() != nil) {
				t.Fatalf("readyz = %d %s, but Health = %v", status, body, s.Health())
			}
		})
	}
	t.Logf("%d damaged files served, %d of them met the damage", served, failed)
	if served == 0 || failed == 0 {
		t.Fatal("no case reached the server or the damage")
	}
}

// requestAll sends one request of each kind and checks its answer; it
// reports whether one answered store_corrupt.
func requestAll(t *testing.T, ts *testServer) (corrupt bool) {
	t.Helper()
	ctx := context.Background()
	for _, r := range []struct {
		method, path, user string
	}{
		{"GET", "/files/report.pdf", "bob"},                   // ReBAC, three folders up
		{"GET", "/files/f0100", "u100"},                       // a viewer of one of the many files
		{"PUT", "/files/f2999", "u499"},                       // denied
		{"DELETE", "/tenants/acme/files/report.pdf", "alice"}, // RBAC: a role read
	} {
		resp, err := ts.grpc.Check(ctx, fixture.EnvoyRequest(r.method, r.path, map[string]string{"x-user": r.user}))
		if err != nil {
			// A failed decision is a gRPC error, as opa-envoy-plugin
			// answers; a damaged store is UNAVAILABLE and says so.
			if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "damaged") {
				t.Fatalf("gRPC %s %s: %v, want UNAVAILABLE naming the damaged store", r.method, r.path, err)
			}
			corrupt = true
			continue
		}
		switch codes.Code(resp.GetStatus().GetCode()) {
		case codes.OK, codes.PermissionDenied:
		default:
			t.Fatalf("gRPC %s %s: %v", r.method, r.path, resp.GetStatus())
		}
	}
	httpReqs := []struct {
		name, method, url, body string
		header                  []string
	}{
		{"forward auth", "GET", ts.http + "/ext_authz/files/f0100", "", []string{"X-User", "u100"}},
		{"authzen", "POST", ts.http + "/access/v1/evaluation", `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`, nil},
		{"permit", "POST", ts.http + "/allowed", `{"user":{"key":"alice"},"action":"delete","resource":{"type":"folder","key":"root","tenant":"acme"}}`, nil},
		{"user-permissions", "POST", ts.http + "/user-permissions", `{"user":{"key":"u100"}}`, nil},
		{"admin write", "POST", ts.admin + "/v1/relationships", `{"touches":["folder:q3#viewer@user:carol"],"deletes":["file:f0100#viewer@user:u100"]}`, nil},
		{"admin read", "GET", ts.admin + "/v1/relationships?object_type=file&object_id=f0100", "", nil},
		{"admin read all", "GET", ts.admin + "/v1/relationships?limit=100000", "", nil},
		{"admin read by subject", "GET", ts.admin + "/v1/relationships?subject_type=user&limit=100000", "", nil},
		{"authorized users", "POST", ts.http + "/authorized_users", `{"action":"read","resource":{"type":"file","key":"report.pdf","tenant":"acme"}}`, nil},
		{"edge snapshot", "GET", ts.admin + "/v1/edge/snapshot", "", nil},
	}
	for _, r := range httpReqs {
		req, err := http.NewRequest(r.method, r.url, strings.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(r.header); i += 2 {
			req.Header.Set(r.header[i], r.header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v (an empty reply?)", r.name, err)
		}
		var body map[string]any
		derr := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == 503:
			if derr != nil || body["reason"] != "store_corrupt" {
				t.Fatalf("%s: 503 %v (%v), want the reason store_corrupt", r.name, body, derr)
			}
			corrupt = true
		case resp.StatusCode >= 500:
			t.Fatalf("%s: %d %v", r.name, resp.StatusCode, body)
		case resp.StatusCode == 200 && r.name != "forward auth" && derr != nil:
			t.Fatalf("%s: 200 with a body that is not JSON: %v", r.name, derr)
		}
	}
	return corrupt
}

func readyz(t *testing.T, base string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/readyz", nil)
	if err != nil {
		t.Fatal(err)
	}
	status, _, body := do(t, req)
	return status, body
}

// TestReadyzReportsStoreHealth: /readyz follows the store's Health, on the
// HTTP and the admin listener, with the reason's code and description.
func TestReadyzReportsStoreHealth(t *testing.T) {
	ts := newTestServer(t, nil)
	for _, base := range []string{ts.http, ts.admin} {
		if status, body := readyz(t, base); status != 200 {
			t.Fatalf("readyz = %d %s", status, body)
		}
	}
	if err := ts.store.Close(); err != nil {
		t.Fatal(err)
	}
	for _, base := range []string{ts.http, ts.admin} {
		status, body := readyz(t, base)
		if status != 503 || !strings.Contains(body, `"status":"not ready"`) || !strings.Contains(body, `"code"`) {
			t.Fatalf("readyz with the store closed = %d %s", status, body)
		}
	}
}
