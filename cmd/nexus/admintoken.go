package main

import (
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

// adminTokenFile is where nexus serve keeps the admin token it generated,
// in the data directory.
const adminTokenFile = "admin-token"

// adminToken decides the admin API's bearer token. The admin API is never
// open by accident:
//   - a token given with --admin-token, --admin-token-file or
//     $NEXUS_ADMIN_TOKEN is used;
//   - otherwise, on a loopback address, the token in the data directory's
//     admin-token file (written on first start, mode 0600) is used;
//   - a non-loopback admin address needs a given token, unless
//     --admin-insecure says to run it open;
//   - --admin-insecure without a token leaves the admin API open.
//
// It returns the token ("" only with --admin-insecure) and, when it came
// from the data directory, the file's path.
func adminToken(c serveConfig, log *slog.Logger) (token, file string, err error) {
	token = c.AdminToken
	if token == "" && c.AdminTokenFile != "" {
		b, err := os.ReadFile(c.AdminTokenFile)
		if err != nil {
			return "", "", fmt.Errorf("admin token file: %w", err)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return "", "", fmt.Errorf("admin token file %s is empty", c.AdminTokenFile)
		}
	}
	if token == "" {
		token = os.Getenv("NEXUS_ADMIN_TOKEN")
	}
	if token != "" || c.AdminAddr == "-" {
		return token, "", nil
	}
	if c.AdminInsecure {
		log.Warn("the admin API is open: anyone who reaches it may rewrite policy and relationships", "addr", c.AdminAddr)
		return "", "", nil
	}
	if !loopback(c.AdminAddr) {
		return "", "", fmt.Errorf("the admin listener %s is not on loopback and has no token: set --admin-token, --admin-token-file or $NEXUS_ADMIN_TOKEN (or --admin-insecure to run it open)", c.AdminAddr)
	}
	file = filepath.Join(c.DataDir, adminTokenFile)
	b, err := os.ReadFile(file)
	switch {
	case err == nil:
		if token = strings.TrimSpace(string(b)); token == "" {
			return "", "", fmt.Errorf("admin token file %s is empty: delete it to have a new one generated", file)
		}
		return token, file, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", "", fmt.Errorf("admin token: %w", err)
	}
	var rnd [32]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", "", fmt.Errorf("admin token: %w", err)
	}
	token = hex.EncodeToString(rnd[:])
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", "", fmt.Errorf("admin token: %w", err)
	}
	if _, err := f.WriteString(token + "\n"); err != nil {
		f.Close()
		return "", "", fmt.Errorf("admin token: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", "", fmt.Errorf("admin token: %w", err)
	}
	log.Info("generated the admin token", "file", file)
	return token, file, nil
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
