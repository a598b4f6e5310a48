package policyload

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	opabundle "github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/loader"
	"github.com/open-policy-agent/opa/v1/loader/filter"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
)

// Options says how to compile a policy that comes as Rego.
type Options struct {
	// Limits bound a bundle archive's files (see bundle.Limits); zero
	// fields mean their defaults.
	Limits bundle.Limits
	// Entrypoints are the rules the policy must expose, as slash paths
	// without the data prefix ("envoy/authz/allow"). Rego is compiled for
	// them; a Wasm bundle is used as it is when it exposes them all, or
	// when it holds no Rego to compile instead (the caller then checks its
	// entrypoints). Empty means: a Wasm bundle's own entrypoints; Rego
	// cannot be compiled without any.
	Entrypoints []string
	// OptionalEntrypoints are compiled too when the policy defines them
	// (see compiler.Options.OptionalEntrypoints): the decision log's mask
	// and drop rules.
	OptionalEntrypoints []string
	// RegoV0 parses Rego as v0 instead of v1. A bundle's manifest
	// (rego_version, file_rego_versions) overrides it for its files.
	RegoV0 bool
	// Revision is recorded in the manifest of a policy compiled from a
	// .rego file or a directory; a bundle keeps its manifest's revision.
	Revision string
	// Builtins declares host builtins besides [bundle.NexusBuiltins] that
	// the engine will provide (see compiler.Options.Builtins).
	Builtins []bundle.HostBuiltin
	// Ignore lists name patterns of files and directories to skip, as
	// `opa run --ignore` takes them: each is matched (path/filepath.Match)
	// against the base name of every file and directory found inside the
	// policy path, and a directory that matches is skipped with all it
	// holds. ".*" skips dot-files and dot-directories, such as the
	// "..data" and "..2024_..." directories of a Kubernetes ConfigMap
	// mount. The path given is never skipped itself, so a single .rego
	// file is loaded whatever the patterns; in a bundle (directory or
	// archive) every file is subject to them, the .manifest included. A
	// directory holding a .manifest that the patterns skip is loaded as a
	// plain directory. Empty skips nothing.
	Ignore []string
}

// Load reads the policy at path: a .rego file, a directory of Rego and
// data files, a bundle directory (one with a .manifest, read as OPA reads
// it with `opa run --bundle`), or a bundle archive (.tar.gz; an OPA bundle
// of Rego sources or a bundle with policy.wasm, see [FromTarGz]). Bundle
// directories and archives are compiled alike. Errors name path; Rego
// errors are [compiler.Errors] ("file:line:col: message").
func Load(ctx context.Context, p string, opts Options) (*bundle.Bundle, error) {
	ignore, err := IgnoreFilter(opts.Ignore)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", p, err)
	}
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if st.IsDir() {
		man := filepath.Join(p, ".manifest")
		if mst, err := os.Stat(man); err == nil && (ignore == nil || !ignore(man, mst, 1)) {
			b, err := fromBundleDir(ctx, p, ignore, opts)
			if err != nil {
				return nil, fmt.Errorf("policy %s: %w", p, err)
			}
			return b, nil
		}
	}
	if st.IsDir() || strings.HasSuffix(p, ".rego") {
		co := compileOptions(opts, compiler.Options{Paths: []string{p}})
		co.Filter = ignore
		b, err := compiler.Compile(ctx, co)
		if err != nil {
			if st.IsDir() && len(opts.Ignore) == 0 && isConfigMapMount(p) {
				err = fmt.Errorf("%w (%s looks like a Kubernetes ConfigMap mount, whose ..data directory repeats every file: skip its dot-directories with the pattern .*, as opa run --ignore=.* does; nexus serve takes it as --policy-ignore=.*)", err, p)
			}
			return nil, fmt.Errorf("policy %s: %w", p, err)
		}
		return b, nil
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("policy %s: not a .rego file, a directory or a bundle archive", p)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	b, err := FromTarGz(ctx, f, opts)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", p, err)
	}
	return b, nil
}

