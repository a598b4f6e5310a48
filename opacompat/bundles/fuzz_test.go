package bundles

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"
)

// FuzzCheckArchive: whatever the bytes, checkArchive does not panic, and
// an archive it accepts holds only regular files and directories whose
// names stay inside the bundle, within the size limit.
func FuzzCheckArchive(f *testing.F) {
	f.Add(pack(f, []tarEntry{{name: "/data.json", body: []byte(`{}`)}, {name: "/.manifest", body: []byte(`{"revision":"r"}`)}}))
	f.Add(pack(f, []tarEntry{{name: "../x", body: []byte("x")}}))
	f.Add(pack(f, []tarEntry{{name: "/l", typeflag: tar.TypeSymlink, linkname: "/etc/passwd"}}))
	f.Add([]byte("not gzip"))
	const limit = 1 << 16
	f.Fuzz(func(t *testing.T, raw []byte) {
		if err := checkArchive(raw, limit); err != nil {
			return
		}
		gz, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("accepted, and gzip fails: %v", err)
		}
		tr := tar.NewReader(gz)
		var total int64
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("accepted, and tar fails: %v", err)
			}
			if hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeDir {
				t.Fatalf("accepted an entry of type %q", hdr.Typeflag)
			}
			if strings.Contains("/"+strings.ReplaceAll(hdr.Name, `\`, "/")+"/", "/../") {
				t.Fatalf("accepted %q", hdr.Name)
			}
			n, _ := io.Copy(io.Discard, tr)
			total += n
		}
		if total > limit {
			t.Fatalf("accepted %d bytes unpacked", total)
		}
	})
}
