package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"
)

// MaxBytes bounds what Read accepts: the compressed archive, and the
// archive once decompressed (every file and tar header, read or skipped).
const MaxBytes = 256 << 20

// MaxFileBytes bounds any one file of the archive, by default.
const MaxFileBytes = 64 << 20

// DefaultMaxDataBytes bounds data.json, by default.
const DefaultMaxDataBytes = 64 << 20

// Limits bound what [ReadLimited] accepts. A zero field means its default.
// Bytes are counted as they are decompressed: an archive over a limit is
// refused as soon as that is known (from a file's header, or when the
// count passes the limit), never read whole first.
type Limits struct {
	// Total bounds the decompressed archive; default and at most MaxBytes.
	Total int64
	// File bounds any one file; default MaxFileBytes.
	File int64
	// Data bounds data.json; default DefaultMaxDataBytes.
	Data int64
}

// CheckFile checks the file name (slash-rooted) of size bytes, found
// after read bytes of the decompressed archive, against l (defaults
// filled in): a [*LimitError] when it passes one. Any file whose base name
// is data.json (OPA bundles may hold one per directory) is held to the
// data.json limit.
func (l Limits) CheckFile(name string, size, read int64) error {
	l = l.withDefaults()
	switch {
	case size < 0:
		return fmt.Errorf("%w: %s has a negative size", ErrInvalid, name)
	case path.Base(name) == path.Base(DataFile) && size > l.Data:
		return &LimitError{Limit: "data.json", Max: l.Data, File: name}
	case size > l.File:
		return &LimitError{Limit: "file", Max: l.File, File: name}
	case size > l.Total-read:
		return &LimitError{Limit: "archive", Max: l.Total}
	}
	return nil
}

func (l Limits) withDefaults() Limits {
	if l.Total <= 0 || l.Total > MaxBytes {
		l.Total = MaxBytes
	}
	if l.File <= 0 {
		l.File = MaxFileBytes
	}
	if l.Data <= 0 {
		l.Data = DefaultMaxDataBytes
	}
	return l
}

// LimitError is an archive over one of its [Limits]; it is [ErrTooLarge].
type LimitError struct {
	// Limit names the limit: "archive", "file" or "data.json".
	Limit string
	// Max is the limit in bytes.
	Max int64
	// File is the file that passed it ("" for the archive).
	File string
}

func (e *LimitError) Error() string {
	if e.File == "" {
		return fmt.Sprintf("%v: the decompressed archive is over the %s limit of %s", ErrTooLarge, e.Limit, mib(e.Max))
	}
	return fmt.Sprintf("%v: %s is over the %s limit of %s", ErrTooLarge, e.File, e.Limit, mib(e.Max))
}

// Is reports ErrTooLarge.
func (e *LimitError) Is(target error) bool { return target == ErrTooLarge }

// mib writes n bytes in MiB when it is a whole number of them.
func mib(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// countingReader counts the bytes read through it and fails once they
// pass max.
type countingReader struct {
	r      io.Reader
	n, max int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n > c.max {
		return 0, &LimitError{Limit: "archive", Max: c.max}
	}
	// Never read more than one byte past the limit.
	if rest := c.max + 1 - c.n; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		return n, &LimitError{Limit: "archive", Max: c.max}
	}
	return n, err
}

// File names inside a bundle archive.
const (
	ManifestFile = "/.manifest"
	WasmFile     = "/policy.wasm"
	DataFile     = "/data.json"
)

// Bundle is a compiled policy: the Wasm module, its base data and manifest.
type Bundle struct {
	Manifest Manifest
	// Wasm is the policy compiled to WebAssembly (OPA Wasm ABI).
	Wasm []byte
	// Data is the base data document, a JSON object.
	Data []byte
}

// Manifest is the bundle's /.manifest, in OPA's format.
type Manifest struct {
	// Revision identifies this build of the bundle.
	Revision string `json:"revision"`
	// Roots are the paths under data this bundle owns.
	Roots []string `json:"roots"`
	// Entrypoints are the rules that can be evaluated ("nexus/authz/allow").
	// In the JSON form they are OPA's "wasm" resolvers.
	Entrypoints []string `json:"-"`
	// Metadata is free-form information about the bundle. The compiler
	// records the paths of input the policy reads under
	// [MetadataInputPaths] (see [Manifest.InputPaths]) and the
	// non-deterministic builtins each entrypoint can reach under
	// [MetadataNondeterministic] (see [Manifest.Nondeterministic]).
	Metadata map[string]any `json:"metadata,omitempty"`
}