// IgnoreFilter returns the filter that skips what patterns name (see
// [Options.Ignore]), in the form OPA's loaders take: it reports true for
// a file or directory whose base name matches one of the patterns, at a
// depth of 1 or more (0 is the path given itself). No patterns yield a
// nil filter; a malformed pattern is an error that names it.
func IgnoreFilter(patterns []string) (func(path string, info fs.FileInfo, depth int) bool, error) {
	if len(patterns) == 0 {
		return nil, nil
	}
	var filters []loader.Filter
	for _, p := range patterns {
		if _, err := filepath.Match(p, ""); err != nil {
			return nil, fmt.Errorf("ignore pattern %q: %w", p, err)
		}
		filters = append(filters, loader.GlobExcludeName(p, 1))
	}
	return func(path string, info fs.FileInfo, depth int) bool {
		for _, f := range filters {
			if f(path, info, depth) {
				return true
			}
		}
		return false
	}, nil
}

// isConfigMapMount reports whether dir has the "..data" entry that
// Kubernetes puts in a ConfigMap or Secret volume.
func isConfigMapMount(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, "..data"))
	return err == nil
}

// FromTarGz reads a bundle archive (gzip-compressed tar) from r and
// returns it compiled:
//
//   - with /policy.wasm, it is read with [bundle.Read] and used as it is,
//     unless it also holds Rego and its Wasm lacks one of
//     opts.Entrypoints;
//   - otherwise its Rego files, data files (data.json, data.yaml, mounted
//     at their directory as OPA does) and /.manifest are compiled for
//     opts.Entrypoints, and the result keeps the manifest's revision,
//     roots and metadata.
//
// The archive is read whole into memory within [bundle.MaxBytes]. Bad
// archives yield errors that match [bundle.ErrInvalid] or
// [bundle.ErrTooLarge]; links and names with ".." match [ErrUnsafeEntry];
// bad Rego yields [compiler.Errors]. ctx bounds the compilation.
//
// Entries that opts.Ignore names are left out, as if the archive did not
// hold them: a file whose name, or the name of a directory above it,
// matches a pattern.
func FromTarGz(ctx context.Context, r io.Reader, opts Options) (*bundle.Bundle, error) {
	ignore, err := IgnoreFilter(opts.Ignore)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(io.LimitReader(r, bundle.MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	if len(raw) > bundle.MaxBytes {
		return nil, fmt.Errorf("%w: the archive exceeds %d bytes", bundle.ErrTooLarge, bundle.MaxBytes)
	}
	files, err := untar(raw, opts.Limits)
	if err != nil {
		return nil, err
	}
	files = ignoreEntries(files, ignore)
	var hasWasm, hasRego bool
	for _, f := range files {
		switch {
		case f.name == bundle.WasmFile:
			hasWasm = true
		case strings.HasSuffix(f.name, ".rego"):
			hasRego = true
		}
	}
	if hasWasm {
		byName := make(map[string][]byte, len(files))
		for _, f := range files {
			byName[f.name] = f.data
		}
		b, err := bundle.FromFiles(byName)
		if err != nil {
			return nil, err
		}
		missing := missing(b.Manifest.Entrypoints, opts.Entrypoints)
		if !hasRego || len(missing) == 0 {
			return b, nil
		}
		cb, err := compileFiles(ctx, files, opts)
		if err != nil {
			return nil, fmt.Errorf("its %s lacks the entrypoints %s and its Rego does not compile for them: %w", bundle.WasmFile, strings.Join(missing, ", "), err)
		}
		return cb, nil
	}
	return compileFiles(ctx, files, opts)
}

// memFile is one regular file of an archive, its name slash-rooted.
type memFile struct {
	name string
	data []byte
}

// untar lists the regular files of a .tar.gz held in memory, refusing
// links, devices, names with "..", duplicates and files over limits (each
// file, data.json, the archive in all), from their headers.
func untar(raw []byte, limits bundle.Limits) ([]memFile, error) {
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: gzip: %v", bundle.ErrInvalid, err)
	}
	defer gz.Close()
	tr := tar.NewReader(gz)
	var (
		files  []memFile
		seen   = map[string]bool{}
		budget = int64(bundle.MaxBytes)
	)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: tar: %v", bundle.ErrInvalid, err)
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return nil, err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		case tar.TypeSymlink, tar.TypeLink:
			return nil, fmt.Errorf("%w: %w: %s is a link (to %q); a bundle holds regular files only", bundle.ErrInvalid, ErrUnsafeEntry, hdr.Name, hdr.Linkname)
		default:
			return nil, fmt.Errorf("%w: %w: %s is not a regular file (tar type %q)", bundle.ErrInvalid, ErrUnsafeEntry, hdr.Name, hdr.Typeflag)
		}
		if err := limits.CheckFile(name, hdr.Size, bundle.MaxBytes-budget); err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: %s appears twice in the archive", bundle.ErrInvalid, name)
		}
		seen[name] = true
		// One buffer of the header's size, which the limits bound.
		data := make([]byte, hdr.Size)
		if _, err := io.ReadFull(tr, data); err != nil {
			return nil, fmt.Errorf("%w: %s: short file: %v", bundle.ErrInvalid, hdr.Name, err)
		}
		budget -= hdr.Size
		files = append(files, memFile{name: name, data: data})
	}
	return files, nil
}

