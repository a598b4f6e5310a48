package bundle_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
)

// streamArchive is a .tar.gz of a minimal bundle's manifest and module plus
// the given files, each of size bytes of content (a JSON object padded
// with spaces for data.json, zeros otherwise), written as a stream: a
// large file costs the test no memory, and compresses to little.
func streamArchive(t *testing.T, files map[string]int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	tw := tar.NewWriter(gz)
	put := func(name string, size int64, body io.Reader) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, io.LimitReader(body, size)); err != nil {
			t.Fatal(err)
		}
	}
	man := []byte(`{"revision":"","roots":[],"wasm":[{"entrypoint":"a/b","module":"/policy.wasm"}]}`)
	put(bundle.ManifestFile, int64(len(man)), bytes.NewReader(man))
	wasm := []byte("\x00asm\x01\x00\x00\x00")
	put(bundle.WasmFile, int64(len(wasm)), bytes.NewReader(wasm))
	for name, size := range files {
		var body io.Reader = zeros{}
		if name == bundle.DataFile {
			body = io.MultiReader(bytes.NewReader([]byte("{}")), spaces{})
		}
		put(name, size, body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// allocated is the bytes f allocates on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestReadBomb: a small archive that decompresses to a data.json far over
// its limit (200 MiB; the archive is some 200 KB) is refused from the
// file's header, before its bytes are read: nothing near its size is
// allocated.
func TestReadBomb(t *testing.T) {
	raw := streamArchive(t, map[string]int64{bundle.DataFile: 200 << 20})
	t.Logf("archive of %d bytes", len(raw))
	var err error
	n := allocated(func() { _, err = bundle.Read(bytes.NewReader(raw)) })
	var le *bundle.LimitError
	if !errors.Is(err, bundle.ErrTooLarge) || !errors.As(err, &le) || le.Limit != "data.json" || le.Max != bundle.DefaultMaxDataBytes {
		t.Fatalf("Read: %v, want the data.json limit", err)
	}
	if n > 8<<20 {
		t.Fatalf("Read allocated %d bytes to refuse a bomb", n)
	}
}

// TestReadLimits: each limit refuses what passes it, by name, and accepts
// what is at it.
func TestReadLimits(t *testing.T) {
	tests := []struct {
		name      string
		files     map[string]int64
		limits    bundle.Limits
		wantLimit string // "" accepts
	}{
		{name: "data at its limit", files: map[string]int64{bundle.DataFile: 4096}, limits: bundle.Limits{Data: 4096}},
		{name: "data over its limit", files: map[string]int64{bundle.DataFile: 4097}, limits: bundle.Limits{Data: 4096}, wantLimit: "data.json"},
		{name: "data over the default", files: map[string]int64{bundle.DataFile: bundle.DefaultMaxDataBytes + 1}, wantLimit: "data.json"},
		{name: "data over the default, allowed by a higher limit", files: map[string]int64{bundle.DataFile: bundle.DefaultMaxDataBytes + 1}, limits: bundle.Limits{Data: bundle.DefaultMaxDataBytes + 1, File: bundle.DefaultMaxDataBytes + 1}},
		{name: "an ignored file over the file limit", files: map[string]int64{"/big.bin": 4097}, limits: bundle.Limits{File: 4096}, wantLimit: "file"},
		{name: "an ignored file over the default file limit", files: map[string]int64{"/big.bin": bundle.MaxFileBytes + 1}, wantLimit: "file"},
		{name: "files each under their limit, over the total", files: map[string]int64{"/a": 3000, "/b": 3000, "/c": 3000}, limits: bundle.Limits{Total: 8192, File: 4096}, wantLimit: "archive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := bundle.ReadLimited(bytes.NewReader(streamArchive(t, tt.files)), tt.limits)
			if tt.wantLimit == "" {
				if err != nil {
					t.Fatalf("ReadLimited: %v", err)
				}
				if len(b.Data) != int(tt.files[bundle.DataFile]) {
					t.Fatalf("data of %d bytes, want %d", len(b.Data), tt.files[bundle.DataFile])
				}
				return
			}
			var le *bundle.LimitError
			if !errors.Is(err, bundle.ErrTooLarge) || !errors.As(err, &le) || le.Limit != tt.wantLimit {
				t.Fatalf("ReadLimited: %v, want the %s limit", err, tt.wantLimit)
			}
		})
	}
}
