package main

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// Files where nexus serve keeps the credentials it generated, in the data
// directory.
const (
	adminTokenFile = "admin-token"
	appAPIKeyFile  = "app-api-key"
)

// credential describes a bearer credential of one listener and where it
// may come from.
type credential struct {
	name      string // "admin token", "application API key"
	value     string // given on the command line or in the config file
	valueFile string // a file holding it (a mounted secret)
	env       string // the environment variable that may hold it
	addr      string // the listener's address; "-" disables it
	insecure  bool   // the operator runs the listener open
	open      string // what an open listener lets anyone do, for the warning
	dataFile  string // where a generated one is kept
	// loopbackOnly refuses to generate one for a listener outside
	// loopback: such a listener needs a credential handed to it.
	loopbackOnly bool
	refusal      string // the error for that case
}

// resolve returns the credential ("" only when the listener is disabled
// or insecure) and, when it came from the data directory, the file's
// path. A listener is never open by accident: a given credential is used,
// else --...-insecure opens it with a warning, else one is generated into
// the data directory (mode 0600) and kept across restarts.
func (c credential) resolve(log *slog.Logger) (value, file string, err error) {
	value = c.value
	if value == "" && c.valueFile != "" {
		b, err := os.ReadFile(c.valueFile)
		if err != nil {
			return "", "", fmt.Errorf("%s file: %w", c.name, err)
		}
		if value = strings.TrimSpace(string(b)); value == "" {
			return "", "", fmt.Errorf("%s file %s is empty", c.name, c.valueFile)
		}
	}
	value = cmp.Or(value, os.Getenv(c.env))
	if value != "" || c.addr == "-" {
		return value, "", nil
	}
	if c.insecure {
		log.Warn("the "+c.name+" is off: "+c.open, "addr", c.addr)
		return "", "", nil
	}
	if c.loopbackOnly && !loopback(c.addr) {
		return "", "", errors.New(c.refusal)
	}
	value, created, err := readOrCreateSecret(c.dataFile)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", c.name, err)
	}
	if created {
		log.Info("generated the "+c.name, "file", c.dataFile)
	}
	return value, c.dataFile, nil
}

// adminToken decides the admin API's bearer token: --admin-token,
// --admin-token-file or $NEXUS_ADMIN_TOKEN; else, on a loopback address
// only, one generated into the data directory; --admin-insecure runs the
// admin API open.
func adminToken(c serveConfig, log *slog.Logger) (token, file string, err error) {
	return credential{
		name: "admin token", value: c.Server.AdminToken, valueFile: c.AdminTokenFile, env: "NEXUS_ADMIN_TOKEN",
		addr: c.Server.AdminAddr, insecure: c.Server.AdminInsecure,
		open:     "anyone who reaches the admin API may rewrite policy and relationships",
		dataFile: filepath.Join(c.DataDir, adminTokenFile), loopbackOnly: true,
		refusal: fmt.Sprintf("the admin listener %s is not on loopback and has no token: set --admin-token, --admin-token-file or $NEXUS_ADMIN_TOKEN (or --admin-insecure to run it open)", c.Server.AdminAddr),
	}.resolve(log)
}

// appAPIKey decides the bearer key of the application endpoints (AuthZEN
// and the Permit-compatible API): --app-api-key, --app-api-key-file or
// $NEXUS_APP_API_KEY; else --app-api-insecure leaves them open; else one
// generated into the data directory, whatever the HTTP address: the
// proxies' endpoints on the same listener need no key, so a deployment
// that only serves proxies starts as before, with the application
// endpoints closed until the key is handed out.
func appAPIKey(c serveConfig, log *slog.Logger) (key, file string, err error) {
	return credential{
		name: "application API key", value: c.Server.AppAPIKey, valueFile: c.AppAPIKeyFile, env: "NEXUS_APP_API_KEY",
		addr: c.Server.HTTPAddr, insecure: c.Server.AppAPIInsecure,
		open:     "anyone who reaches the HTTP listener may ask for any decision",
		dataFile: filepath.Join(c.DataDir, appAPIKeyFile),
	}.resolve(log)
}

// readOrCreateSecret returns the secret in file, or writes a new random
// one there (mode 0600) when the file does not exist.
func readOrCreateSecret(file string) (secret string, created bool, err error) {
	b, err := os.ReadFile(file)
	switch {
	case err == nil:
		if secret = strings.TrimSpace(string(b)); secret == "" {
			return "", false, fmt.Errorf("%s is empty: delete it to have a new one generated", file)
		}
		return secret, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", false, err
	}
	var rnd [32]byte
	_, _ = rand.Read(rnd[:]) // never fails
	secret = hex.EncodeToString(rnd[:])
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", false, err
	}
	if _, err := f.WriteString(secret + "\n"); err != nil {
		f.Close()
		return "", false, err
	}
	return secret, true, f.Close()
}

// loopback reports whether addr (host:port) only listens on loopback.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