type wasmResolver struct {
	Entrypoint string `json:"entrypoint"`
	Module     string `json:"module"`
}

type manifestJSON struct {
	Revision string         `json:"revision"`
	Roots    []string       `json:"roots"`
	Wasm     []wasmResolver `json:"wasm,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// MarshalJSON writes the manifest as OPA does, entrypoints as wasm resolvers.
func (m Manifest) MarshalJSON() ([]byte, error) {
	mj := manifestJSON{Revision: m.Revision, Roots: m.Roots, Metadata: m.Metadata}
	if mj.Roots == nil {
		mj.Roots = []string{}
	}
	for _, e := range m.Entrypoints {
		mj.Wasm = append(mj.Wasm, wasmResolver{Entrypoint: e, Module: WasmFile})
	}
	return json.Marshal(mj)
}

// UnmarshalJSON reads an OPA manifest.
func (m *Manifest) UnmarshalJSON(b []byte) error {
	var mj manifestJSON
	if err := json.Unmarshal(b, &mj); err != nil {
		return err
	}
	*m = Manifest{Revision: mj.Revision, Roots: mj.Roots, Metadata: mj.Metadata}
	for _, w := range mj.Wasm {
		m.Entrypoints = append(m.Entrypoints, w.Entrypoint)
	}
	return nil
}

// Write writes the bundle as an OPA-format .tar.gz (/.manifest,
// /policy.wasm, /data.json). The output is deterministic.
func (b *Bundle) Write(w io.Writer) error {
	man, err := json.Marshal(b.Manifest)
	if err != nil {
		return fmt.Errorf("bundle: encode manifest: %w", err)
	}
	data := b.Data
	if len(data) == 0 {
		data = []byte("{}")
	}
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	for _, f := range []struct {
		name string
		body []byte
	}{{DataFile, data}, {WasmFile, b.Wasm}, {ManifestFile, man}} {
		hdr := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0).UTC()}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("bundle: write: %w", err)
		}
		if _, err := tw.Write(f.body); err != nil {
			return fmt.Errorf("bundle: write: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("bundle: write: %w", err)
	}
	if err := gz.Close(); err != nil {
		return fmt.Errorf("bundle: write: %w", err)
	}
	return nil
}

// Read reads an OPA-format wasm bundle (.tar.gz) within the default
// [Limits]. Files other than the manifest, policy.wasm and data.json (Rego
// sources, signatures) are ignored. It never panics on malformed input;
// errors wrap [ErrInvalid] or [ErrTooLarge] (a [*LimitError]).
func Read(r io.Reader) (*Bundle, error) {
	return ReadLimited(r, Limits{})
}

// ReadLimited is Read within limits l.
func ReadLimited(r io.Reader, l Limits) (*Bundle, error) {
	l = l.withDefaults()
	lr := &io.LimitedReader{R: r, N: MaxBytes + 1}
	gz, err := gzip.NewReader(lr)
	if err != nil {
		return nil, fmt.Errorf("%w: gzip: %v", ErrInvalid, err)
	}
	defer gz.Close()
	cr := &countingReader{r: gz, max: l.Total}
	tr := tar.NewReader(cr)
	var (
		b    Bundle
		have parts
	)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if le := (*LimitError)(nil); errors.As(err, &le) {
				return nil, le
			}
			if lr.N <= 0 {
				return nil, &LimitError{Limit: "archive", Max: MaxBytes}
			}
			return nil, fmt.Errorf("%w: tar: %v", ErrInvalid, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		name := path.Clean("/" + strings.TrimPrefix(hdr.Name, "./"))
		if err := l.CheckFile(name, hdr.Size, cr.n); err != nil {
			return nil, err
		}
		if !isPart(name) {
			continue
		}
		if err := have.mark(name); err != nil {
			return nil, err
		}
		body, err := readFile(tr, hdr.Size)
		if err != nil {
			return nil, err
		}
		if err := b.set(name, body); err != nil {
			return nil, err
		}
	}
	if lr.N <= 0 {
		return nil, &LimitError{Limit: "archive", Max: MaxBytes}
	}
	return b.done(have)
}

// FromFiles assembles a bundle, as Read does, from the files of an
// archive already read (slash-rooted names, each once): the manifest,
// policy.wasm and data.json; other files are ignored.
func FromFiles(files map[string][]byte) (*Bundle, error) {
	var (
		b    Bundle
		have parts
	)
	for name, body := range files {
		if !isPart(name) {
			continue
		}
		if err := have.mark(name); err != nil {
			return nil, err
		}
		if err := b.set(name, body); err != nil {
			return nil, err
		}
	}
	return b.done(have)
}

// parts records which of a bundle's files were found.
type parts struct{ man, wasm, data bool }

func isPart(name string) bool {
	return name == ManifestFile || name == WasmFile || name == DataFile
}

// mark records that the bundle file name (one of isPart's) was found: a
// second policy.wasm or data.json is an error.
func (h *parts) mark(name string) error {
	switch name {
	case ManifestFile:
		h.man = true
	case WasmFile:
		if h.wasm {
			return fmt.Errorf("%w: more than one %s", ErrInvalid, WasmFile)
		}
		h.wasm = true
	case DataFile:
		if h.data {
			return fmt.Errorf("%w: more than one %s", ErrInvalid, DataFile)
		}
		h.data = true
	}
	return nil
}

// set takes the body of the bundle file name (one of isPart's).
func (b *Bundle) set(name string, body []byte) error {
	switch name {
	case ManifestFile:
		if err := json.Unmarshal(body, &b.Manifest); err != nil {
			return fmt.Errorf("%w: manifest: %v", ErrInvalid, err)
		}
	case WasmFile:
		b.Wasm = body
	case DataFile:
		b.Data = body
	}
	return nil
}

// done checks what mark and set assembled.
func (b *Bundle) done(have parts) (*Bundle, error) {
	if err := b.check(have.man, have.wasm); err != nil {
		return nil, err
	}
	sort.Strings(b.Manifest.Roots)
	return b, nil
}

// check validates what Read assembled and defaults empty data to {}.
func (b *Bundle) check(haveMan, haveWasm bool) error {
	if !haveWasm {
		return fmt.Errorf("%w: no %s", ErrInvalid, WasmFile)
	}
	if len(b.Wasm) < 8 || !bytes.Equal(b.Wasm[:4], []byte("\x00asm")) {
		return fmt.Errorf("%w: %s is not a WebAssembly module", ErrInvalid, WasmFile)
	}
	if !haveMan {
		return fmt.Errorf("%w: no %s", ErrInvalid, ManifestFile)
	}
	if len(b.Manifest.Entrypoints) == 0 {
		return fmt.Errorf("%w: manifest lists no wasm entrypoints", ErrInvalid)
	}
	if len(bytes.TrimSpace(b.Data)) == 0 {
		b.Data = []byte("{}")
	}
	// Checked in place: decoding it here would hold a second copy.
	if !json.Valid(b.Data) {
		var probe map[string]struct{}
		err := json.Unmarshal(b.Data, &probe) // only for the error's detail
		return fmt.Errorf("%w: %s must be a JSON object: %v", ErrInvalid, DataFile, err)
	}
	if bytes.TrimLeft(b.Data, " \t\r\n")[0] != '{' {
		return fmt.Errorf("%w: %s must be a JSON object", ErrInvalid, DataFile)
	}
	return nil
}

// readFile reads a file of size bytes (its header's, already checked
// against the limits) into one buffer of that size: the file is held
// once, never grown through copies.
func readFile(r io.Reader, size int64) ([]byte, error) {
	buf := make([]byte, size)
	if _, err := io.ReadFull(r, buf); err != nil {
		if le := (*LimitError)(nil); errors.As(err, &le) {
			return nil, le
		}
		return nil, fmt.Errorf("%w: short file: %v", ErrInvalid, err)
	}
	return buf, nil
}