// ignoreEntries returns the files that ignore does not skip: it is asked
// about each directory above a file (from the top, depth 1 first) and
// then about the file, as OPA's loaders ask about what they walk.
func ignoreEntries(files []memFile, ignore func(string, fs.FileInfo, int) bool) []memFile {
	if ignore == nil {
		return files
	}
	var kept []memFile
next:
	for _, f := range files {
		els := strings.Split(strings.TrimPrefix(f.name, "/"), "/")
		for i, el := range els[:len(els)-1] {
			if ignore(path.Join(els[:i+1]...), dirInfo(el), i+1) {
				continue next
			}
		}
		if ignore(f.name, fileInfo{name: els[len(els)-1], size: int64(len(f.data))}, len(els)) {
			continue
		}
		kept = append(kept, f)
	}
	return kept
}

// dirInfo describes a directory of an archive to a filter.
type dirInfo string

func (d dirInfo) Name() string     { return string(d) }
func (dirInfo) Size() int64        { return 0 }
func (dirInfo) Mode() fs.FileMode  { return fs.ModeDir | 0o755 }
func (dirInfo) ModTime() time.Time { return time.Time{} }
func (dirInfo) IsDir() bool        { return true }
func (dirInfo) Sys() any           { return nil }

// fileInfo describes a file of an archive to a filter.
type fileInfo struct {
	name string
	size int64
}

func (f fileInfo) Name() string     { return f.name }
func (f fileInfo) Size() int64      { return f.size }
func (fileInfo) Mode() fs.FileMode  { return 0o644 }
func (fileInfo) ModTime() time.Time { return time.Time{} }
func (fileInfo) IsDir() bool        { return false }
func (fileInfo) Sys() any           { return nil }

// entryName is the slash-rooted name of an archive entry ("./a/b.rego"
// and "/a/b.rego" are "/a/b.rego"); a name with a ".." element, a
// backslash or a NUL byte is refused.
func entryName(n string) (string, error) {
	if n == "" || strings.ContainsAny(n, "\\\x00") {
		return "", fmt.Errorf("%w: %w: entry name %q", bundle.ErrInvalid, ErrUnsafeEntry, n)
	}
	for _, el := range strings.Split(n, "/") {
		if el == ".." {
			return "", fmt.Errorf("%w: %w: %s climbs out of the archive", bundle.ErrInvalid, ErrUnsafeEntry, n)
		}
	}
	return path.Clean("/" + n), nil
}

// compileFiles reads the files as an OPA bundle and compiles its Rego.
func compileFiles(ctx context.Context, files []memFile, opts Options) (*bundle.Bundle, error) {
	ob, err := readOPA(opabundle.NewCustomReader(&memLoader{files: files}).WithSizeLimitBytes(bundle.MaxBytes), opts)
	if err != nil {
		return nil, err
	}
	return compileOPA(ctx, ob, opts)
}

