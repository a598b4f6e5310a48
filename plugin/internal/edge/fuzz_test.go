package edge

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(cfgJSON))
	f.Add([]byte(`{"pdp_cluster":"c","subject":{"jwt_header":"x"},"routes":[{"path":"/{tenant}/**","action":"a","resource_type":"r"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			if !errors.Is(err, ErrBadConfig) {
				t.Fatalf("error does not wrap ErrBadConfig: %v", err)
			}
			return
		}
		if c.RefreshPeriodMS < 100 || c.MaxAgeMS < c.RefreshPeriodMS || len(c.Routes) == 0 {
			t.Fatalf("accepted config breaks its invariants: %+v", c)
		}
	})
}

func FuzzDecodeSnapshot(f *testing.F) {
	b, _ := json.Marshal(snapshotFixture())
	f.Add(b)
	f.Add([]byte(`{"version":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSnapshot(b)
		if err != nil {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("error does not wrap ErrBadSnapshot: %v", err)
			}
			return
		}
		s.Decide("alice", "acme", "file", "read") // must not panic
	})
}

func FuzzClaimFromPayload(f *testing.F) {
	f.Add(jwtPayload(map[string]any{"sub": "alice"}), "sub")
	f.Add("a.b.c", "sub")
	f.Fuzz(func(t *testing.T, header, claim string) {
		if v, ok := claimFromPayload(header, claim); ok && v == "" {
			t.Fatal("empty subject reported as found")
		}
	})
}

func FuzzRequestPath(f *testing.F) {
	f.Add("/t/acme/files/f1?x=1")
	f.Add("/t/acme/../files/f1")
	f.Add("//t//acme/files/f1/")
	p, _ := compilePattern("/t/{tenant}/files/*")
	f.Fuzz(func(t *testing.T, path string) {
		clean, ok := cleanPath(path)
		if !ok {
			return
		}
		if strings.ContainsAny(clean, "?#%\\") || !strings.HasPrefix(clean, "/") {
			t.Fatalf("cleanPath(%q) = %q", path, clean)
		}
		for _, seg := range strings.Split(clean, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("cleanPath(%q) kept a dot segment", path)
			}
		}
		if tenant, ok := p.match(clean); ok && (tenant == "" || strings.Contains(tenant, "/")) {
			t.Fatalf("match(%q) tenant %q", clean, tenant)
		}
	})
}
