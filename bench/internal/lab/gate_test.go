package lab

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestGateSendsAgainOnlyWithoutAnswer: behind a stand-in proxy that
// answers each path's first request with 502, every check is sent again
// and the gate passes; a check answered wrongly (here: allowed when it
// should be denied) is never sent again and fails the gate.
func TestGateSendsAgainOnlyWithoutAnswer(t *testing.T) {
	checks := []Check{
		{User: "u1", Action: "read", Type: "doc", ID: "a", Tenant: "t", Allow: true},
		{User: "u2", Action: "read", Type: "doc", ID: "b", Tenant: "t", Allow: false},
		{User: "u3", Action: "write", Type: "doc", ID: "c", Tenant: "t", Allow: true},
	}
	for _, tc := range []struct {
		name      string
		lie       string // the path answered 200 whatever the check expects
		wantWrong int
	}{{"every answer right", "", 0}, {"one answer wrong", checks[1].Path(), 1}} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			seen := map[string]int{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen[r.URL.Path]++
				n := seen[r.URL.Path]
				mu.Unlock()
				if r.URL.Path == tc.lie {
					return // 200: allowed
				}
				if n == 1 {
					w.WriteHeader(http.StatusBadGateway)
					return
				}
				for _, c := range checks {
					if c.Path() == r.URL.Path && !c.Allow {
						w.WriteHeader(http.StatusForbidden)
					}
				}
			}))
			defer srv.Close()
			tg, err := NewTarget(TargetConfig{Interface: InterfaceGateway, Addr: strings.TrimPrefix(srv.URL, "http://")})
			if err != nil {
				t.Fatal(err)
			}
			defer tg.Close()
			res, err := Gate(context.Background(), tg, checks)
			if len(res.Wrong) != tc.wantWrong || res.Right != len(checks)-tc.wantWrong {
				t.Fatalf("gate %+v, want %d wrong", res, tc.wantWrong)
			}
			if wantRetried := len(checks) - tc.wantWrong; res.Retried != wantRetried {
				t.Fatalf("%d checks sent again, want %d", res.Retried, wantRetried)
			}
			if tc.lie != "" && seen[tc.lie] != 1 {
				t.Fatalf("the wrongly answered check was sent %d times, want once", seen[tc.lie])
			}
			if (tc.wantWrong > 0) != errors.Is(err, ErrGateFailed) {
				t.Fatalf("gate error %v with %d wrong", err, tc.wantWrong)
			}
			if tc.wantWrong == 0 && !strings.Contains(res.Summary(), "3/3 right (3 sent again") {
				t.Fatalf("summary %q", res.Summary())
			}
		})
	}
}
