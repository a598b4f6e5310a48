package policyload_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/policyload"

	"github.com/nexuspdp/nexus/internal/fixture"
)

// configMapPolicy is the policy the ConfigMap tests mount.
const configMapPolicy = `package envoy.authz

default allow := false

allow if input.user == "alice"
`

// configMapDir lays out dir as the kubelet lays out a ConfigMap volume
// holding the given files: the files in a timestamped "..2026_..."
// directory, a "..data" link to it, and a link per file through ..data.
func configMapDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	ts := "..2026_12_02_00_00_00.123456789"
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, ts, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(ts, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadConfigMapMount(t *testing.T) {
	ctx := t.Context()
	dir := configMapDir(t, map[string]string{"policy.rego": configMapPolicy})
	opts := policyload.Options{Entrypoints: []string{"envoy/authz/allow"}}

	// Every file is found three times: nexus stops, as OPA does, naming
	// the files and what to do.
	_, err := policyload.Load(ctx, dir, opts)
	if err == nil {
		t.Fatal("Load without Ignore succeeded; want the duplicate rules")
	}
	for _, want := range []string{"multiple default rules", filepath.Join(dir, "..data", "policy.rego"), "--ignore=.*", "--policy-ignore=.*"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v\nwant it to name %q", err, want)
		}
	}

	opts.Ignore = []string{".*"}
	b, err := policyload.Load(ctx, dir, opts)
	if err != nil {
		t.Fatalf("Load with Ignore .*: %v", err)
	}
	for input, want := range map[string]string{`{"user": "alice"}`: "true", `{"user": "bob"}`: "false"} {
		if got := evalWasm(t, b, "envoy/authz/allow", input); got != want {
			t.Errorf("%s: allow = %s, want %s", input, got, want)
		}
	}
}

