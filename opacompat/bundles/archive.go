package bundles

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	opabundle "github.com/open-policy-agent/opa/v1/bundle"
)

// checkArchive reads the whole archive before anything else does: the
// unpacked files must fit in limit bytes together, each entry must be a
// regular file or a directory, and no name may climb out of the bundle
// or name the same file twice (so that every reader of the archive sees
// the same files). signed reports whether it holds a .signatures.json.
func checkArchive(raw []byte, limit int64) (signed bool, err error) {
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return false, fmt.Errorf("bundle archive: gzip: %w", err)
	}
	defer gz.Close()
	tr := tar.NewReader(gz)
	seen := map[string]bool{}
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return signed, nil
		}
		if err != nil {
			return false, fmt.Errorf("bundle archive: tar: %w", err)
		}
		for _, elem := range strings.FieldsFunc(hdr.Name, func(r rune) bool { return r == '/' || r == '\\' }) {
			if elem == ".." {
				return false, fmt.Errorf("%w: %q leaves the bundle", ErrUnsafeArchive, hdr.Name)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		default:
			return false, fmt.Errorf("%w: %q is not a regular file (tar type %q)", ErrUnsafeArchive, hdr.Name, hdr.Typeflag)
		}
		name := path.Clean("/" + strings.TrimPrefix(hdr.Name, "./"))
		if seen[name] {
			return false, fmt.Errorf("%w: %q appears twice", ErrUnsafeArchive, name)
		}
		seen[name] = true
		signed = signed || strings.HasSuffix(name, signaturesFile)
		n, err := io.Copy(io.Discard, io.LimitReader(tr, limit-total+1))
		if err != nil {
			return false, fmt.Errorf("bundle archive: %s: %w", name, err)
		}
		if total += n; total > limit {
			return false, fmt.Errorf("%w: more than %d bytes unpacked", ErrTooLarge, limit)
		}
	}
}

// readOPA reads the archive with OPA's bundle reader, which checks the
// bundle as OPA would load it and, when vc is set, verifies its
// signatures (a bundle without one is refused). A signed bundle is
// refused when no verification is configured, as OPA refuses it.
func readOPA(raw []byte, name string, limit int64, vc *opabundle.VerificationConfig, signed bool) (*opabundle.Bundle, error) {
	reader := func() *opabundle.Reader {
		return opabundle.NewReader(bytes.NewReader(raw)).WithBundleName(name).WithSizeLimitBytes(limit)
	}
	// Read once without verification to tell a malformed bundle from one
	// whose signature fails.
	b, err := reader().WithSkipBundleVerification(true).Read()
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	if b.Type() == opabundle.DeltaBundleType {
		return nil, ErrDelta
	}
	if vc == nil && !signed {
		return &b, nil
	}
	if _, err := reader().WithBundleVerificationConfig(vc).Read(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrVerification, err)
	}
	return &b, nil
}
