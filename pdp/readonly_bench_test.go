package pdp_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
)

// benchEnvoyPDP is a PDP without a decision cache deciding the envoy
// entrypoint t/allow (and the authz one t/decision) of module.
func benchEnvoyPDP(b *testing.B, module string, data map[string]any) *pdp.PDP {
	b.Helper()
	ctx := context.Background()
	bn, err := compiler.Compile(ctx, compiler.Options{Modules: map[string]string{"t.rego": module}, Data: data, Entrypoints: []string{"t/allow", "t/decision"}})
	if err != nil {
		b.Fatal(err)
	}
	store := fixture.DemoStore(b)
	p, err := pdp.New(ctx, pdp.Config{Engine: fixture.StoreEngine(b, store), Store: store, Policy: bn,
		EnvoyEntrypoint: "t/allow", AuthzEntrypoint: "t/decision", CacheDisabled: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close(ctx) })
	return p
}

// BenchmarkEnvoyUnreadBody: a check whose entrypoint reads the method and
// a header, of a policy whose other rules read the body, on a request
// with a 4 KiB JSON body.
func BenchmarkEnvoyUnreadBody(b *testing.B) {
	p := benchEnvoyPDP(b, `package t
import rego.v1
allow if {
	input.attributes.request.http.method == "POST"
	input.attributes.request.http.headers["x-user"] == "alice"
}
decision := {"allow": input.parsed_body.ok}
audit if input.parsed_body.items[_].id == "x"
`, nil)
	var items []string
	for i := range 64 {
		items = append(items, fmt.Sprintf(`{"id":"item-%03d","name":"a name of some length","n":%d}`, i, i))
	}
	req := fixture.EnvoyRequest("POST", "/orders", map[string]string{"x-user": "alice", "content-type": "application/json", "x-request-id": "5f0c1e2a", "user-agent": "bench"})
	req.Attributes.Request.Http.Body = `{"ok":true,"items":[` + strings.Join(items, ",") + `]}`
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		d, err := p.Envoy(ctx, pdp.IfaceGRPC, req)
		if err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}

// BenchmarkEnvoyJWT: a check whose policy verifies the bearer token (RS256)
// with io.jwt.decode_verify, the same token on every request, as a
// session sends it.
func BenchmarkEnvoyJWT(b *testing.B) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		b.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		b.Fatal(err)
	}
	enc := base64.RawURLEncoding
	signed := enc.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + enc.EncodeToString([]byte(`{"sub":"alice","iss":"idp","exp":4102444800}`))
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		b.Fatal(err)
	}
	token := signed + "." + enc.EncodeToString(sig)
	p := benchEnvoyPDP(b, `package t
import rego.v1
token := io.jwt.decode_verify(trim_prefix(input.attributes.request.http.headers.authorization, "Bearer "), {"cert": data.jwks.cert, "iss": "idp"})
allow if {
	token[0]
	token[2].sub == "alice"
}
decision := {"allow": true}
`, map[string]any{"jwks": map[string]any{"cert": string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))}})
	req := fixture.EnvoyRequest("GET", "/orders", map[string]string{"authorization": "Bearer " + token})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		d, err := p.Envoy(ctx, pdp.IfaceGRPC, req)
		if err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}
