package config

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse: any file is read or refused with an error, never a panic; a
// configuration read has a plugin entrypoint in nexus' form.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"plugins:\n  envoy_ext_authz_grpc:\n    addr: :9191\n    path: envoy/authz/allow\ndecision_logs:\n  console: true\n",
		`{"plugins": {"envoy_ext_authz_grpc": {"query": "data.envoy.authz.allow", "dry-run": true}}}`,
		`{"plugins": {"envoy_ext_authz_grpc": {"path": "/a/b.c/d/", "grpc-request-duration-seconds-buckets": [1, 2]}}}`,
		"labels:\n  a: ${HOME}\n  b: ${}\n",
		"services:\n  - name: s\n    url: https://x\n",
		"server:\n  encoding: {}\n",
		"[1, 2]",
		"nexus: {cache_size: 1}",
		"1: 2\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := Parse(raw)
		if err != nil {
			if c != nil {
				t.Fatalf("a config and an error: %v", err)
			}
			if errors.Is(err, ErrUnsupported) && !strings.Contains(err.Error(), ErrUnsupported.Error()) {
				t.Fatalf("unsupported error without its words: %v", err)
			}
			return
		}
		if p := c.Envoy; p != nil {
			if p.Entrypoint == "" || strings.HasPrefix(p.Entrypoint, "/") || strings.HasSuffix(p.Entrypoint, "/") || strings.Contains(p.Entrypoint, "//") {
				t.Fatalf("entrypoint %q is not in nexus' form", p.Entrypoint)
			}
			if p.GRPCMaxRecvMsgSize <= 0 || p.GRPCMaxSendMsgSize <= 0 || len(p.GRPCRequestDurationSecondsBuckets) == 0 {
				t.Fatalf("plugin %+v", p)
			}
		}
	})
}