// readOPA reads a bundle with OPA's reader.
func readOPA(r *opabundle.Reader, opts Options) (opabundle.Bundle, error) {
	ob, err := r.
		WithSkipBundleVerification(true).
		WithLazyLoadingMode(false).
		WithCapabilities(compiler.Capabilities()).
		WithRegoVersion(regoVersion(opts)).
		Read()
	if err != nil {
		if errs := Located(err); errs != err {
			return ob, errs
		}
		return ob, fmt.Errorf("%w: %v", bundle.ErrInvalid, err)
	}
	return ob, nil
}

func regoVersion(opts Options) ast.RegoVersion {
	if opts.RegoV0 {
		return ast.RegoV0
	}
	return ast.RegoV1
}

// fromBundleDir reads a bundle directory (one with a .manifest, as
// `opa run --bundle DIR` takes it) and returns it compiled, as FromTarGz
// does an archive. Symbolic links are not followed, as OPA does not;
// ignore (nil for none) skips files and directories as OPA's --ignore
// does.
func fromBundleDir(ctx context.Context, dir string, ignore func(string, fs.FileInfo, int) bool, opts Options) (*bundle.Bundle, error) {
	dl := opabundle.NewDirectoryLoader(dir)
	if ignore != nil {
		dl = dl.WithFilter(ignore)
	}
	ob, err := readOPA(opabundle.NewCustomReader(dl).WithBaseDir(dir), opts)
	if err != nil {
		return nil, err
	}
	if len(ob.WasmModules) == 0 {
		return compileOPA(ctx, ob, opts)
	}
	if len(ob.WasmModules) > 1 {
		return nil, fmt.Errorf("%w: %d Wasm modules; nexus runs one, %s", bundle.ErrInvalid, len(ob.WasmModules), bundle.WasmFile)
	}
	wasm := ob.WasmModules[0]
	man := bundle.Manifest{Revision: ob.Manifest.Revision, Metadata: ob.Manifest.Metadata}
	if ob.Manifest.Roots != nil {
		man.Roots = slices.Clone(*ob.Manifest.Roots)
	}
	for _, r := range ob.Manifest.WasmResolvers {
		if r.Module == wasm.Path {
			man.Entrypoints = append(man.Entrypoints, r.Entrypoint)
		}
	}
	data, err := json.Marshal(ob.Data)
	if err != nil {
		return nil, fmt.Errorf("%w: data: %v", bundle.ErrInvalid, err)
	}
	// Written and read again: Read checks the bundle as it does an archive.
	var buf bytes.Buffer
	if err := (&bundle.Bundle{Manifest: man, Wasm: wasm.Raw, Data: data}).Write(&buf); err != nil {
		return nil, err
	}
	b, err := bundle.Read(&buf)
	if err != nil {
		return nil, err
	}
	missing := missing(b.Manifest.Entrypoints, opts.Entrypoints)
	if len(ob.Modules) == 0 || len(missing) == 0 {
		return b, nil
	}
	cb, err := compileOPA(ctx, ob, opts)
	if err != nil {
		return nil, fmt.Errorf("its %s lacks the entrypoints %s and its Rego does not compile for them: %w", bundle.WasmFile, strings.Join(missing, ", "), err)
	}
	return cb, nil
}

