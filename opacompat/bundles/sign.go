package bundles

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	opabundle "github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/util"
)

// signaturesFile is the name of a bundle's signatures.
const signaturesFile = "/.signatures.json"

// SignOptions says how to sign a bundle, as `opa build --signing-key` and
// `opa sign` do.
type SignOptions struct {
	// Key is the private key (PEM) or HMAC secret, or a file holding it.
	Key string
	// Algorithm is the JWT algorithm; empty means RS256.
	Algorithm string
	// KeyID is the token's key id ("kid"), which verifiers look the key up
	// by unless they configure one; empty means "default", as opa build.
	KeyID string
	// ClaimsFile is a JSON file of further claims for the token.
	ClaimsFile string
	// Scope, when set, is the token's "scope" claim, which a verifier
	// configured with a scope requires.
	Scope string
}

// Sign returns the bundle archive with a /.signatures.json that signs
// every file in it (a previous signature is replaced): a JWT listing each
// file's SHA-256, as OPA hashes them (JSON files by their content, other
// files by their bytes), signed with the key.
func Sign(tarball []byte, o SignOptions) ([]byte, error) {
	if o.Key == "" {
		return nil, errors.New("sign: no signing key")
	}
	if o.KeyID == "" {
		o.KeyID = "default"
	}
	type entry struct {
		hdr  *tar.Header
		body []byte
	}
	var entries []entry
	gz, err := gzip.NewReader(bytes.NewReader(tarball))
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	tr := tar.NewReader(gz)
	hasher, err := opabundle.NewSignatureHasher(opabundle.SHA256)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	var files []opabundle.FileInfo
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("sign: %w", err)
		}
		body, err := io.ReadAll(io.LimitReader(tr, MaxSignBytes+1))
		if err != nil {
			return nil, fmt.Errorf("sign: %w", err)
		}
		if len(body) > MaxSignBytes {
			return nil, fmt.Errorf("sign: %s: %w", hdr.Name, ErrTooLarge)
		}
		name := path.Clean("/" + strings.TrimPrefix(hdr.Name, "./"))
		switch {
		case hdr.Typeflag == tar.TypeDir:
			entries = append(entries, entry{hdr, nil})
			continue
		case hdr.Typeflag != tar.TypeReg:
			return nil, fmt.Errorf("sign: %s: %w: not a regular file", hdr.Name, ErrUnsafeArchive)
		case name == signaturesFile:
			continue
		}
		entries = append(entries, entry{hdr, body})
		var v any = body
		if opabundle.IsStructuredDoc(name) {
			if err := util.Unmarshal(body, &v); err != nil {
				return nil, fmt.Errorf("sign: %s: %w", name, err)
			}
		}
		sum, err := hasher.HashFile(v)
		if err != nil {
			return nil, fmt.Errorf("sign: %s: %w", name, err)
		}
		files = append(files, opabundle.NewFile(strings.TrimPrefix(name, "/"), hex.EncodeToString(sum), string(opabundle.SHA256)))
	}
	if err := gz.Close(); err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}

	claims := o.ClaimsFile
	if o.Scope != "" {
		// OPA's signer reads extra claims from a file only: write one with
		// the given claims and the scope.
		tmp, cleanup, err := claimsWithScope(o.ClaimsFile, o.Scope, o.KeyID)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		claims = tmp
	}
	token, err := opabundle.GenerateSignedToken(files, opabundle.NewSigningConfig(o.Key, o.Algorithm, claims), o.KeyID)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	sig, err := json.Marshal(map[string][]string{"signatures": {token}})
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}

	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	write := func(hdr *tar.Header, body []byte) error {
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	for _, e := range entries {
		if err := write(e.hdr, e.body); err != nil {
			return nil, fmt.Errorf("sign: %w", err)
		}
	}
	sigHdr := &tar.Header{Name: signaturesFile, Mode: 0o644, Size: int64(len(sig)), Typeflag: tar.TypeReg}
	if len(entries) > 0 {
		sigHdr.ModTime = entries[0].hdr.ModTime
	}
	if err := write(sigHdr, sig); err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	return out.Bytes(), nil
}

// MaxSignBytes bounds each file Sign reads.
const MaxSignBytes = 256 << 20

// claimsWithScope writes the claims of file (if any) with scope and keyid
// to a temporary file.
func claimsWithScope(file, scope, keyID string) (string, func(), error) {
	claims := map[string]any{}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", nil, fmt.Errorf("sign: claims: %w", err)
		}
		if err := json.Unmarshal(b, &claims); err != nil {
			return "", nil, fmt.Errorf("sign: claims %s: %w", file, err)
		}
	}
	claims["scope"] = scope
	if _, ok := claims["keyid"]; !ok {
		claims["keyid"] = keyID
	}
	b, err := json.Marshal(claims)
	if err != nil {
		return "", nil, fmt.Errorf("sign: claims: %w", err)
	}
	dir, err := os.MkdirTemp("", "nexus-claims-")
	if err != nil {
		return "", nil, fmt.Errorf("sign: claims: %w", err)
	}
	p := filepath.Join(dir, "claims.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("sign: claims: %w", err)
	}
	return p, func() { os.RemoveAll(dir) }, nil
}
