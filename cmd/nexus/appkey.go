package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// appAPIKeyFile is where nexus serve keeps the application API key it
// generated, in the data directory.
const appAPIKeyFile = "app-api-key"

// appAPIKey decides the bearer key of the application endpoints (AuthZEN
// and the Permit-compatible API). They are never open by accident:
//   - a key given with --app-api-key, --app-api-key-file or
//     $NEXUS_APP_API_KEY is used;
//   - otherwise --app-api-insecure leaves them open;
//   - otherwise the key in the data directory's app-api-key file is used,
//     generated on first start (mode 0600), whatever the HTTP address:
//     the proxies' endpoints on the same listener need no key, so a
//     deployment that only serves proxies starts as before, with the
//     application endpoints closed until the key is handed out.
//
// It returns the key ("" only with --app-api-insecure or no HTTP
// listener) and, when it came from the data directory, the file's path.
func appAPIKey(c serveConfig, log *slog.Logger) (key, file string, err error) {
	key = c.AppAPIKey
	if key == "" && c.AppAPIKeyFile != "" {
		b, err := os.ReadFile(c.AppAPIKeyFile)
		if err != nil {
			return "", "", fmt.Errorf("application API key file: %w", err)
		}
		if key = strings.TrimSpace(string(b)); key == "" {
			return "", "", fmt.Errorf("application API key file %s is empty", c.AppAPIKeyFile)
		}
	}
	if key == "" {
		key = os.Getenv("NEXUS_APP_API_KEY")
	}
	if key != "" || c.HTTPAddr == "-" {
		return key, "", nil
	}
	if c.AppAPIInsecure {
		log.Warn("the application API is open: anyone who reaches the HTTP listener may ask for any decision", "addr", c.HTTPAddr)
		return "", "", nil
	}
	file = filepath.Join(c.DataDir, appAPIKeyFile)
	key, created, err := readOrCreateSecret(file)
	if err != nil {
		return "", "", fmt.Errorf("application API key: %w", err)
	}
	if created {
		log.Info("generated the application API key", "file", file)
	}
	return key, file, nil
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
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", false, err
	}
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
