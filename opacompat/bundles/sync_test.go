package bundles

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	opabundle "github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/download"
	opakeys "github.com/open-policy-agent/opa/v1/keys"

	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
)

const manualBundle = `{"authz":{"service":"bundles","resource":"bundles/authz","trigger":"manual"}}`

func TestNexusBundleFetchedAndETag(t *testing.T) {
	srv := newBundleServer(t, nexusBundle(t, "r1", "alice"))
	l := newLoaded(t)
	s := newSyncer(t, srv.services(t), manualBundle, "", "", l)
	ctx := context.Background()

	if err := s.Trigger(ctx); err != nil {
		t.Fatal(err)
	}
	if !l.allows(t, "alice") || l.allows(t, "bob") {
		t.Fatal("revision r1 should allow alice only")
	}
	st := s.Status()[0]
	if st.Name != "authz" || st.ActiveRevision != "r1" || st.Code != "" || st.Size == 0 ||
		st.LastSuccessfulActivation.IsZero() || st.LastSuccessfulDownload.IsZero() || st.LastRequest.IsZero() {
		t.Fatalf("status after the first download: %+v", st)
	}

	// Unchanged: the request carries the ETag and the server answers 304.
	if err := s.Trigger(ctx); err != nil {
		t.Fatal(err)
	}
	reqs, codes := srv.snapshot()
	if got := reqs[1].Get("If-None-Match"); got == "" || codes[1] != http.StatusNotModified {
		t.Fatalf("second request: If-None-Match %q, answer %d; want the ETag and 304", got, codes[1])
	}
	if reqs[0].Get("If-None-Match") != "" {
		t.Fatal("the first request must not carry If-None-Match")
	}
	if got := reqs[0].Get("Prefer"); got != "modes=snapshot" {
		t.Fatalf("Prefer %q", got)
	}
	if l.count() != 1 {
		t.Fatalf("%d activations; a 304 must not activate again", l.count())
	}

	// A new revision is fetched and decides.
	srv.set(nexusBundle(t, "r2", "bob"))
	if err := s.Trigger(ctx); err != nil {
		t.Fatal(err)
	}
	if l.allows(t, "alice") || !l.allows(t, "bob") {
		t.Fatal("revision r2 should allow bob only")
	}
	if got := s.Status()[0].ActiveRevision; got != "r2" {
		t.Fatalf("active revision %q", got)
	}
}

