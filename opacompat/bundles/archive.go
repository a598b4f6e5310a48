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
// the same files).
func checkArchive(raw []byte, limit int64) error {
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("bundle archive: gzip: %w", err)
	}
	defer gz.Close()
	tr := tar.NewReader(gz)
	seen := map[string]bool{}
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("bundle archive: tar: %w", err)
		}
		for _, elem := range strings.FieldsFunc(hdr.Name, func(r rune) bool { return r == '/' || r == '\\' }) {
			if elem == ".." {
				return fmt.Errorf("%w: %q leaves the bundle", ErrUnsafeArchive, hdr.Name)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		default:
			return fmt.Errorf("%w: %q is not a regular file (tar type %q)", ErrUnsafeArchive, hdr.Name, hdr.Typeflag)
		}
		name := path.Clean("/" + strings.TrimPrefix(hdr.Name, "./"))
		if seen[name] {
			return fmt.Errorf("%w: %q appears twice", ErrUnsafeArchive, name)
		}
		seen[name] = true
		n, err := io.Copy(io.Discard, io.LimitReader(tr, limit-total+1))
		if err != nil {
			return fmt.Errorf("bundle archive: %s: %w", name, err)
		}
		if total += n; total > limit {
			return fmt.Errorf("%w: more than %d bytes unpacked", ErrTooLarge, limit)
		}
	}
}

// readArchive reads an archive with OPA's bundle reader, as the downloader
// does: the bundle is checked as OPA would load it and, when the source is
// signed, its signatures verified (a bundle without one is refused); a
// signed bundle is refused when no verification is configured.
func readArchive(raw []byte, src *Source) (*opabundle.Bundle, error) {
	b, err := opabundle.NewReader(bytes.NewReader(raw)).WithBundleName(src.Name).
		WithSizeLimitBytes(src.SizeLimit).WithBundleVerificationConfig(src.verify).Read()
	if err != nil {
		return nil, explain(err, raw, src)
	}
	return &b, nil
}

// explain says why OPA's reader refused an archive, which its error does
// not tell apart: an unsafe or too large archive (checkArchive), a bundle
// that does not read even unverified (OPA's error as it is), a delta
// bundle, or else its signature.
func explain(err error, raw []byte, src *Source) error {
	if cerr := checkArchive(raw, src.SizeLimit); cerr != nil {
		return cerr
	}
	b, rerr := opabundle.NewReader(bytes.NewReader(raw)).WithBundleName(src.Name).
		WithSizeLimitBytes(src.SizeLimit).WithSkipBundleVerification(true).Read()
	switch {
	case rerr != nil:
		return fmt.Errorf("bundle: %w", err)
	case b.Type() == opabundle.DeltaBundleType:
		return ErrDelta
	}
	return fmt.Errorf("%w: %w", ErrVerification, err)
}
