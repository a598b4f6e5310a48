package proxy

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// forwardAuth stands in for nexus' HTTP forward-auth listener until the
// live tests drive the real binary: it follows the same contract (path
// prefix /ext_authz/, original method and URI in X-Original-* or
// X-Forwarded-* headers, the subject in the trusted X-User header, 2xx
// allows, headers of the allow go upstream), and decides with a fixed rule
// so the proxies' configuration can be tested: no subject is 401, alice
// may GET, everything else is 403. A request that brings the password to
// the PDP is a 500: the proxy must keep it.
func forwardAuth(t *testing.T, calls *atomic.Int64) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if !strings.HasPrefix(r.URL.Path, "/ext_authz/") {
			http.Error(w, "not under /ext_authz/: "+r.URL.Path, http.StatusNotFound)
			return
		}
		method := first(r.Header.Get("X-Original-Method"), r.Header.Get("X-Forwarded-Method"))
		uri := first(r.Header.Get("X-Original-URI"), r.Header.Get("X-Forwarded-Uri"))
		switch {
		case r.Header.Get("Authorization") != "":
			http.Error(w, "the proxy sent the password on", http.StatusInternalServerError)
		case r.Header.Get("X-User") == "":
			w.WriteHeader(http.StatusUnauthorized)
		case r.Header.Get("X-User") == "alice" && method == http.MethodGet:
			if !strings.HasPrefix(uri, "/nodecision") {
				w.Header().Set("X-Nexus-Decision", "allow "+method+" "+uri)
			}
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// echo is the upstream: it answers with the request headers it got.
func echo(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(r.Header)
	}))
	t.Cleanup(s.Close)
	return s
}

func hostPort(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

func TestProxies(t *testing.T) {
	var calls atomic.Int64
	pdp := forwardAuth(t, &calls)
	up := echo(t)
	// A port nothing listens on: nexus down.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close()

	type request struct {
		name       string
		method     string
		path       string
		user       string // basic authentication as user
		password   string // "" means Password
		forged     string // a client's own X-User
		spoof      string // a client's own X-Nexus-Decision
		wantStatus int
		wantHeader string // X-Nexus-Decision seen by the upstream
		wantUser   string // X-User seen by the upstream
	}
	requests := []request{
		{name: "allowed GET", method: "GET", path: "/api/files/1?v=2", user: "alice", wantStatus: 200, wantHeader: "allow GET /api/files/1?v=2", wantUser: "alice"},
		{name: "denied DELETE", method: "DELETE", path: "/api/files/1", user: "alice", wantStatus: 403},
		{name: "denied subject", method: "GET", path: "/api/files/1", user: "carol", wantStatus: 403},
		{name: "no credentials", method: "GET", path: "/api/files/1", wantStatus: 401},
		{name: "wrong password", method: "GET", path: "/api/files/1", user: "alice", password: "guess", wantStatus: 401},
		{name: "forged X-User without credentials", method: "GET", path: "/api/files/1", forged: "alice", wantStatus: 401},
		{name: "forged X-User is replaced", method: "GET", path: "/api/files/1", user: "carol", forged: "alice", wantStatus: 403},
		{name: "upstream sees the verified user", method: "GET", path: "/api/files/2", user: "alice", forged: "bob", wantStatus: 200, wantHeader: "allow GET /api/files/2", wantUser: "alice"},
		{name: "spoofed header dropped", method: "GET", path: "/nodecision", user: "alice", spoof: "allow everything", wantStatus: 200, wantHeader: "", wantUser: "alice"},
	}
	users := []string{"alice", "carol"}
	for _, kind := range Kinds {
		t.Run(string(kind), func(t *testing.T) {
			if _, err := Binary(kind); err != nil {
				t.Fatal(err)
			}
			p := Start(t, Config{Kind: kind, Nexus: hostPort(pdp), Upstream: hostPort(up), UpstreamHeaders: []string{"X-Nexus-Decision"}, Users: users})
			for _, rq := range requests {
				t.Run(rq.name, func(t *testing.T) {
					before := calls.Load()
					req, err := http.NewRequest(rq.method, p.URL+rq.path, nil)
					if err != nil {
						t.Fatal(err)
					}
					if rq.user != "" {
						pw := rq.password
						if pw == "" {
							pw = Password
						}
						req.SetBasicAuth(rq.user, pw)
					}
					if rq.forged != "" {
						req.Header.Set("X-User", rq.forged)
					}
					if rq.spoof != "" {
						req.Header.Set("X-Nexus-Decision", rq.spoof)
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					if resp.StatusCode != rq.wantStatus {
						t.Fatalf("status %d, want %d", resp.StatusCode, rq.wantStatus)
					}
					switch {
					case rq.wantStatus != 401 && calls.Load() == before:
						t.Fatal("the proxy did not ask the PDP")
					case rq.wantStatus == 401 && calls.Load() != before:
						// Every 401 here is the proxy's own: nexus is never
						// asked about a user the proxy did not verify.
						t.Fatal("the proxy asked the PDP before it verified the user")
					}
					if rq.wantStatus != 200 {
						return
					}
					var seen http.Header
					if err := json.NewDecoder(resp.Body).Decode(&seen); err != nil {
						t.Fatalf("upstream answer: %v", err)
					}
					if got := seen.Get("X-Nexus-Decision"); got != rq.wantHeader {
						t.Fatalf("upstream saw X-Nexus-Decision %q, want %q", got, rq.wantHeader)
					}
					if got := seen.Get("X-User"); got != rq.wantUser {
						t.Fatalf("upstream saw X-User %q, want %q", got, rq.wantUser)
					}
				})
			}
			t.Run("PDP down fails closed", func(t *testing.T) {
				p := Start(t, Config{Kind: kind, Nexus: down, Upstream: hostPort(up), Users: users})
				req, err := http.NewRequest("GET", p.URL+"/api/files/1", nil)
				if err != nil {
					t.Fatal(err)
				}
				req.SetBasicAuth("alice", Password)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode < 400 {
					t.Fatalf("status %d with the PDP down, want a 4xx or 5xx", resp.StatusCode)
				}
			})
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{name: "complete", cfg: Config{Kind: Nginx, Nexus: "127.0.0.1:1", Upstream: "127.0.0.1:2", Users: []string{"a"}}},
		{name: "unknown kind", cfg: Config{Kind: "traefik", Nexus: "a:1", Upstream: "b:2", Users: []string{"a"}}, wantErr: true},
		{name: "no upstream", cfg: Config{Kind: Caddy, Nexus: "a:1", Users: []string{"a"}}, wantErr: true},
		{name: "no users", cfg: Config{Kind: Caddy, Nexus: "a:1", Upstream: "b:2"}, wantErr: true},
		{name: "user that would inject configuration", cfg: Config{Kind: Nginx, Nexus: "a:1", Upstream: "b:2", Users: []string{"a:{SHA}x\nb"}}, wantErr: true},
		{name: "header that would inject configuration", cfg: Config{Kind: HAProxy, Nexus: "a:1", Upstream: "b:2", UpstreamHeaders: []string{"X-A; daemon on"}, Users: []string{"a"}}, wantErr: true},
		{name: "subject header that would inject configuration", cfg: Config{Kind: HAProxy, Nexus: "a:1", Upstream: "b:2", SubjectHeader: "X-U $x", Users: []string{"a"}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && tt.cfg.StartTimeout == 0 {
				t.Fatal("StartTimeout default not filled")
			}
		})
	}
}
