package bundles

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	opabundle "github.com/open-policy-agent/opa/v1/bundle"
	opakeys "github.com/open-policy-agent/opa/v1/keys"
)

// opaSign writes a bundle directory holding the test policy, data that
// allows allowed, and a manifest with revision; signs it with OPA's own
// `opa sign --bundle .` run in the directory (with claimsFile when not
// ""), which writes .signatures.json there; and returns the directory's
// files, the signatures included, named from its root.
func opaSign(t *testing.T, key, claimsFile, revision, allowed string) []tarEntry {
	t.Helper()
	opa := opaCLI(t)
	src := t.TempDir()
	files := map[string]string{
		".manifest":      `{"revision":"` + revision + `","roots":["test"]}`,
		"test/test.rego": testRego,
		"test/data.json": `{"allowed":"` + allowed + `"}`,
	}
	for name, body := range files {
		p := filepath.Join(src, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// opa sign names each file by the path it was given joined with the
	// file's path in the directory ("dir/test/data.json" for --bundle
	// dir), while a tarball's files are named from its root: so it is run
	// in the directory, as --bundle ., and writes .signatures.json there
	// (its default output directory is the current one).
	args := []string{"sign", "--signing-key", key, "--bundle", "."}
	if claimsFile != "" {
		args = append(args, "--claims-file", claimsFile)
	}
	cmd := exec.Command(opa, args...)
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("opa %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	sigs, err := os.ReadFile(filepath.Join(src, ".signatures.json"))
	if err != nil {
		t.Fatalf("opa sign wrote no .signatures.json: %v", err)
	}
	var doc struct {
		Signatures []string `json:"signatures"`
	}
	if err := json.Unmarshal(sigs, &doc); err != nil || len(doc.Signatures) != 1 || strings.Count(doc.Signatures[0], ".") != 2 {
		t.Fatalf("opa sign wrote %s (%v), want one JWT", sigs, err)
	}
	files[".signatures.json"] = string(sigs)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	es := make([]tarEntry, 0, len(names))
	for _, name := range names {
		es = append(es, tarEntry{name: name, body: []byte(files[name])})
	}
	return es
}

// packAs packs es as a tarball whose names start with prefix.
func packAs(t *testing.T, prefix string, es []tarEntry) []byte {
	t.Helper()
	named := slices.Clone(es)
	for i := range named {
		named[i].name = prefix + named[i].name
	}
	return pack(t, named)
}

// TestSignedByOPASignAccepted: a bundle directory signed by OPA's own
// `opa sign` and packed as a tarball is accepted by the downloader with
// the matching public key and activated, whether the tarball's names
// start with "/" (as opa build writes them) or with nothing; it is
// refused, and nothing is activated, with another public key under the
// same key id, with a scope other than the signed one, when a file
// changed after signing, and when the names start with "./" (as
// `tar -C dir -czf bundle.tar.gz .` writes them: the signature names
// ".manifest", the tarball "./.manifest"). OPA's own bundle reader is
// asked about each tarball too and must decide the same.
func TestSignedByOPASignAccepted(t *testing.T) {
	priv, pub := rsaKey(t)
	_, otherPub := rsaKey(t)
	plain := opaSign(t, priv, "", "opa-sign", "erin")
	scoped := opaSign(t, priv, claimsFile(t, `{"scope":"prod"}`), "opa-sign-scoped", "erin")
	tampered := slices.Clone(plain)
	for i := range tampered {
		if strings.HasSuffix(tampered[i].name, "data.json") {
			tampered[i].body = []byte(`{"allowed":"mallory"}`)
		}
	}

	for _, tc := range []struct {
		name    string
		body    []byte
		pub     string
		scope   string // the signing scope configured; "" for none
		wantRev string // "" means refused
	}{
		// opa sign puts no key id in the token: the configuration names
		// the key.
		{name: "matching key", body: packAs(t, "/", plain), pub: pub, wantRev: "opa-sign"},
		{name: "matching key, names without a slash", body: packAs(t, "", plain), pub: pub, wantRev: "opa-sign"},
		{name: "another key", body: packAs(t, "/", plain), pub: otherPub},
		{name: "matching key and scope", body: packAs(t, "/", scoped), pub: pub, scope: "prod", wantRev: "opa-sign-scoped"},
		{name: "another scope", body: packAs(t, "/", scoped), pub: pub, scope: "dev"},
		{name: "file changed after signing", body: packAs(t, "/", tampered), pub: pub},
		{name: "names starting with ./", body: packAs(t, "./", plain), pub: pub},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// OPA's own bundle reader, given the same key and scope,
			// decides the same.
			vc := opabundle.NewVerificationConfig(map[string]*opakeys.Config{"ci": {Key: tc.pub, Algorithm: "RS256"}}, "ci", tc.scope, nil)
			if _, err := opabundle.NewReader(bytes.NewReader(tc.body)).WithBundleVerificationConfig(vc).Read(); (err == nil) != (tc.wantRev != "") {
				t.Fatalf("OPA's reader: %v; the test expects accepted=%v", err, tc.wantRev != "")
			}
			signing, err := json.Marshal(map[string]string{"keyid": "ci", "scope": tc.scope})
			if err != nil {
				t.Fatal(err)
			}
			srv := newBundleServer(t, tc.body)
			l := newLoaded(t)
			s := newSyncer(t, srv.services(t), `{"authz":{"service":"bundles","trigger":"manual","signing":`+string(signing)+`}}`, keysJSON(t, "ci", tc.pub), "", l)
			err = s.Trigger(context.Background())
			if tc.wantRev == "" {
				if !errors.Is(err, ErrVerification) {
					t.Fatalf("error %v; want a verification error", err)
				}
				if l.count() != 0 {
					t.Fatalf("%d activations of a refused bundle", l.count())
				}
				return
			}
			if err != nil {
				t.Fatalf("the bundle signed by opa sign: %v", err)
			}
			if !l.allows(t, "erin") || l.allows(t, "mallory") {
				t.Fatal("the bundle signed by opa sign should allow erin only")
			}
			if st := s.Status()[0]; st.ActiveRevision != tc.wantRev || st.Code != "" {
				t.Fatalf("status %+v; want revision %q active", st, tc.wantRev)
			}
		})
	}
}