func TestLoadIgnore(t *testing.T) {
	ctx := t.Context()
	// Each pattern has something to skip that would break the policy if
	// it were loaded: a second default rule, or data that turns the
	// decision.
	dir := fixture.WriteTree(t, map[string]string{
		"policy.rego":          configMapPolicy + "\nallow if data.users[input.user]\n",
		"policy_test.rego":     "package envoy.authz\n\ndefault allow := true\n",
		".hidden/policy.rego":  "package envoy.authz\n\ndefault allow := true\n",
		"vendor/x/policy.rego": "package envoy.authz\n\ndefault allow := true\n",
		"users/.users.json":    `{"bob": true}`,
	})
	opts := policyload.Options{Entrypoints: []string{"envoy/authz/allow"}}
	tests := []struct {
		name   string
		ignore []string
		ok     bool
	}{
		{name: "nothing ignored", ignore: nil},
		{name: "a named file only", ignore: []string{"policy_test.rego"}},
		{name: "dot names only", ignore: []string{".*"}},
		{name: "all but the directory", ignore: []string{"*_test.rego", ".*"}},
		{name: "file, dot names and a directory", ignore: []string{"*_test.rego", ".*", "vendor"}, ok: true},
		{name: "names one by one", ignore: []string{"vendor", "policy_test.rego", ".hidden", ".users.json"}, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := opts
			opts.Ignore = tt.ignore
			b, err := policyload.Load(ctx, dir, opts)
			if !tt.ok {
				if err == nil || !strings.Contains(err.Error(), "multiple default rules") {
					t.Fatalf("err = %v, want multiple default rules", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := evalWasm(t, b, "envoy/authz/allow", `{"user": "bob"}`); got != "false" {
				t.Errorf("bob: allow = %s, want false (an ignored file was loaded)", got)
			}
		})
	}

	// The path given is never ignored itself (OPA filters from depth 1).
	one := filepath.Join(dir, "policy.rego")
	if _, err := policyload.Load(ctx, one, policyload.Options{Entrypoints: opts.Entrypoints, Ignore: []string{"*.rego"}}); err != nil {
		t.Errorf("a .rego file matching the pattern, given itself: %v", err)
	}

	if _, err := policyload.Load(ctx, dir, policyload.Options{Entrypoints: opts.Entrypoints, Ignore: []string{"[a-"}}); !errors.Is(err, filepath.ErrBadPattern) || !strings.Contains(err.Error(), `"[a-"`) {
		t.Errorf("malformed pattern: err = %v, want ErrBadPattern naming it", err)
	}
}

func TestIgnoreFilter(t *testing.T) {
	dir := fixture.WriteTree(t, map[string]string{"a.rego": "", ".x.rego": "", "vendor/b.rego": "", "..data/c.rego": ""})
	f, err := policyload.IgnoreFilter([]string{".*", "vendor", "a.*"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		path  string
		depth int
		want  bool
	}{
		{name: "a file named by a pattern", path: "a.rego", depth: 1, want: true},
		{name: "a dot-file", path: ".x.rego", depth: 1, want: true},
		{name: "a dot-directory", path: "..data", depth: 1, want: true},
		{name: "a named directory", path: "vendor", depth: 1, want: true},
		{name: "a file in a kept directory", path: "vendor/b.rego", depth: 2},
		{name: "the path given", path: "a.rego", depth: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, filepath.FromSlash(tt.path))
			info, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := f(p, info, tt.depth); got != tt.want {
				t.Errorf("filter(%s, depth %d) = %v, want %v", tt.path, tt.depth, got, tt.want)
			}
		})
	}
	if f, err := policyload.IgnoreFilter(nil); f != nil || err != nil {
		t.Errorf("no patterns: filter set %v, err %v; want none", f != nil, err)
	}
}

func TestLoadIgnoreBundles(t *testing.T) {
	ctx := t.Context()
	files := map[string]string{
		".manifest":                     `{"revision": "rev-7", "roots": ["envoy"]}`,
		"envoy/authz/policy.rego":       configMapPolicy,
		"envoy/authz/.backup/old.rego":  "package envoy.authz\n\ndefault allow := true\n",
		"envoy/authz/policy_test.rego":  "package envoy.authz\n\ndefault allow := true\n",
		"envoy/authz/fixtures/x.rego":   "package envoy.authz\n\ndefault allow := true\n",
		"envoy/authz/fixtures/y/z.rego": "package envoy.authz\n\ndefault allow := true\n",
	}
	ignore := []string{".backup", "*_test.rego", "fixtures"}
	opts := policyload.Options{Entrypoints: []string{"envoy/authz/allow"}}

	check := func(t *testing.T, b *bundle.Bundle, err error, revision string) {
		t.Helper()
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if b.Manifest.Revision != revision {
			t.Errorf("revision %q, want %q", b.Manifest.Revision, revision)
		}
		if got := evalWasm(t, b, "envoy/authz/allow", `{"user": "bob"}`); got != "false" {
			t.Errorf("bob: allow = %s, want false", got)
		}
	}

	t.Run("bundle directory", func(t *testing.T) {
		dir := fixture.WriteTree(t, files)
		if _, err := policyload.Load(ctx, dir, opts); err == nil {
			t.Fatal("without Ignore the skipped files must clash")
		}
		o := opts
		o.Ignore = ignore
		b, err := policyload.Load(ctx, dir, o)
		check(t, b, err, "rev-7")

		// ".*" skips the .manifest too: the directory is then plain, its
		// revision the one asked for.
		o.Ignore = append(ignore, ".*")
		o.Revision = "plain"
		b, err = policyload.Load(ctx, dir, o)
		check(t, b, err, "plain")
	})

	t.Run("archive", func(t *testing.T) {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		for name, body := range files {
			if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write([]byte(body)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := gz.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := policyload.FromTarGz(ctx, bytes.NewReader(buf.Bytes()), opts); err == nil {
			t.Fatal("without Ignore the skipped files must clash")
		}
		o := opts
		o.Ignore = ignore
		b, err := policyload.FromTarGz(ctx, bytes.NewReader(buf.Bytes()), o)
		check(t, b, err, "rev-7")

		p := filepath.Join(t.TempDir(), "bundle.tar.gz")
		if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err = policyload.Load(ctx, p, o)
		check(t, b, err, "rev-7")
	})
}
