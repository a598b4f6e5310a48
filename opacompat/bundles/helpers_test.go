package bundles

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	opabundle "github.com/open-policy-agent/opa/v1/bundle"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/engine"
	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
)

// The policy every test bundle holds: the user named in data is allowed.
const (
	testEntrypoint = "test/allow"
	testRego       = "package test\n\ndefault allow := false\n\nallow if input.user == data.test.allowed\n"
)

// nexusBundle compiles the test policy with nexus' compiler and writes it
// as `nexus compile` does.
func nexusBundle(t *testing.T, revision, allowed string) []byte {
	t.Helper()
	b, err := compiler.Compile(context.Background(), compiler.Options{
		Modules:     map[string]string{"test.rego": testRego},
		DataJSON:    []byte(`{"test":{"allowed":"` + allowed + `"}}`),
		Entrypoints: []string{testEntrypoint},
		Revision:    revision,
		Roots:       []string{"test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := b.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// compileTarball is Options.Compile for the tests: a bundle with a Wasm
// module is read as is, an OPA bundle's Rego and data are compiled.
func compileTarball(ctx context.Context, raw []byte) (*bundle.Bundle, error) {
	ob, err := opabundle.NewReader(bytes.NewReader(raw)).WithSkipBundleVerification(true).Read()
	if err != nil {
		return nil, err
	}
	if len(ob.WasmModules) > 0 {
		return bundle.Read(bytes.NewReader(raw))
	}
	mods := map[string]string{}
	for _, m := range ob.Modules {
		mods[m.Path] = string(m.Raw)
	}
	data, err := json.Marshal(ob.Data)
	if err != nil {
		return nil, err
	}
	var roots []string
	if ob.Manifest.Roots != nil {
		roots = *ob.Manifest.Roots
	}
	return compiler.Compile(ctx, compiler.Options{Modules: mods, DataJSON: data, Entrypoints: []string{testEntrypoint}, Revision: ob.Manifest.Revision, Roots: roots})
}

// loaded is a real engine fed by a Syncer, counting activations.
type loaded struct {
	eng         *engine.Engine
	mu          sync.Mutex
	activations []string
	changed     chan string
}

func newLoaded(t *testing.T) *loaded {
	t.Helper()
	eng, err := engine.New(context.Background(), engine.Config{MaxInstances: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	return &loaded{eng: eng, changed: make(chan string, 16)}
}

func (l *loaded) OnBundle(ctx context.Context, b *bundle.Bundle) error {
	if err := l.eng.Load(ctx, b); err != nil {
		return err
	}
	l.mu.Lock()
	l.activations = append(l.activations, b.Manifest.Revision)
	l.mu.Unlock()
	l.changed <- b.Manifest.Revision
	return nil
}

func (l *loaded) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.activations)
}

// allows evaluates the loaded policy for user.
func (l *loaded) allows(t *testing.T, user string) bool {
	t.Helper()
	out, err := l.eng.Eval(context.Background(), testEntrypoint, []byte(`{"user":"`+user+`"}`), nil)
	if err != nil {
		t.Fatalf("eval: %v", err)
	}
	switch string(out) {
	case "true":
		return true
	case "false":
		return false
	}
	t.Fatalf("eval: unexpected result %s", out)
	return false
}

// waitRevision waits for the activation of revision.
func (l *loaded) waitRevision(t *testing.T, revision string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case r := <-l.changed:
			if r == revision {
				return
			}
		case <-deadline:
			t.Fatalf("revision %s was not activated", revision)
		}
	}
}

// bundleServer is a bundle server as OPA's users run them: it answers
// GET /bundles/<name> with the current archive and its ETag, 304 for a
// matching If-None-Match, and holds a request that asks to wait (Prefer:
// wait=N) until the archive changes when longPoll is set.
type bundleServer struct {
	*httptest.Server
	mu       sync.Mutex
	body     []byte
	etag     string
	status   int // answered instead of the bundle when not 0
	failures int // answer status this many times, then the bundle
	longPoll bool
	changed  chan struct{}
	requests []http.Header
	codes    []int
}

func newBundleServer(t *testing.T, body []byte) *bundleServer {
	t.Helper()
	s := &bundleServer{changed: make(chan struct{})}
	s.set(body)
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// set publishes a new archive (a new ETag) and wakes long polls.
func (s *bundleServer) set(body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body = body
	s.etag = fmt.Sprintf(`"%x"`, len(s.requests)*1000+len(body))
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *bundleServer) answer(w http.ResponseWriter, code int) {
	s.codes = append(s.codes, code)
	w.WriteHeader(code)
}

func (s *bundleServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, r.Header.Clone())
	if s.failures > 0 {
		s.failures--
		s.answer(w, http.StatusInternalServerError)
		s.mu.Unlock()
		return
	}
	if s.status != 0 {
		s.answer(w, s.status)
		s.mu.Unlock()
		return
	}
	wait := s.longPoll && strings.Contains(r.Header.Get("Prefer"), "wait=")
	if s.matches(r) && wait {
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		case <-time.After(30 * time.Second):
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	if s.longPoll {
		w.Header().Set("Content-Type", "application/vnd.openpolicyagent.bundles")
	} else {
		w.Header().Set("Content-Type", "application/gzip")
	}
	if s.matches(r) {
		w.Header().Set("ETag", s.etag)
		s.answer(w, http.StatusNotModified)
		return
	}
	w.Header().Set("ETag", s.etag)
	s.codes = append(s.codes, http.StatusOK)
	_, _ = w.Write(s.body)
}

// matches reports whether the request's If-None-Match (a list of ETags)
// names the current archive.
func (s *bundleServer) matches(r *http.Request) bool {
	for _, e := range strings.Split(r.Header.Get("If-None-Match"), ",") {
		if strings.TrimSpace(e) == s.etag {
			return true
		}
	}
	return false
}

func (s *bundleServer) snapshot() ([]http.Header, []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.requests...), append([]int(nil), s.codes...)
}

// services configures the server as OPA's services section does.
func (s *bundleServer) services(t *testing.T) map[string]*opaconfig.Service {
	t.Helper()
	svcs, err := opaconfig.ParseServices(json.RawMessage(`{"bundles":{"url":"` + s.URL + `"}}`))
	if err != nil {
		t.Fatal(err)
	}
	return svcs
}

// newSyncer parses the bundles section (and keys) and returns a Syncer
// that feeds l.
func newSyncer(t *testing.T, svcs map[string]*opaconfig.Service, bundles, keys, dir string, l *loaded) *Syncer {
	t.Helper()
	srcs, err := ParseConfig(json.RawMessage(bundles), json.RawMessage(keys), svcs)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Sources: srcs, Dir: dir, Compile: compileTarball, OnBundle: l.OnBundle})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rsaKey writes a new RSA key pair as PEM files and returns their paths
// and the public key's PEM.
func rsaKey(t *testing.T) (private, public string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	private = filepath.Join(dir, "key.pem")
	if err := os.WriteFile(private, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), 0o600); err != nil {
		t.Fatal(err)
	}
	return private, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
}

