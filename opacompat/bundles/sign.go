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

// MaxSignBytes bounds each file Sign reads.
const MaxSignBytes = 256 << 20

// Sign returns the bundle archive with a /.signatures.json that signs
// every file in it, as `opa sign` does: OPA's hasher takes each file's
// SHA-256 (data and manifest files by their JSON or YAML content, others
// by their bytes) and OPA's signer puts the list in a JWT signed with the
// key. A previous signatures file, at any depth, is dropped, as OPA's
// reader refuses a bundle with two. Every other entry is written back as
// it was, header and bytes: OPA's bundle writer would merge the data files
// into one /data.json, re-encode the manifest and drop files it does not
// know.
func Sign(tarball []byte, o SignOptions) ([]byte, error) {
	if o.Key == "" {
		return nil, errors.New("sign: no signing key")
	}
	if o.KeyID == "" {
		o.KeyID = "default"
	}
	entries, files, err := readToSign(tarball)
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	claims := o.ClaimsFile
	if o.Scope != "" {
		// OPA's signer takes further claims from a file only: write one
		// with the given claims and the scope.
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
	sig, err := json.Marshal(opabundle.SignaturesConfig{Signatures: []string{token}})
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	hdr := &tar.Header{Name: "/.signatures.json", Mode: 0o644, Size: int64(len(sig)), Typeflag: tar.TypeReg}
	if len(entries) > 0 {
		hdr.ModTime = entries[0].hdr.ModTime
	}
	out, err := writeEntries(append(entries, tarFile{hdr, sig}))
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	return out, nil
}

// tarFile is an archive entry as read: a directory has no body.
type tarFile struct {
	hdr  *tar.Header
	body []byte
}

// readToSign returns the archive's entries but its signatures, and the
// signature's list of its files, each hashed as OPA hashes it.
func readToSign(tarball []byte) ([]tarFile, []opabundle.FileInfo, error) {
	hasher, err := opabundle.NewSignatureHasher(opabundle.SHA256)
	if err != nil {
		return nil, nil, err
	}
	gz, err := gzip.NewReader(bytes.NewReader(tarball))
	if err != nil {
		return nil, nil, err
	}
	tr := tar.NewReader(gz)
	var entries []tarFile
	var files []opabundle.FileInfo
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries, files, gz.Close()
		}
		if err != nil {
			return nil, nil, err
		}
		switch {
		case hdr.Typeflag == tar.TypeDir:
			entries = append(entries, tarFile{hdr, nil})
			continue
		case hdr.Typeflag != tar.TypeReg:
			return nil, nil, fmt.Errorf("%s: %w: not a regular file", hdr.Name, ErrUnsafeArchive)
		case opabundle.IsSignaturesFile(hdr.Name):
			continue
		}
		body, err := io.ReadAll(io.LimitReader(tr, MaxSignBytes+1))
		if err != nil {
			return nil, nil, err
		}
		if len(body) > MaxSignBytes {
			return nil, nil, fmt.Errorf("%s: %w", hdr.Name, ErrTooLarge)
		}
		entries = append(entries, tarFile{hdr, body})
		name := path.Clean("/" + strings.TrimPrefix(hdr.Name, "./"))
		var doc any = body
		if opabundle.IsStructuredDoc(name) {
			if err := util.Unmarshal(body, &doc); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", name, err)
			}
		}
		sum, err := hasher.HashFile(doc)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		files = append(files, opabundle.NewFile(strings.TrimPrefix(name, "/"), hex.EncodeToString(sum), string(opabundle.SHA256)))
	}
}

// writeEntries writes entries as a gzipped tarball.
func writeEntries(entries []tarFile) ([]byte, error) {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if err := tw.WriteHeader(e.hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// claimsWithScope writes the claims of file (if any, read as OPA's signer
// reads them) with scope, and keyid unless the file names one, to a
// temporary file.
func claimsWithScope(file, scope, keyID string) (string, func(), error) {
	claims := map[string]any{}
	if file != "" {
		var err error
		if claims, err = opabundle.NewSigningConfig("", "", file).GetClaims(); err != nil {
			return "", nil, fmt.Errorf("sign: claims %s: %w", file, err)
		}
		if claims == nil {
			claims = map[string]any{}
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