// compileOPA compiles the Rego of an OPA bundle for opts.Entrypoints,
// keeping its manifest's revision, roots and metadata.
func compileOPA(ctx context.Context, ob opabundle.Bundle, opts Options) (*bundle.Bundle, error) {
	def := regoVersion(opts)
	if ob.Type() == opabundle.DeltaBundleType {
		return nil, fmt.Errorf("%w: %w", bundle.ErrInvalid, ErrDeltaBundle)
	}
	if len(ob.Modules) == 0 {
		return nil, fmt.Errorf("%w: the bundle holds neither %s nor Rego files", bundle.ErrInvalid, bundle.WasmFile)
	}
	mods := make(map[string]string, len(ob.Modules))
	global := ob.RegoVersion(def)
	var version ast.RegoVersion
	var first string
	for _, m := range ob.Modules {
		v, err := ob.RegoVersionForFile(m.RelativePath, global)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", bundle.ErrInvalid, err)
		}
		if first == "" {
			first, version = m.Path, v
		} else if v != version {
			return nil, fmt.Errorf("%w: %s is %s, %s is %s", ErrMixedRegoVersions, first, version, m.Path, v)
		}
		mods[m.Path] = string(m.Raw)
	}
	eps := opts.Entrypoints
	if len(eps) == 0 {
		for _, r := range ob.Manifest.WasmResolvers {
			eps = append(eps, r.Entrypoint)
		}
	}
	co := compileOptions(opts, compiler.Options{Modules: mods, Data: ob.Data})
	co.Entrypoints = eps
	co.RegoV0 = version == ast.RegoV0
	co.Revision = ob.Manifest.Revision
	if ob.Manifest.Roots != nil {
		co.Roots = slices.Clone(*ob.Manifest.Roots)
	}
	b, err := compiler.Compile(ctx, co)
	if err != nil {
		return nil, err
	}
	for k, v := range ob.Manifest.Metadata {
		if _, ours := b.Manifest.Metadata[k]; ours {
			continue
		}
		if b.Manifest.Metadata == nil {
			b.Manifest.Metadata = map[string]any{}
		}
		b.Manifest.Metadata[k] = v
	}
	sort.Strings(b.Manifest.Roots)
	return b, nil
}

func compileOptions(opts Options, co compiler.Options) compiler.Options {
	co.Entrypoints = opts.Entrypoints
	co.OptionalEntrypoints = opts.OptionalEntrypoints
	co.RegoV0 = opts.RegoV0
	co.Revision = opts.Revision
	co.Builtins = opts.Builtins
	return co
}

// Located turns OPA's errors (ast.Errors, an *ast.Error, loader.Errors)
// into [compiler.Errors], each "file:line:col: message", so that
// every tool reports Rego errors alike; an error that carries none is
// returned as it is.
func Located(err error) error {
	var out compiler.Errors
	add := func(e *ast.Error) {
		ce := &compiler.Error{Code: codeOf(e.Code), Message: e.Message}
		if e.Location != nil {
			ce.File, ce.Line, ce.Column = e.Location.File, e.Location.Row, e.Location.Col
		}
		out = append(out, ce)
	}
	var collect func(err error) bool
	collect = func(err error) bool {
		var lerrs loader.Errors
		var aerrs ast.Errors
		var aerr *ast.Error
		switch {
		case errors.As(err, &lerrs):
			for _, le := range lerrs {
				if !collect(le) {
					out = append(out, &compiler.Error{Code: compiler.CodeLoad, Message: le.Error()})
				}
			}
		case errors.As(err, &aerrs):
			for _, e := range aerrs {
				add(e)
			}
		case errors.As(err, &aerr):
			add(aerr)
		default:
			return false
		}
		return true
	}
	if !collect(err) || len(out) == 0 {
		return err
	}
	return out
}

// codeOf maps OPA's error codes to the compiler's.
func codeOf(opaCode string) string {
	switch opaCode {
	case ast.ParseErr:
		return compiler.CodeParse
	case ast.TypeErr:
		return compiler.CodeType
	}
	return compiler.CodeCompile
}

// missing lists the elements of want that have lacks.
func missing(have, want []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			out = append(out, w)
		}
	}
	return out
}

// memLoader hands OPA's bundle reader the files of an archive already read
// and checked.
type memLoader struct {
	files []memFile
	next  int
}

var _ opabundle.DirectoryLoader = (*memLoader)(nil)

func (l *memLoader) NextFile() (*opabundle.Descriptor, error) {
	if l.next >= len(l.files) {
		return nil, io.EOF
	}
	f := l.files[l.next]
	l.next++
	return opabundle.NewDescriptor(f.name, f.name, bytes.NewBuffer(f.data)), nil
}

// The files are known and checked already: the reader's options for
// walking a directory do not apply.
func (l *memLoader) WithFilter(filter.LoaderFilter) opabundle.DirectoryLoader { return l }
func (l *memLoader) WithPathFormat(opabundle.PathFormat) opabundle.DirectoryLoader {
	return l
}
func (l *memLoader) WithSizeLimitBytes(int64) opabundle.DirectoryLoader { return l }
func (l *memLoader) WithFollowSymlinks(bool) opabundle.DirectoryLoader  { return l }