// keysJSON is a keys section with one RSA public key.
func keysJSON(t *testing.T, id, public string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{id: map[string]string{"algorithm": "RS256", "key": public}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tarEntry is one entry of a hand-made archive.
type tarEntry struct {
	name     string
	body     []byte
	typeflag byte
	linkname string
}

// entries unpacks an archive.
func entries(t *testing.T, raw []byte) []tarEntry {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var out []tarEntry
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarEntry{name: hdr.Name, body: body, typeflag: hdr.Typeflag, linkname: hdr.Linkname})
	}
}

// pack writes entries as a .tar.gz.
func pack(t testing.TB, es []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range es {
		tf := e.typeflag
		if tf == 0 {
			tf = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: tf, Linkname: e.linkname}
		if tf == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if tf == tar.TypeReg {
			if _, err := tw.Write(e.body); err != nil {
				t.Fatal(err)
			}
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

var (
	opaOnce sync.Once
	opaPath string
	opaErr  error
	opaDir  string
)

// opaCLI builds OPA's own command line (the version nexus links) once
// per test run, in a scratch module.
func opaCLI(t *testing.T) string {
	t.Helper()
	opaOnce.Do(func() {
		opaDir, opaErr = os.MkdirTemp("", "nexus-opa-cli-")
		if opaErr != nil {
			return
		}
		files := map[string]string{
			"go.mod":   "module opacli\n\ngo 1.25\n\nrequire github.com/open-policy-agent/opa " + opaVersion + "\n",
			"tools.go": "//go:build tools\n\npackage tools\n\nimport _ \"github.com/open-policy-agent/opa\"\n",
		}
		for name, body := range files {
			if opaErr = os.WriteFile(filepath.Join(opaDir, name), []byte(body), 0o644); opaErr != nil {
				return
			}
		}
		opaPath = filepath.Join(opaDir, "opa")
		for _, args := range [][]string{{"mod", "tidy"}, {"build", "-o", opaPath, "github.com/open-policy-agent/opa"}} {
			cmd := exec.Command("go", args...)
			cmd.Dir = opaDir
			cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
			if out, err := cmd.CombinedOutput(); err != nil {
				opaErr = fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
				return
			}
		}
	})
	if opaErr != nil {
		t.Skipf("OPA's command line cannot be built here (no module proxy?): %v", opaErr)
	}
	return opaPath
}

// opaVersion is the OPA release nexus links (go.mod).
const opaVersion = "v1.22.3"

func TestMain(m *testing.M) {
	code := m.Run()
	if opaDir != "" {
		os.RemoveAll(opaDir)
	}
	os.Exit(code)
}

// opaBuild runs `opa build` on a directory holding the test policy and
// data, with extra flags, and returns the archive.
func opaBuild(t *testing.T, revision, allowed string, flags ...string) []byte {
	t.Helper()
	opa := opaCLI(t)
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "test"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "test", "test.rego"), []byte(testRego), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "test", "data.json"), []byte(`{"allowed":"`+allowed+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "bundle.tar.gz")
	args := append([]string{"build", "-b", src, "-r", revision, "-o", out}, flags...)
	cmd := exec.Command(opa, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("opa %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