func TestOPABuildBundleFetched(t *testing.T) {
	srv := newBundleServer(t, opaBuild(t, "opa-1", "carol"))
	l := newLoaded(t)
	s := newSyncer(t, srv.services(t), manualBundle, "", "", l)
	if err := s.Trigger(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !l.allows(t, "carol") || l.allows(t, "alice") {
		t.Fatal("the bundle built by opa build should allow carol only")
	}
	if got := s.Status()[0].ActiveRevision; got != "opa-1" {
		t.Fatalf("active revision %q", got)
	}
}

func TestLongPollReturnsOnNewRevision(t *testing.T) {
	srv := newBundleServer(t, nexusBundle(t, "r1", "alice"))
	srv.longPoll = true
	l := newLoaded(t)
	// Polls an hour apart: only long polling can bring r2 in time.
	s := newSyncer(t, srv.services(t), `{"authz":{"service":"bundles","polling":{"min_delay_seconds":3600,"max_delay_seconds":3600,"long_polling_timeout_seconds":25}}}`, "", "", l)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	l.waitRevision(t, "r1")
	srv.set(nexusBundle(t, "r2", "bob"))
	l.waitRevision(t, "r2")
	if !l.allows(t, "bob") {
		t.Fatal("r2 should allow bob")
	}
	reqs, _ := srv.snapshot()
	if got := reqs[len(reqs)-1].Get("Prefer"); got != "modes=snapshot;wait=25" {
		t.Fatalf("long poll Prefer %q", got)
	}
}

func TestBackoffOnServerErrors(t *testing.T) {
	srv := newBundleServer(t, nexusBundle(t, "r1", "alice"))
	srv.failures = 4
	l := newLoaded(t)
	s := newSyncer(t, srv.services(t), `{"authz":{"service":"bundles","polling":{"min_delay_seconds":3600,"max_delay_seconds":3600}}}`, "", "", l)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	// The retries come after a back-off (OPA's, from 100ms), not after
	// the hour between polls.
	l.waitRevision(t, "r1")
	cancel()
	<-done
	_, codes := srv.snapshot()
	if len(codes) != 5 || codes[0] != 500 || codes[4] != 200 {
		t.Fatalf("answers %v; want four 500s, then the bundle", codes)
	}
	if st := s.Status()[0]; st.Code != "" || st.HTTPCode != "" || st.ActiveRevision != "r1" {
		t.Fatalf("status after recovering: %+v", st)
	}
}

func TestTamperedBundlesRefused(t *testing.T) {
	priv, pub := rsaKey(t)
	otherPriv, _ := rsaKey(t)
	keys := keysJSON(t, "k1", pub)
	sign := func(raw []byte, key, kid, scope string) []byte {
		t.Helper()
		out, err := Sign(raw, SignOptions{Key: key, KeyID: kid, Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	good := sign(nexusBundle(t, "good", "alice"), priv, "k1", "prod")
	evil := nexusBundle(t, "evil", "mallory")

	// changed swaps data.json of the good, signed archive for another.
	changed := func() []byte {
		es := entries(t, good)
		for i := range es {
			if strings.HasSuffix(es[i].name, "data.json") {
				es[i].body = []byte(`{"test":{"allowed":"mallory"}}`)
			}
		}
		return pack(t, es)
	}
	// withEntry adds e to a validly signed archive.
	withEntry := func(e tarEntry) []byte {
		return pack(t, append(entries(t, sign(evil, priv, "k1", "prod")), e))
	}
	bomb := func() []byte {
		es := entries(t, evil)
		es = append(es, tarEntry{name: "/big.json", body: bytes.Repeat([]byte(" "), 3<<20)})
		return sign(pack(t, es), priv, "k1", "prod")
	}

	cases := []struct {
		name   string
		body   []byte
		status int
		want   error
		http   string
	}{
		{name: "file changed after signing", body: changed(), want: ErrVerification},
		{name: "signed by another key", body: sign(evil, otherPriv, "k1", "prod"), want: ErrVerification},
		{name: "unsigned", body: evil, want: ErrVerification},
		{name: "unknown key id", body: sign(evil, priv, "k2", "prod"), want: ErrVerification},
		{name: "wrong scope", body: sign(evil, priv, "k1", "dev"), want: ErrVerification},
		{name: "no scope", body: sign(evil, priv, "k1", ""), want: ErrVerification},
		{name: "path traversal", body: withEntry(tarEntry{name: "../../etc/evil.rego", body: []byte("package evil")}), want: ErrUnsafeArchive},
		{name: "symlink", body: withEntry(tarEntry{name: "/link.json", typeflag: '2', linkname: "/etc/passwd"}), want: ErrUnsafeArchive},
		{name: "hard link", body: withEntry(tarEntry{name: "/hard.json", typeflag: '1', linkname: "/data.json"}), want: ErrUnsafeArchive},
		{name: "file twice", body: withEntry(tarEntry{name: "./data.json", body: []byte(`{"test":{"allowed":"mallory"}}`)}), want: ErrUnsafeArchive},
		{name: "gzip bomb", body: bomb(), want: ErrTooLarge},
		{name: "download over the limit", body: append(bytes.Clone(good), make([]byte, 2<<20)...), want: ErrTooLarge},
		{name: "garbage", body: []byte("<html>not a bundle</html>")},
		{name: "server error", status: http.StatusInternalServerError, want: download.HTTPError{StatusCode: 500}, http: "500"},
		{name: "not found", status: http.StatusNotFound, want: download.HTTPError{StatusCode: 404}, http: "404"},
	}
	// One server and one syncer meet every attack in turn: the good
	// bundle, activated once, must outlive them all.
	srv := newBundleServer(t, good)
	l := newLoaded(t)
	s := newSyncer(t, srv.services(t), `{"authz":{"service":"bundles","trigger":"manual","size_limit_bytes":2097152,"signing":{"scope":"prod"}}}`, keys, "", l)
	ctx := context.Background()
	if err := s.Trigger(ctx); err != nil {
		t.Fatalf("the good bundle: %v", err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv.mu.Lock()
			srv.status = tc.status
			srv.mu.Unlock()
			if tc.body != nil {
				srv.set(tc.body)
			}
			err := s.Trigger(ctx)
			if err == nil {
				t.Fatal("accepted")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("error %v; want %v", err, tc.want)
			}
			if !l.allows(t, "alice") || l.allows(t, "mallory") {
				t.Fatal("the last good bundle no longer serves")
			}
			st := s.Status()[0]
			if st.ActiveRevision != "good" || st.Code != "bundle_error" || st.Message == "" || st.HTTPCode != tc.http {
				t.Fatalf("status %+v", st)
			}
			if l.count() != 1 {
				t.Fatalf("%d activations", l.count())
			}
		})
	}
	// The server recovers: the good bundle again is fine, and the status
	// clears.
	srv.mu.Lock()
	srv.status = 0
	srv.mu.Unlock()
	srv.set(good)
	if err := s.Trigger(ctx); err != nil {
		t.Fatal(err)
	}
	if st := s.Status()[0]; st.Code != "" || st.ActiveRevision != "good" {
		t.Fatalf("status after recovery %+v", st)
	}
	// After a failed attempt the ETag is forgotten: the request that
	// recovered named none.
	reqs, _ := srv.snapshot()
	if got := reqs[len(reqs)-1].Get("If-None-Match"); got != "" {
		t.Fatalf("the request after a failure named ETag %q", got)
	}
}

func TestSignedByOPABuildAccepted(t *testing.T) {
	priv, pub := rsaKey(t)
	raw := opaBuild(t, "opa-signed", "dave", "--signing-key", priv, "--signing-alg", "RS256", "--claims-file", claimsFile(t, `{"scope":"prod"}`))
	srv := newBundleServer(t, raw)
	l := newLoaded(t)
	// opa build puts no key id in the token given a claims file: the
	// configuration names the key, as OPA's users do.
	s := newSyncer(t, srv.services(t), `{"authz":{"service":"bundles","trigger":"manual","signing":{"keyid":"ci","scope":"prod"}}}`, keysJSON(t, "ci", pub), "", l)
	if err := s.Trigger(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !l.allows(t, "dave") {
		t.Fatal("the signed OPA bundle should allow dave")
	}
	// The same archive with its policy edited is refused.
	es := entries(t, raw)
	for i := range es {
		if strings.HasSuffix(es[i].name, ".rego") {
			es[i].body = []byte("package test\n\nallow := true\n")
		}
	}
	srv.set(pack(t, es))
	if err := s.Trigger(context.Background()); !errors.Is(err, ErrVerification) {
		t.Fatalf("an edited policy: %v; want a verification error", err)
	}
	if l.allows(t, "mallory") {
		t.Fatal("the edited policy took effect")
	}
}

func claimsFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "claims.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSignAcceptedByOPAVerifier(t *testing.T) {
	priv, pub := rsaKey(t)
	raw, err := Sign(nexusBundle(t, "r1", "alice"), SignOptions{Key: priv, Algorithm: "RS256", KeyID: "k1", Scope: "prod", ClaimsFile: claimsFile(t, `{"iss":"ci"}`)})
	if err != nil {
		t.Fatal(err)
	}
	vc := opabundle.NewVerificationConfig(map[string]*opakeys.Config{"k1": {Key: pub, Algorithm: "RS256"}}, "", "prod", nil)
	b, err := opabundle.NewReader(bytes.NewReader(raw)).WithBundleVerificationConfig(vc).Read()
	if err != nil {
		t.Fatalf("OPA's verifier refused nexus' signature: %v", err)
	}
	if b.Manifest.Revision != "r1" || len(b.WasmModules) != 1 {
		t.Fatalf("OPA read %+v", b.Manifest)
	}
	// OPA's verifier holds nexus' signature to the files: a changed
	// policy.wasm is refused.
	es := entries(t, raw)
	for i := range es {
		if strings.HasSuffix(es[i].name, "policy.wasm") {
			es[i].body = append(bytes.Clone(es[i].body), 0)
		}
	}
	if _, err := opabundle.NewReader(bytes.NewReader(pack(t, es))).WithBundleVerificationConfig(vc).Read(); err == nil {
		t.Fatal("OPA's verifier accepted a changed policy.wasm")
	}
	// With another scope configured, OPA refuses it.
	vc2 := opabundle.NewVerificationConfig(map[string]*opakeys.Config{"k1": {Key: pub, Algorithm: "RS256"}}, "", "dev", nil)
	if _, err := opabundle.NewReader(bytes.NewReader(raw)).WithBundleVerificationConfig(vc2).Read(); err == nil {
		t.Fatal("OPA's verifier accepted the wrong scope")
	}
}

func TestPersistedBundleServesAfterRestart(t *testing.T) {
	priv, pub := rsaKey(t)
	keys := keysJSON(t, "k1", pub)
	raw, err := Sign(nexusBundle(t, "r1", "alice"), SignOptions{Key: priv, KeyID: "k1", Scope: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	srv := newBundleServer(t, raw)
	dir := t.TempDir()
	cfg := `{"authz":{"service":"bundles","persist":true,"polling":{"min_delay_seconds":3600,"max_delay_seconds":3600},"signing":{"scope":"prod"}}}`
	svcs := srv.services(t)

	l1 := newLoaded(t)
	s1 := newSyncer(t, svcs, cfg, keys, dir, l1)
	if err := s1.Trigger(context.Background()); err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile(filepath.Join(dir, "authz", "bundle.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(saved, raw) {
		t.Fatal("the persisted bundle is not the archive as downloaded")
	}
	srv.Close() // the bundle server goes away

	restart := func(t *testing.T) (*loaded, *Syncer) {
		l := newLoaded(t)
		s := newSyncer(t, svcs, cfg, keys, dir, l)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		return l, s
	}
	t.Run("loaded before the first download", func(t *testing.T) {
		l := newLoaded(t)
		s := newSyncer(t, svcs, cfg, keys, dir, l)
		if err := s.LoadPersisted(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !l.allows(t, "alice") || s.Status()[0].ActiveRevision != "r1" {
			t.Fatal("the persisted bundle does not decide at once")
		}
	})
	t.Run("restart with the server down", func(t *testing.T) {
		l, s := restart(t)
		l.waitRevision(t, "r1")
		if !l.allows(t, "alice") {
			t.Fatal("the persisted bundle does not serve")
		}
		// The status records the activation once OnBundle has returned,
		// which may be just after the load above was seen.
		deadline := time.Now().Add(10 * time.Second)
		for st := s.Status()[0]; st.ActiveRevision != "r1"; st = s.Status()[0] {
			if time.Now().After(deadline) {
				t.Fatalf("status %+v", st)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	t.Run("a tampered persisted bundle is refused", func(t *testing.T) {
		es := entries(t, saved)
		for i := range es {
			if strings.HasSuffix(es[i].name, "data.json") {
				es[i].body = []byte(`{"test":{"allowed":"mallory"}}`)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "authz", "bundle.tar.gz"), pack(t, es), 0o600); err != nil {
			t.Fatal(err)
		}
		l := newLoaded(t)
		s := newSyncer(t, svcs, cfg, keys, dir, l)
		err := s.loadPersisted(context.Background(), s.state[0])
		if !errors.Is(err, ErrVerification) {
			t.Fatalf("loading a tampered persisted bundle: %v", err)
		}
		if l.count() != 0 || s.Status()[0].Code != "bundle_error" {
			t.Fatalf("activations %d, status %+v", l.count(), s.Status()[0])
		}
	})
}

func TestStatusJSONLikeOPA(t *testing.T) {
	st := Status{Name: "authz", ActiveRevision: "r1", Code: "bundle_error", Message: "m", HTTPCode: "500", Size: 3}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "active_revision", "last_successful_activation", "last_successful_download", "last_successful_request", "last_request", "code", "message", "http_code", "size"} {
		if _, ok := m[k]; !ok {
			t.Errorf("status JSON lacks %q: %s", k, b)
		}
	}
}

// TestLongPollOutlivesResponseHeaderTimeout: a held long poll is not cut
// by the service's response header timeout (one second here), as OPA lifts
// it for long polls.
func TestLongPollOutlivesResponseHeaderTimeout(t *testing.T) {
	srv := newBundleServer(t, nexusBundle(t, "r1", "alice"))
	srv.longPoll = true
	svcs, err := opaconfig.ParseServices(json.RawMessage(`{"bundles":{"url":"` + srv.URL + `","response_header_timeout_seconds":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	l := newLoaded(t)
	s := newSyncer(t, svcs, `{"authz":{"service":"bundles","polling":{"min_delay_seconds":3600,"max_delay_seconds":3600,"long_polling_timeout_seconds":20}}}`, "", "", l)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	l.waitRevision(t, "r1")
	// The next request is held; publish only after the header timeout
	// has passed.
	time.Sleep(1500 * time.Millisecond)
	srv.set(nexusBundle(t, "r2", "bob"))
	l.waitRevision(t, "r2")
	if st := s.Status()[0]; st.Code != "" {
		t.Fatalf("the held request failed: %+v", st)
	}
	_, codes := srv.snapshot()
	if len(codes) != 2 {
		t.Fatalf("answers %v: the held request was cut and retried", codes)
	}
}

// TestCompileErrorsListedInStatus: a bundle whose Rego does not compile is
// refused, and its errors are listed one by one, as OPA's status lists
// them.
func TestCompileErrorsListedInStatus(t *testing.T) {
	good := nexusBundle(t, "r1", "alice")
	srv := newBundleServer(t, good)
	l := newLoaded(t)
	s := newSyncer(t, srv.services(t), manualBundle, "", "", l)
	if err := s.Trigger(context.Background()); err != nil {
		t.Fatal(err)
	}
	bad := pack(t, []tarEntry{
		{name: "/.manifest", body: []byte(`{"revision":"bad","roots":["test"]}`)},
		{name: "/test/a.rego", body: []byte("package test\n\nallow if input.x == unsafe_a\n")},
		{name: "/test/b.rego", body: []byte("package test\n\nother if input.y == unsafe_b\n")},
	})
	srv.set(bad)
	if err := s.Trigger(context.Background()); err == nil {
		t.Fatal("a bundle that does not compile was accepted")
	}
	st := s.Status()[0]
	if st.ActiveRevision != "r1" || st.Code != "bundle_error" || len(st.Errors) != 2 {
		t.Fatalf("status %+v", st)
	}
	if !l.allows(t, "alice") {
		t.Fatal("the last good bundle no longer serves")
	}
}

// TestSignedBundleWithoutSigningConfigRefused: as OPA, a signed bundle is
// refused when no signing is configured for it (there is no key to check
// it with).
func TestSignedBundleWithoutSigningConfigRefused(t *testing.T) {
	priv, _ := rsaKey(t)
	signed, err := Sign(nexusBundle(t, "r1", "alice"), SignOptions{Key: priv})
	if err != nil {
		t.Fatal(err)
	}
	srv := newBundleServer(t, signed)
	l := newLoaded(t)
	s := newSyncer(t, srv.services(t), manualBundle, "", "", l)
	if err := s.Trigger(context.Background()); !errors.Is(err, ErrVerification) {
		t.Fatalf("a signed bundle without signing configured: %v", err)
	}
	if l.count() != 0 {
		t.Fatal("activated")
	}
}

// TestSupersededETagsSent: with superseded_etag_ttl_seconds, the requests
// after a new bundle keep naming the replaced bundle's ETag, so that a
// server replica still holding it answers 304 rather than sending it back.
func TestSupersededETagsSent(t *testing.T) {
	srv := newBundleServer(t, nexusBundle(t, "r1", "alice"))
	l := newLoaded(t)
	s := newSyncer(t, srv.services(t), `{"authz":{"service":"bundles","trigger":"manual","polling":{"superseded_etag_ttl_seconds":60}}}`, "", "", l)
	ctx := context.Background()
	if err := s.Trigger(ctx); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	old := srv.etag
	srv.mu.Unlock()
	srv.set(nexusBundle(t, "r2", "bob"))
	for range 2 {
		if err := s.Trigger(ctx); err != nil {
			t.Fatal(err)
		}
	}
	reqs, codes := srv.snapshot()
	got := reqs[len(reqs)-1].Get("If-None-Match")
	if !strings.Contains(got, old) || codes[len(codes)-1] != http.StatusNotModified {
		t.Fatalf("If-None-Match %q, answer %d; want the replaced ETag %s named and 304", got, codes[len(codes)-1], old)
	}
	if l.count() != 2 {
		t.Fatalf("%d activations", l.count())
	}
}
