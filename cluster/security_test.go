package cluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nexuspdp/nexus/cluster"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/internal/natstest"
)

// refused starts a replica that must not get a connection: it waits until
// the replica's status gives a reason containing want (in any case: the
// client spells a server's refusal as the server sent it), then checks that a
// write is refused with ErrUnavailable giving the same reason (the cause
// wrapped, for errors.Is/As), and returns that error.
func refused(t *testing.T, cfg cluster.Config, want string) error {
	t.Helper()
	r := newReplica(t, cfg, "")
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := r.Status()
		if st.Connected {
			t.Fatalf("the replica connected: %+v", st)
		}
		if strings.Contains(strings.ToLower(st.Reason), strings.ToLower(want)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status reason %q does not say %q", st.Reason, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err := r.Write(ctxT(t, 10*time.Second), datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:d#viewer@user:u")})
	if !errors.Is(err, cluster.ErrUnavailable) || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(want)) {
		t.Fatalf("write: %v, want ErrUnavailable saying %q", err, want)
	}
	if r.Revision() != 0 || r.Status().Connected {
		t.Fatalf("a replica without a connection moved: %+v", r.Status())
	}
	return err
}

// replicates checks that two replicas started with cfg follow the log and
// that a write on one reaches the other.
func replicates(t *testing.T, cfg cluster.Config) {
	t.Helper()
	a, b := newReplica(t, cfg, ""), newReplica(t, cfg, "")
	waitFollowing(t, a)
	waitFollowing(t, b)
	mustSchema(t, a, testSchema)
	rev, err := a.Write(ctxT(t, 20*time.Second), datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:d#viewer@user:u")})
	if err != nil {
		t.Fatal(err)
	}
	converge(t, rev, a, b)
}

// TestTLS: a NATS server that requires TLS, with a certificate from a test
// CA for 127.0.0.1 and nats.test. Replicas that trust the CA connect and
// replicate; one that does not trust it, or that expects another server
// name, or that does not ask for TLS at all, gets no connection (never a
// plain-text one) and says why; a replica that asks for TLS from a server
// without it gets none either.
func TestTLS(t *testing.T) {
	pki, err := natstest.NewPKI("nexus test CA")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.Issue("nats", false, "127.0.0.1", "nats.test")
	if err != nil {
		t.Fatal(err)
	}
	trust := &tls.Config{RootCAs: pki.Pool(), MinVersion: tls.VersionTLS12}
	ns := natstest.StartWith(t, 1, natstest.Options{TLS: natstest.ServerTLS(cert, nil), Client: []nats.Option{nats.Secure(trust.Clone())}})
	if u := ns.URLs()[0]; !strings.HasPrefix(u, "tls://") {
		t.Fatalf("URL %s, want tls://", u)
	}
	plainURL := "nats://" + strings.TrimPrefix(ns.URLs()[0], "tls://")

	t.Run("trusted CA", func(t *testing.T) {
		replicates(t, cluster.Config{URLs: ns.URLs(), TLS: trust.Clone()})
	})
	t.Run("server name given", func(t *testing.T) {
		// Connecting by address to a certificate that names a host.
		c := trust.Clone()
		c.ServerName = "nats.test"
		replicates(t, cluster.Config{URLs: []string{plainURL}, TLS: c, Name: "byname"})
	})
	t.Run("unknown CA", func(t *testing.T) {
		err := refused(t, cluster.Config{URLs: ns.URLs(), TLS: &tls.Config{MinVersion: tls.VersionTLS12}}, "certificate signed by unknown authority")
		if ua := (x509.UnknownAuthorityError{}); !errors.As(err, &ua) {
			t.Errorf("%v does not wrap an x509.UnknownAuthorityError", err)
		}
	})
	t.Run("no TLS configured", func(t *testing.T) {
		// A nats:// URL and no TLS: the client still does TLS because the
		// server requires it, with the system's roots, which do not hold
		// the test CA. Nothing falls back to plain text.
		refused(t, cluster.Config{URLs: []string{plainURL}}, "certificate signed by unknown authority")
	})
	t.Run("wrong server name", func(t *testing.T) {
		c := trust.Clone()
		c.ServerName = "other.test"
		err := refused(t, cluster.Config{URLs: ns.URLs(), TLS: c}, "certificate is valid for nats.test, not other.test")
		if he := (x509.HostnameError{}); !errors.As(err, &he) {
			t.Errorf("%v does not wrap an x509.HostnameError", err)
		}
	})
	t.Run("server without TLS", func(t *testing.T) {
		plain := natstest.Start(t, 1)
		err := refused(t, cluster.Config{URLs: plain.URLs(), TLS: trust.Clone()}, nats.ErrSecureConnWanted.Error())
		if !errors.Is(err, nats.ErrSecureConnWanted) {
			t.Errorf("%v does not wrap nats.ErrSecureConnWanted", err)
		}
	})
}

// TestMutualTLS: a server that requires a client certificate from the
// test CA. A replica with one replicates; one without is refused.
func TestMutualTLS(t *testing.T) {
	pki, err := natstest.NewPKI("nexus test CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := pki.Issue("nats", false, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	client, err := pki.Issue("replica", true)
	if err != nil {
		t.Fatal(err)
	}
	withCert := &tls.Config{RootCAs: pki.Pool(), Certificates: []tls.Certificate{client.TLS}, MinVersion: tls.VersionTLS12}
	ns := natstest.StartWith(t, 1, natstest.Options{TLS: natstest.ServerTLS(srv, pki.Pool()), Client: []nats.Option{nats.Secure(withCert.Clone())}})

	t.Run("client certificate", func(t *testing.T) {
		replicates(t, cluster.Config{URLs: ns.URLs(), TLS: withCert.Clone()})
	})
	t.Run("no client certificate", func(t *testing.T) {
		refused(t, cluster.Config{URLs: ns.URLs(), TLS: &tls.Config{RootCAs: pki.Pool(), MinVersion: tls.VersionTLS12}}, "certificate required")
	})
	t.Run("certificate of another CA", func(t *testing.T) {
		other, err := natstest.NewPKI("another CA")
		if err != nil {
			t.Fatal(err)
		}
		stranger, err := other.Issue("stranger", true)
		if err != nil {
			t.Fatal(err)
		}
		// Go's client offers no certificate the server's CA list does not
		// name, so the server sees none.
		refused(t, cluster.Config{URLs: ns.URLs(), TLS: &tls.Config{RootCAs: pki.Pool(), Certificates: []tls.Certificate{stranger.TLS}, MinVersion: tls.VersionTLS12}}, "certificate required")
	})
}

// TestCredentials: a NATS server in decentralized-authentication mode (an
// operator, a system account and an account with JetStream, as nsc sets
// them up). A replica with a user's credentials file of that account
// replicates; one without credentials, or with a user of an account the
// operator does not know, is refused and says so; a credentials file that
// is missing or malformed fails New.
func TestCredentials(t *testing.T) {
	op, err := natstest.NewOperator()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	must := func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	write := func(name string, b []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("nexus.creds", must(op.UserCreds("nexus")))
	foreign := write("foreign.creds", must(natstest.ForeignCreds("intruder")))
	ns := natstest.StartWith(t, 1, natstest.Options{Configure: op.Configure, Client: []nats.Option{nats.UserCredentials(good)}})

	t.Run("valid credentials", func(t *testing.T) {
		replicates(t, cluster.Config{URLs: ns.URLs(), CredentialsFile: good})
	})
	t.Run("no credentials", func(t *testing.T) {
		// The client returns the server's refusal as nats.ErrAuthorization
		// or as the text the server sent, depending on when it came.
		refused(t, cluster.Config{URLs: ns.URLs()}, "authorization violation")
	})
	t.Run("unknown account", func(t *testing.T) {
		refused(t, cluster.Config{URLs: ns.URLs(), CredentialsFile: foreign}, "authorization violation")
	})
	for _, tc := range []struct {
		name, file, want string
	}{
		{"missing file", filepath.Join(dir, "nope.creds"), "no such file"},
		{"not a credentials file", write("junk.creds", []byte("hello\n")), "no user JWT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := datastore.Open(context.Background(), datastore.Config{Path: filepath.Join(t.TempDir(), "nexus.db")})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			r, err := cluster.New(context.Background(), cluster.Config{URLs: ns.URLs(), Store: s, CredentialsFile: tc.file})
			if err == nil {
				_ = r.Close()
				t.Fatal("New accepted it")
			}
			if !strings.Contains(err.Error(), "CredentialsFile") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one about CredentialsFile saying %q", err, tc.want)
			}
		})
	}
}
