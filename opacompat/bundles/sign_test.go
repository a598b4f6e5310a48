package bundles

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	opabundle "github.com/open-policy-agent/opa/v1/bundle"
	opakeys "github.com/open-policy-agent/opa/v1/keys"
)

// TestSignKeepsFiles: Sign writes every entry back as it was, in its
// order (a directory, data spaced by hand, a file OPA does not read),
// drops each previous signatures file, at the root or below, and appends
// its own; OPA's reader verifies the result and reads the data.
func TestSignKeepsFiles(t *testing.T) {
	priv, pub := rsaKey(t)
	kept := []tarEntry{
		{name: "/test/", typeflag: '5'},
		{name: "/.manifest", body: []byte(`{"revision":"r1", "roots":["test"]}`)},
		{name: "/test/test.rego", body: []byte(testRego)},
		{name: "/test/data.json", body: []byte("{\n  \"allowed\": \"erin\"\n}\n")},
		{name: "/README.md", body: []byte("# not read by OPA\n")},
	}
	in := slices.Insert(slices.Clone(kept), 2, tarEntry{name: "/.signatures.json", body: []byte(`{"signatures":["old"]}`)})
	in = append(in, tarEntry{name: "/test/.signatures.json", body: []byte(`{"signatures":["older"]}`)})
	out, err := Sign(pack(t, in), SignOptions{Key: priv, KeyID: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	got := entries(t, out)
	if len(got) != len(kept)+1 || got[len(kept)].name != "/.signatures.json" {
		t.Fatalf("signed archive holds %d entries; want the %d kept and /.signatures.json last", len(got), len(kept))
	}
	for i, want := range kept {
		if want.typeflag == 0 {
			want.typeflag = '0'
		}
		if g := got[i]; g.name != want.name || g.typeflag != want.typeflag || !bytes.Equal(g.body, want.body) {
			t.Errorf("entry %d is %s (type %c) %q; want %s (type %c) %q", i, g.name, g.typeflag, g.body, want.name, want.typeflag, want.body)
		}
	}
	vc := opabundle.NewVerificationConfig(map[string]*opakeys.Config{"k1": {Key: pub, Algorithm: "RS256"}}, "", "", nil)
	b, err := opabundle.NewReader(bytes.NewReader(out)).WithBundleVerificationConfig(vc).Read()
	if err != nil {
		t.Fatalf("OPA's verifier refused the signed archive: %v", err)
	}
	if b.Manifest.Revision != "r1" || b.Data["test"].(map[string]any)["allowed"] != "erin" {
		t.Fatalf("OPA read revision %q, data %v", b.Manifest.Revision, b.Data)
	}
}

// TestSignScopeKeepsClaims: with a scope, the token carries the claims
// file's claims as OPA's signer reads them (a large integer stays exact),
// the scope, and the key id as the deprecated keyid claim.
func TestSignScopeKeepsClaims(t *testing.T) {
	priv, _ := rsaKey(t)
	out, err := Sign(nexusBundle(t, "r1", "alice"), SignOptions{Key: priv, KeyID: "k1", Scope: "prod", ClaimsFile: claimsFile(t, `{"iss":"ci","build":9007199254740993}`)})
	if err != nil {
		t.Fatal(err)
	}
	var sigs opabundle.SignaturesConfig
	for _, e := range entries(t, out) {
		if e.name == "/.signatures.json" {
			if err := json.Unmarshal(e.body, &sigs); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(sigs.Signatures) != 1 || strings.Count(sigs.Signatures[0], ".") != 2 {
		t.Fatalf("signatures %v; want one JWT", sigs.Signatures)
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.Split(sigs.Signatures[0], ".")[1])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"iss":"ci"`, `"build":9007199254740993`, `"scope":"prod"`, `"keyid":"k1"`} {
		if !strings.Contains(string(payload), want) {
			t.Errorf("token claims %s; want %s", payload, want)
		}
	}
}
