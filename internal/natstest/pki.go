package natstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is a throwaway certificate authority for tests: it issues server
// and client certificates valid for an hour.
type PKI struct {
	// CAPEM is the CA certificate (PEM).
	CAPEM []byte
	ca    *x509.Certificate
	key   *ecdsa.PrivateKey
}

// NewPKI makes a new CA named name.
func NewPKI(name string) (*PKI, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("natstest: CA: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &PKI{CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), ca: ca, key: key}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// Pool is a pool holding the CA.
func (p *PKI) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	return pool
}

// Cert is an issued certificate and its key.
type Cert struct {
	CertPEM, KeyPEM []byte
	TLS             tls.Certificate
}

// Issue issues a certificate for name: a server certificate for the DNS
// names and IP addresses given (hosts), or with client set a client
// certificate.
func (p *PKI) Issue(name string, client bool, hosts ...string) (Cert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Cert{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		return Cert{}, fmt.Errorf("natstest: certificate %s: %w", name, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Cert{}, err
	}
	c := Cert{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}
	c.TLS, err = tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	return c, err
}

// ServerTLS is the TLS configuration of servers presenting cert; with
// clientCAs, they require client certificates issued by them (mutual
// TLS).
func ServerTLS(cert Cert, clientCAs *x509.CertPool) *tls.Config {
	c := &tls.Config{Certificates: []tls.Certificate{cert.TLS}, MinVersion: tls.VersionTLS12}
	if clientCAs != nil {
		c.ClientCAs, c.ClientAuth = clientCAs, tls.RequireAndVerifyClientCert
	}
	return c
}

// WriteFiles writes the CA ("ca.pem") and each named certificate
// ("<name>.pem", "<name>-key.pem") into dir and returns dir.
func (p *PKI) WriteFiles(dir string, certs map[string]Cert) (string, error) {
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), p.CAPEM, 0o600); err != nil {
		return "", err
	}
	for name, c := range certs {
		if err := os.WriteFile(filepath.Join(dir, name+".pem"), c.CertPEM, 0o600); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, name+"-key.pem"), c.KeyPEM, 0o600); err != nil {
			return "", err
		}
	}
	return dir, nil
}
