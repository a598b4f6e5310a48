package builtins_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/datastore/builtins"
)

// benchTable is the default policy's route rules and condition for
// files, as its data sets them.
func benchTable() *builtins.Table {
	t := &builtins.Table{
		Conditions: []builtins.Condition{{Type: "file", Actions: []string{"write", "delete"}, Attribute: "locked", Value: true, Reason: "locked"}},
	}
	for _, typ := range []string{"file", "folder"} {
		for _, prefix := range []string{"/tenants/{tenant}/", "/"} {
			for _, r := range [][2]string{{"GET", "read"}, {"PUT", "write"}, {"DELETE", "delete"}} {
				path := prefix + typ + "s/{id}"
				t.Routes = append(t.Routes, builtins.RouteRule{Method: r[0], Action: r[1], Type: typ, Segments: strings.Split(path[1:], "/")})
			}
		}
	}
	return t
}

// BenchmarkDefaultPolicy is the default policy's decision, in its Wasm,
// on the demo store, for the input documents the server writes: an
// allow by a tenant role (RBAC) and one three folders up (ReBAC), through
// each entrypoint.
func BenchmarkDefaultPolicy(b *testing.B) {
	s := openDrive(b)
	d := newDefaultPolicy(b, s, benchTable(), "x-user", "x-tenant")
	if d == nil {
		b.Fatal("no default policy")
	}
	ctx := context.Background()
	for _, bc := range []struct {
		name, input string
		envoy       bool
		want        string
	}{
		{"Envoy/RBAC", `{"attributes":{"request":{"http":{"method":"GET","headers":{"x-user":"alice"}}}},"parsed_path":["tenants","acme","files","report.pdf"]}`, true, `"reason":"rbac"`},
		{"Envoy/ReBACDepth3", `{"attributes":{"request":{"http":{"method":"GET","headers":{"x-user":"bob"}}}},"parsed_path":["files","report.pdf"]}`, true, `"reason":"rebac"`},
		{"Authz/RBAC", `{"subject":{"type":"user","id":"alice"},"action":"read","resource":{"type":"file","id":"report.pdf","tenant":"acme"}}`, false, `"reason":"rbac"`},
		{"Authz/ReBACDepth3", `{"subject":{"type":"user","id":"bob"},"action":"read","resource":{"type":"file","id":"report.pdf"}}`, false, `"reason":"rebac"`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			in := []byte(bc.input)
			var out []byte
			var ok bool
			b.ReportAllocs()
			for b.Loop() {
				if bc.envoy {
					out, ok = d.Envoy(ctx, in, out[:0])
				} else {
					out, ok = d.Authz(ctx, in, out[:0])
				}
				if !ok {
					b.Fatal("the evaluation failed")
				}
			}
			if !strings.Contains(string(out), bc.want) {
				b.Fatalf("%s, want %s", out, bc.want)
			}
		})
	}
}
