package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nexuspdp/nexus/internal/natstest"
	"github.com/nexuspdp/nexus/pdp"
)

// TestServeClusterTLSCredentials runs `nexus serve --config` with a
// cluster section that sets tls (CA, client certificate, server name) and
// credentials, against a NATS server that requires TLS with a client
// certificate and decentralized authentication. Two replicas configured
// right replicate a write; a replica whose config lacks the server name
// or the credentials serves from local data, refuses writes (503) and
// says in /healthz why it cannot connect.
func TestServeClusterTLSCredentials(t *testing.T) {
	pki, err := natstest.NewPKI("nexus test CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := pki.Issue("nats", false, "nats.test") // not 127.0.0.1: server_name is needed
	if err != nil {
		t.Fatal(err)
	}
	client, err := pki.Issue("replica", true)
	if err != nil {
		t.Fatal(err)
	}
	op, err := natstest.NewOperator()
	if err != nil {
		t.Fatal(err)
	}
	creds, err := op.UserCreds("nexus")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := pki.WriteFiles(t.TempDir(), map[string]natstest.Cert{"replica": client})
	if err != nil {
		t.Fatal(err)
	}
	credsFile := filepath.Join(dir, "nexus.creds")
	if err := os.WriteFile(credsFile, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	clientTLS := &tls.Config{RootCAs: pki.Pool(), Certificates: []tls.Certificate{client.TLS}, ServerName: "nats.test", MinVersion: tls.VersionTLS12}
	ns := natstest.StartWith(t, 1, natstest.Options{
		TLS: natstest.ServerTLS(srv, pki.Pool()), Configure: op.Configure,
		Client: []nats.Option{nats.Secure(clientTLS), nats.UserCredentials(credsFile)},
	})

	config := func(name string, edit func(string) string) string {
		t.Helper()
		yaml := fmt.Sprintf(`cluster:
  nats_urls: [%s]
  name: tlstest
  sync_timeout: 2s
  credentials: %s
  tls:
    ca_file: %s
    cert_file: %s
    key_file: %s
    server_name: nats.test
`, ns.URLs()[0], credsFile, filepath.Join(dir, "ca.pem"), filepath.Join(dir, "replica.pem"), filepath.Join(dir, "replica-key.pem"))
		if edit != nil {
			yaml = edit(yaml)
		}
		p := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := config("good", nil)
	a := serve(t, t.TempDir(), "--config", good)
	a.ready(t)
	b := serve(t, t.TempDir(), "--config", good)
	b.ready(t)
	status, out := a.write(t, "file:report.pdf#viewer@user:zed")
	if status != 200 {
		t.Fatalf("write on A: %d %v\n%s", status, out, a.log.String())
	}
	rev := uint64(out["revision"].(float64))
	if status, out := b.evaluate(t, "zed", strconv.FormatUint(rev, 10)); status != 200 || out["decision"] != true {
		t.Fatalf("zed on B with token %d: %d %v, want allowed", rev, status, out)
	}

	for _, tc := range []struct {
		name, drop, want string
	}{
		{"no server name", "    server_name: nats.test\n", "cannot validate certificate for 127.0.0.1"},
		{"no credentials", "  credentials: " + credsFile + "\n", "authorization violation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(strings.ReplaceAll(tc.name, " ", "-"), func(y string) string {
				if !strings.Contains(y, tc.drop) {
					t.Fatalf("%q not in the config", tc.drop)
				}
				return strings.Replace(y, tc.drop, "", 1)
			})
			s := serve(t, t.TempDir(), "--config", cfg)
			// A new replica that cannot read its log is not ready: it
			// has nothing to answer from. /healthz says why.
			eventually(t, 60*time.Second, "admin listener", func() bool { s.readAddrs(); return s.admin != "" })
			var reason string
			eventually(t, 20*time.Second, "/healthz says why", func() bool {
				_, out := call(t, "GET", "http://"+s.admin+"/healthz", testAdminToken, "")
				reason, _ = out["reason"].(string)
				return out["status"] == "degraded" && strings.Contains(strings.ToLower(reason), tc.want)
			})
			if status, out := s.write(t, "file:report.pdf#viewer@user:yan"); status != 503 || out["reason"] != pdp.CodeUnavailable {
				t.Fatalf("write: %d %v, want 503 %s", status, out, pdp.CodeUnavailable)
			}
			if status, out := call(t, "GET", "http://"+s.admin+"/readyz", "", ""); status != 503 || !strings.Contains(strings.ToLower(fmt.Sprint(out["reason"])), tc.want) {
				t.Errorf("/readyz: %d %v, want 503 saying %q", status, out, tc.want)
			}
			if !strings.Contains(strings.ToLower(s.log.String()), tc.want) {
				t.Errorf("the log does not say %q:\n%s", tc.want, s.log.String())
			}
		})
	}
}
