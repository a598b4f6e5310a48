package policyload_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/compile"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/policyload"

	"github.com/nexuspdp/nexus/internal/fixture"
)

// The policy and data of an OPA bundle directory as users lay it out: a
// manifest with a revision and roots, a data.json mounted at its
// directory.
var opaSources = map[string]string{
	".manifest": `{"revision": "rev-42", "roots": ["httpapi", "acl"], "metadata": {"team": "payments"}}`,
	"httpapi/authz/policy.rego": `package httpapi.authz

default allow := false

allow if {
	input.method == "GET"
	some role in data.acl.roles[input.user]
	role == "reader"
}

allow if input.user == "admin"

reason := sprintf("user %s", [input.user])
`,
	"acl/data.json": `{"roles": {"alice": ["reader"], "bob": ["writer"]}}`,
}

// evalWasm evaluates entrypoint of b on input with nexus' engine.
func evalWasm(t *testing.T, b *bundle.Bundle, entrypoint, input string) string {
	t.Helper()
	ctx := t.Context()
	e, err := engine.New(ctx, engine.Config{MaxInstances: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	if err := e.Load(ctx, b); err != nil {
		t.Fatalf("load: %v", err)
	}
	out, err := e.Eval(ctx, entrypoint, []byte(input), nil)
	if err != nil {
		t.Fatalf("eval %s: %v", entrypoint, err)
	}
	return canonical(t, out)
}

// evalOPA evaluates the query on the OPA bundle archive with OPA's Go
// evaluator: the oracle.
func evalOPA(t *testing.T, archive []byte, query, input string) string {
	t.Helper()
	var in any
	if err := json.Unmarshal([]byte(input), &in); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "bundle.tar.gz")
	if err := os.WriteFile(p, archive, 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := rego.New(rego.Query(query), rego.LoadBundle(p), rego.Input(in)).Eval(t.Context())
	if err != nil {
		t.Fatalf("opa eval: %v", err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		t.Fatalf("opa eval: %d results", len(rs))
	}
	raw, err := json.Marshal(rs[0].Expressions[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return canonical(t, raw)
}

func canonical(t *testing.T, raw []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func TestFromTarGzOPABundle(t *testing.T) {
	archive := fixture.OPABuild(t, fixture.WriteTree(t, opaSources), compile.TargetRego)
	eps := []string{"httpapi/authz/allow", "httpapi/authz/reason"}
	b, err := policyload.FromTarGz(t.Context(), bytes.NewReader(archive), policyload.Options{Entrypoints: eps})
	if err != nil {
		t.Fatalf("FromTarGz: %v", err)
	}
	if b.Manifest.Revision != "rev-42" {
		t.Errorf("revision %q, want the manifest's rev-42", b.Manifest.Revision)
	}
	if !slices.Equal(b.Manifest.Roots, []string{"acl", "httpapi"}) {
		t.Errorf("roots %v, want the manifest's [acl httpapi]", b.Manifest.Roots)
	}
	if !slices.Equal(b.Manifest.Entrypoints, eps) {
		t.Errorf("entrypoints %v, want %v", b.Manifest.Entrypoints, eps)
	}
	if b.Manifest.Metadata["team"] != "payments" {
		t.Errorf("metadata %v lost the manifest's team", b.Manifest.Metadata)
	}
	if _, ok := b.Manifest.InputPaths(b.Data); !ok {
		t.Error("the compiled bundle does not record the input paths its policy reads")
	}
	for _, input := range []string{
		`{"method": "GET", "user": "alice"}`,
		`{"method": "GET", "user": "bob"}`,
		`{"method": "POST", "user": "alice"}`,
		`{"method": "DELETE", "user": "admin"}`,
	} {
		for _, ep := range eps {
			got := evalWasm(t, b, ep, input)
			want := evalOPA(t, archive, "data."+strings.ReplaceAll(ep, "/", "."), input)
			if got != want {
				t.Errorf("%s on %s: Wasm %s, OPA %s", ep, input, got, want)
			}
		}
	}
	// The result must not merely agree: the data mounted at acl is read.
	if got := evalWasm(t, b, "httpapi/authz/allow", `{"method": "GET", "user": "alice"}`); got != "true" {
		t.Errorf("alice may GET: got %s", got)
	}
}

func TestFromTarGzWasmBundles(t *testing.T) {
	dir := fixture.WriteTree(t, opaSources)
	opaWasm := fixture.OPABuild(t, dir, compile.TargetWasm, "httpapi/authz/allow")
	var nexusArchive bytes.Buffer
	nb, err := compiler.Compile(t.Context(), compiler.Options{Paths: []string{dir}, Entrypoints: []string{"httpapi/authz/allow"}, Revision: "nexus-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := nb.Write(&nexusArchive); err != nil {
		t.Fatal(err)
	}
	opaRead, err := bundle.Read(bytes.NewReader(opaWasm))
	if err != nil {
		t.Fatalf("bundle.Read of opa build -t wasm: %v", err)
	}
	// A nexus bundle with the Rego it was compiled from.
	man, err := json.Marshal(nb.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	both := makeTarGz(t,
		tarEntry{name: "/.manifest", body: string(man)},
		tarEntry{name: "/policy.wasm", body: string(nb.Wasm)},
		tarEntry{name: "/data.json", body: string(nb.Data)},
		tarEntry{name: "/httpapi/authz/policy.rego", body: opaSources["httpapi/authz/policy.rego"]})
	// opa build -t wasm keeps of the Rego only what the Wasm does not
	// hold: it cannot be compiled for another entrypoint.
	_, err = policyload.FromTarGz(t.Context(), bytes.NewReader(opaWasm), policyload.Options{Entrypoints: []string{"httpapi/authz/allow", "httpapi/authz/reason"}})
	if want := "its /policy.wasm lacks the entrypoints httpapi/authz/reason and its Rego does not compile for them"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("opa build -t wasm, another entrypoint: err = %v, want %q", err, want)
	}
	tests := []struct {
		name        string
		archive     []byte
		entrypoints []string
		wantWasm    []byte // nil: compiled from the Rego
		wantEPs     []string
	}{
		{"opa wasm, its entrypoint", opaWasm, []string{"httpapi/authz/allow"}, opaRead.Wasm, []string{"httpapi/authz/allow"}},
		{"opa wasm, no entrypoint asked", opaWasm, nil, opaRead.Wasm, []string{"httpapi/authz/allow"}},
		{"wasm lacks an entrypoint: its Rego is compiled", both, []string{"httpapi/authz/allow", "httpapi/authz/reason"}, nil, []string{"httpapi/authz/allow", "httpapi/authz/reason"}},
		{"wasm and Rego, the Wasm has the entrypoint", both, []string{"httpapi/authz/allow"}, nb.Wasm, []string{"httpapi/authz/allow"}},
		{"nexus bundle", nexusArchive.Bytes(), []string{"httpapi/authz/allow"}, nb.Wasm, []string{"httpapi/authz/allow"}},
		{"nexus bundle without Rego is used as it is", nexusArchive.Bytes(), []string{"other/allow"}, nb.Wasm, []string{"httpapi/authz/allow"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := policyload.FromTarGz(t.Context(), bytes.NewReader(tt.archive), policyload.Options{Entrypoints: tt.entrypoints})
			if err != nil {
				t.Fatalf("FromTarGz: %v", err)
			}
			if tt.wantWasm != nil && !bytes.Equal(b.Wasm, tt.wantWasm) {
				t.Error("the bundle's own Wasm was not used")
			}
			if tt.wantWasm == nil && bytes.Equal(b.Wasm, nb.Wasm) {
				t.Error("the Wasm lacking an entrypoint was used")
			}
			if !slices.Equal(b.Manifest.Entrypoints, tt.wantEPs) {
				t.Errorf("entrypoints %v, want %v", b.Manifest.Entrypoints, tt.wantEPs)
			}
			if got := evalWasm(t, b, "httpapi/authz/allow", `{"method": "GET", "user": "alice"}`); got != "true" {
				t.Errorf("alice may GET: got %s", got)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := fixture.WriteTree(t, map[string]string{
		"p.rego":    "package app\n\nallow if input.user == data.owner\n",
		"data.json": `{"owner": "carol"}`,
	})
	archive := filepath.Join(t.TempDir(), "b.tar.gz")
	if err := os.WriteFile(archive, fixture.OPABuild(t, fixture.WriteTree(t, opaSources), compile.TargetRego), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, entrypoint, input, want, revision string
	}{
		{"directory", dir, "app/allow", `{"user": "carol"}`, "true", "r1"},
		{"single file", filepath.Join(dir, "p.rego"), "app/allow", `{"user": "anyone"}`, "false", "r1"},
		{"OPA bundle", archive, "httpapi/authz/allow", `{"user": "admin"}`, "true", "rev-42"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := policyload.Load(t.Context(), tt.path, policyload.Options{Entrypoints: []string{tt.entrypoint}, Revision: "r1"})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if b.Manifest.Revision != tt.revision {
				t.Errorf("revision %q, want %q", b.Manifest.Revision, tt.revision)
			}
			// A single file has no data.json: data.owner is undefined.
			if tt.name == "single file" {
				e, err := engine.New(t.Context(), engine.Config{MaxInstances: 1})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close(context.Background())
				if err := e.Load(t.Context(), b); err != nil {
					t.Fatal(err)
				}
				if _, err := e.Eval(t.Context(), tt.entrypoint, []byte(tt.input), nil); !errors.Is(err, engine.ErrUndefined) {
					t.Fatalf("eval without data: %v, want undefined", err)
				}
				return
			}
			if got := evalWasm(t, b, tt.entrypoint, tt.input); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

// tarEntry is one entry of a hand-made archive.
type tarEntry struct {
	name     string
	body     string
	typeflag byte
	linkname string
	size     int64 // when not len(body): a header that lies
}

func makeTarGz(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: e.typeflag, Linkname: e.linkname, Size: int64(len(e.body))}
		if hdr.Typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Typeflag != tar.TypeReg {
			hdr.Size = 0
		}
		if e.size != 0 {
			hdr.Size = e.size
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if e.size != 0 {
			// Stop here: the archive ends inside the oversized file.
			if err := gz.Close(); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes()
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestFromTarGzBadArchives(t *testing.T) {
	policy := tarEntry{name: "/p.rego", body: "package p\n\nallow := true\n"}
	tests := []struct {
		name    string
		archive []byte
		is      error  // the error must match
		want    string // and contain
	}{
		{"not gzip", []byte("plain text"), bundle.ErrInvalid, "gzip"},
		{"symlink", makeTarGz(t, policy, tarEntry{name: "/q.rego", typeflag: tar.TypeSymlink, linkname: "/etc/passwd"}), policyload.ErrUnsafeEntry, `/q.rego is a link (to "/etc/passwd")`},
		{"hard link", makeTarGz(t, policy, tarEntry{name: "data.json", typeflag: tar.TypeLink, linkname: "p.rego"}), bundle.ErrInvalid, "data.json is a link"},
		{"fifo", makeTarGz(t, policy, tarEntry{name: "pipe", typeflag: tar.TypeFifo}), policyload.ErrUnsafeEntry, "pipe is not a regular file"},
		{"parent directory", makeTarGz(t, tarEntry{name: "../../p.rego", body: policy.body}), policyload.ErrUnsafeEntry, "../../p.rego climbs out of the archive"},
		{"parent inside", makeTarGz(t, tarEntry{name: "a/../../p.rego", body: policy.body}), policyload.ErrUnsafeEntry, "climbs out"},
		{"backslash", makeTarGz(t, tarEntry{name: `..\p.rego`, body: policy.body}), policyload.ErrUnsafeEntry, "entry name"},
		{"duplicate", makeTarGz(t, policy, tarEntry{name: "./p.rego", body: policy.body}), bundle.ErrInvalid, "/p.rego appears twice"},
		{"too large", makeTarGz(t, tarEntry{name: "big.json", size: bundle.MaxBytes + 1}), bundle.ErrTooLarge, "big.json"},
		{"empty", makeTarGz(t), bundle.ErrInvalid, "neither /policy.wasm nor Rego files"},
		{"delta bundle", makeTarGz(t, tarEntry{name: "/patch.json", body: `{"data": [{"op": "upsert", "path": "/a", "value": 1}]}`}, tarEntry{name: "/.manifest", body: `{"revision": "d"}`}), policyload.ErrDeltaBundle, "delta"},
		{"package outside the roots", makeTarGz(t, policy, tarEntry{name: "/.manifest", body: `{"roots": ["q"]}`}), bundle.ErrInvalid, "manifest roots [q] do not permit 'package p' in module '/p.rego'"},
		{"bad wasm", makeTarGz(t, tarEntry{name: "/policy.wasm", body: "nope"}, tarEntry{name: "/.manifest", body: `{}`}), bundle.ErrInvalid, "not a WebAssembly module"},
		{"mixed rego versions", makeTarGz(t, policy,
			tarEntry{name: "/old/q.rego", body: "package old\n\nallow { true }\n"},
			tarEntry{name: "/.manifest", body: `{"file_rego_versions": {"/old/q.rego": 0}}`}), policyload.ErrMixedRegoVersions, "/old/q.rego is v0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := policyload.FromTarGz(t.Context(), bytes.NewReader(tt.archive), policyload.Options{Entrypoints: []string{"p/allow"}})
			if err == nil {
				t.Fatalf("accepted, manifest %+v", b.Manifest)
			}
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one matching %v and containing %q", err, tt.is, tt.want)
			}
		})
	}
}

func TestFromTarGzRegoErrorsAreLocated(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"parse", "package p\n\nallow if {\n\tinput.x ==\n}\n", "/p.rego:5:1: unexpected } token"},
		{"type", "package p\n\nallow if count(1)\n", "/p.rego:3:10: count: invalid argument(s)"},
		{"unknown builtin", "package p\n\nallow if nope.f(1)\n", "/p.rego:3:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			archive := makeTarGz(t, tarEntry{name: "/p.rego", body: tt.src})
			_, err := policyload.FromTarGz(t.Context(), bytes.NewReader(archive), policyload.Options{Entrypoints: []string{"p/allow"}})
			var errs compiler.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("err = %v (%T), want compiler.Errors", err, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestLoadErrorsNameThePath(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.tar.gz")
	if err := os.WriteFile(bad, []byte("not a bundle"), 0o600); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken.rego")
	if err := os.WriteFile(broken, []byte("package p\n\nallow if {"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want string }{
		{filepath.Join(dir, "missing"), "no such file"},
		{bad, bad + ": bundle: invalid bundle: gzip"},
		{broken, broken + ":3:"},
	} {
		_, err := policyload.Load(t.Context(), tt.path, policyload.Options{Entrypoints: []string{"p/allow"}})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Load(%s): err = %v, want %q", tt.path, err, tt.want)
		}
	}
}

func TestFromTarGzRegoV0Bundle(t *testing.T) {
	archive := makeTarGz(t,
		tarEntry{name: "/.manifest", body: `{"revision": "old", "rego_version": 0}`},
		tarEntry{name: "/p/p.rego", body: "package p\n\nallow { input.n > 1 }\n"})
	b, err := policyload.FromTarGz(t.Context(), bytes.NewReader(archive), policyload.Options{Entrypoints: []string{"p/allow"}})
	if err != nil {
		t.Fatalf("a Rego v0 bundle: %v", err)
	}
	if got := evalWasm(t, b, "p/allow", `{"n": 2}`); got != "true" {
		t.Fatalf("got %s", got)
	}
	// Without the manifest's word, the same file is not Rego v1.
	archive = makeTarGz(t, tarEntry{name: "/p/p.rego", body: "package p\n\nallow { input.n > 1 }\n"})
	if _, err := policyload.FromTarGz(t.Context(), bytes.NewReader(archive), policyload.Options{Entrypoints: []string{"p/allow"}}); err == nil || !strings.Contains(err.Error(), "/p/p.rego:3:") {
		t.Fatalf("a v0 file read as v1: err = %v", err)
	}
}

func TestLoadBundleDirectory(t *testing.T) {
	ctx := t.Context()
	src := fixture.WriteTree(t, opaSources)
	b, err := policyload.Load(ctx, src, policyload.Options{Entrypoints: []string{"httpapi/authz/allow"}, Revision: "ignored"})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if b.Manifest.Revision != "rev-42" || !slices.Equal(b.Manifest.Roots, []string{"acl", "httpapi"}) || b.Manifest.Metadata["team"] != "payments" {
		t.Errorf("manifest %+v, want the directory's revision, roots and metadata", b.Manifest)
	}
	archive := fixture.OPABuild(t, src, compile.TargetRego)
	for _, input := range []string{`{"method": "GET", "user": "alice"}`, `{"method": "GET", "user": "bob"}`} {
		if got, want := evalWasm(t, b, "httpapi/authz/allow", input), evalOPA(t, archive, "data.httpapi.authz.allow", input); got != want {
			t.Errorf("%s: Wasm %s, OPA %s", input, got, want)
		}
	}

	// A directory holding a compiled bundle's files is used as it is.
	nb, err := compiler.Compile(ctx, compiler.Options{Paths: []string{src}, Entrypoints: []string{"httpapi/authz/allow"}, Revision: "compiled"})
	if err != nil {
		t.Fatal(err)
	}
	man, err := json.Marshal(nb.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	wasmDir := fixture.WriteTree(t, map[string]string{".manifest": string(man), "policy.wasm": string(nb.Wasm), "data.json": string(nb.Data)})
	wb, err := policyload.Load(ctx, wasmDir, policyload.Options{Entrypoints: []string{"httpapi/authz/allow"}})
	if err != nil {
		t.Fatalf("Load of a Wasm bundle directory: %v", err)
	}
	if !bytes.Equal(wb.Wasm, nb.Wasm) || wb.Manifest.Revision != "compiled" {
		t.Errorf("the directory's Wasm was not used: revision %q", wb.Manifest.Revision)
	}
	if got := evalWasm(t, wb, "httpapi/authz/allow", `{"method": "GET", "user": "alice"}`); got != "true" {
		t.Errorf("alice may GET: got %s", got)
	}

	// Errors name the file in the directory.
	bad := fixture.WriteTree(t, map[string]string{".manifest": `{"roots": ["p"]}`, "p/p.rego": "package p\n\nallow if count(1)\n"})
	_, err = policyload.Load(ctx, bad, policyload.Options{Entrypoints: []string{"p/allow"}})
	if want := filepath.Join(bad, "p", "p.rego") + ":3:10: count: invalid argument(s)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want %q", err, want)
	}
	outside := fixture.WriteTree(t, map[string]string{".manifest": `{"roots": ["q"]}`, "p/p.rego": "package p\n\nallow := true\n"})
	if _, err = policyload.Load(ctx, outside, policyload.Options{Entrypoints: []string{"p/allow"}}); !errors.Is(err, bundle.ErrInvalid) || !strings.Contains(err.Error(), "do not permit 'package p'") {
		t.Errorf("a package outside the roots: err = %v", err)
	}
}

// TestFromTarGzLimits: a Rego bundle's data.json (at any depth) over
// Options.Limits is refused from its header, naming the limit, as the
// server's --bundle-data-limit sets it; a file over the file limit too.
func TestFromTarGzLimits(t *testing.T) {
	tests := []struct {
		name      string
		entries   []tarEntry
		limits    bundle.Limits
		wantLimit string
	}{
		{name: "data.json", entries: []tarEntry{{name: "/p.rego", body: "package p\nallow := true\n"}, {name: "/data.json", body: `{"a":"` + strings.Repeat("x", 100) + `"}`}}, limits: bundle.Limits{Data: 64}, wantLimit: "data.json"},
		{name: "nested data.json", entries: []tarEntry{{name: "/p.rego", body: "package p\nallow := true\n"}, {name: "/x/y/data.json", body: `{"a":"` + strings.Repeat("x", 100) + `"}`}}, limits: bundle.Limits{Data: 64}, wantLimit: "data.json"},
		{name: "a claimed size over the default data limit", entries: []tarEntry{{name: "/data.json", size: bundle.DefaultMaxDataBytes + 1}}, wantLimit: "data.json"},
		{name: "another file", entries: []tarEntry{{name: "/p.rego", body: "package p\nallow := true\n" + strings.Repeat("#", 200)}}, limits: bundle.Limits{File: 128}, wantLimit: "file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policyload.FromTarGz(context.Background(), bytes.NewReader(makeTarGz(t, tt.entries...)), policyload.Options{Entrypoints: []string{"p/allow"}, Limits: tt.limits})
			var le *bundle.LimitError
			if !errors.Is(err, bundle.ErrTooLarge) || !errors.As(err, &le) || le.Limit != tt.wantLimit {
				t.Fatalf("FromTarGz: %v, want the %s limit", err, tt.wantLimit)
			}
		})
	}
}
