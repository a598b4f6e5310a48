package compiler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	opabundle "github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/compile"
	"github.com/open-policy-agent/opa/v1/loader"

	"github.com/nexuspdp/nexus/bundle"
)

// Options says what to compile. The zero value compiles nothing: at least one
// Rego module (Paths or Modules) and one entrypoint are required.
type Options struct {
	// Paths are Rego files, JSON/YAML data files and directories holding
	// them (read recursively). Data files are mounted as OPA does: a file
	// given directly at the root of data, a file found in a directory under
	// the path of its sub-directory.
	Paths []string
	// Filter, when set, is asked about every file and directory found
	// under Paths, as OPA's loader asks its filters: path as found, its
	// file info (links followed) and its depth (0 for a path given in
	// Paths, 1 for an entry of a directory given, and so on). Returning
	// true skips the file, or the directory with everything under it.
	// Nil skips nothing.
	Filter func(path string, info fs.FileInfo, depth int) bool
	// Modules are in-memory Rego modules, file name to source (embedded
	// policies, tests). The file name is used in error locations.
	Modules map[string]string
	// Data is base data merged at the root of data (after the data files).
	Data map[string]any
	// DataJSON is base data as a JSON object merged at the root of data
	// (after Data). Empty means none.
	DataJSON []byte
	// Entrypoints are the rules callers may evaluate, as slash paths
	// without the data prefix: "nexus/authz/allow".
	Entrypoints []string
	// OptionalEntrypoints are compiled too, each only when a module
	// defines its rule (or a rule inside it): a policy may or may not
	// have them. The decision log's mask and drop rules
	// ("system/log/mask", "system/log/drop") are compiled this way.
	OptionalEntrypoints []string
	// Revision is recorded in the manifest; empty means none.
	Revision string
	// Roots are the bundle roots recorded in the manifest. Empty means the
	// smallest set of prefixes covering every package and every top-level
	// data key.
	Roots []string
	// OptimizationLevel is OPA's optimisation level (0, 1 or 2). Data is
	// never folded into the module at any level (see the package doc).
	OptimizationLevel int
	// RegoV0 parses modules as Rego v0 instead of v1.
	RegoV0 bool
	// EnablePrint keeps print() calls in the policy (OPA removes them by
	// default); the engine writes their output to engine.Config.Print.
	EnablePrint bool
	// Builtins declares further host builtins (besides
	// bundle.NexusBuiltins) that the engine's registry will provide.
	Builtins []bundle.HostBuiltin
}

// Compile compiles the policy and data into a bundle. Bad policies yield
// [Errors] (each "file:line:col: message"); unsupported builtins are named
// together in one error with code [CodeUnsupportedBuiltin].
func Compile(ctx context.Context, opts Options) (b *bundle.Bundle, err error) {
	defer func() {
		// OPA's compiler is not expected to panic, but bad input must never
		// crash the caller.
		if r := recover(); r != nil {
			b, err = nil, Errors{{Code: CodeCompile, Message: fmt.Sprintf("internal compiler error: %v", r)}}
		}
	}()
	if len(opts.Entrypoints) == 0 {
		return nil, ErrNoEntrypoint
	}
	if opts.OptimizationLevel < 0 || opts.OptimizationLevel > 2 {
		return nil, fmt.Errorf("compiler: optimization level %d out of range 0..2", opts.OptimizationLevel)
	}
	regoVersion := ast.RegoV1
	if opts.RegoV0 {
		regoVersion = ast.RegoV0
	}
	caps, err := capabilitiesWith(opts.Builtins)
	if err != nil {
		return nil, err
	}
	files, data, err := load(opts, regoVersion, caps)
	if err != nil {
		return nil, err
	}
	if errs := unsupportedBuiltins(files, caps); len(errs) > 0 {
		return nil, errs
	}
	roots := opts.Roots
	if len(roots) == 0 {
		roots = defaultRoots(files, data)
	}
	// Before OPA's build, which rewrites the parsed modules.
	ac := analysed(files, caps)

	opts.Entrypoints = withDefined(opts.Entrypoints, opts.OptionalEntrypoints, files)
	wasm, eps, err := build(ctx, opts, files, caps, regoVersion)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("compiler: encode data: %w", err)
	}
	man := bundle.Manifest{Revision: opts.Revision, Roots: slices.Clone(roots), Entrypoints: eps}
	man.Metadata = metadata(ac, caps, eps)
	return &bundle.Bundle{Manifest: man, Wasm: wasm, Data: raw}, nil
}

// metadata is what the manifest records of the analyses: the paths of
// input the policy reads (all its rules, and those each entrypoint can
// reach), and the non-deterministic builtins each
// entrypoint can reach; neither when the modules did not compile on their
// own (ac is nil), so that both are unknown. Values are JSON-shaped so
// that they survive Write and Read unchanged. It returns nil when there is
// nothing to record.
func metadata(ac *ast.Compiler, caps *ast.Capabilities, eps []string) map[string]any {
	md := map[string]any{}
	if paths, ok := inputPaths(ac); ok {
		list := make([]any, len(paths))
		for i, p := range paths {
			list[i] = p
		}
		md[bundle.MetadataInputPaths] = list
	}
	byEP := map[string]any{}
	for _, ep := range eps {
		if paths, ok := inputPathsFor(ac, ep); ok {
			list := make([]any, len(paths))
			for i, p := range paths {
				list[i] = p
			}
			byEP[ep] = list
		}
	}
	if len(byEP) > 0 {
		md[bundle.MetadataEntrypointInputPaths] = byEP
	}
	if ac != nil {
		nd := map[string]any{}
		for ep, names := range nondeterministic(ac, caps, eps) {
			list := make([]any, len(names))
			for i, n := range names {
				list[i] = n
			}
			nd[ep] = list
		}
		md[bundle.MetadataNondeterministic] = nd
	}
	if len(md) == 0 {
		return nil
	}
	return md
}

// withDefined returns eps followed by those of optional that a module of
// files defines and eps lacks. An optional entrypoint is defined when a
// rule's document is the entrypoint or lies inside it (a rule of a package
// below it). A rule whose value merely holds it (system.log := {"mask":
// ...}) does not count: OPA's compiler cannot compile such an entrypoint.
func withDefined(eps, optional []string, files []opabundle.ModuleFile) []string {
	out := slices.Clone(eps)
	for _, ep := range optional {
		if slices.Contains(out, ep) {
			continue
		}
		want := ast.Ref{ast.DefaultRootDocument}
		for _, part := range strings.Split(strings.Trim(ep, "/"), "/") {
			want = append(want, ast.StringTerm(part))
		}
	files:
		for _, f := range files {
			for _, r := range f.Parsed.Rules {
				if r.Module == nil {
					continue
				}
				path := r.Module.Package.Path.Extend(r.Head.Ref().GroundPrefix())
				if path.HasPrefix(want) {
					out = append(out, ep)
					break files
				}
			}
		}
	}
	return out
}

// capabilitiesWith is [Capabilities] with further host builtins declared.
func capabilitiesWith(extra []bundle.HostBuiltin) (*ast.Capabilities, error) {
	caps := Capabilities()
	if len(extra) == 0 {
		return caps, nil
	}
	c := *caps
	c.Builtins = slices.Clone(caps.Builtins)
	for _, hb := range extra {
		if hb.Name == "" || hb.Decl == nil {
			return nil, fmt.Errorf("compiler: host builtin %q needs a name and a declaration", hb.Name)
		}
		c.Builtins = append(c.Builtins, &ast.Builtin{Name: hb.Name, Decl: hb.Decl, Description: hb.Description, Nondeterministic: hb.Nondeterministic})
	}
	return &c, nil
}

// load reads the modules and data files of opts.Paths, parses
// opts.Modules and merges opts.Data and opts.DataJSON into the data.
func load(opts Options, regoVersion ast.RegoVersion, caps *ast.Capabilities) ([]opabundle.ModuleFile, map[string]any, error) {
	data := map[string]any{}
	var files []opabundle.ModuleFile
	if len(opts.Paths) > 0 {
		res, err := loader.NewFileLoader().
			WithRegoVersion(regoVersion).
			WithCapabilities(caps).
			Filtered(opts.Paths, opts.Filter)
		if err != nil {
			return nil, nil, loadErrors(err)
		}
		if res.Documents != nil {
			data = res.Documents
		}
		for _, name := range sortedKeys(res.Modules) {
			m := res.Modules[name]
			files = append(files, opabundle.ModuleFile{URL: m.Name, Path: m.Name, Raw: m.Raw, Parsed: m.Parsed})
		}
	}
	var perrs Errors
	for _, name := range sortedKeys(opts.Modules) {
		src := opts.Modules[name]
		m, err := ast.ParseModuleWithOpts(name, src, ast.ParserOptions{RegoVersion: regoVersion, Capabilities: caps})
		if err != nil {
			perrs = append(perrs, astErrors(err, CodeParse)...)
			continue
		}
		if m == nil {
			perrs = append(perrs, &Error{Code: CodeParse, File: name, Message: "empty module"})
			continue
		}
		files = append(files, opabundle.ModuleFile{URL: name, Path: name, Raw: []byte(src), Parsed: m})
	}
	if len(perrs) > 0 {
		return nil, nil, perrs
	}
	if len(files) == 0 {
		return nil, nil, ErrNoPolicy
	}
	if opts.Data != nil {
		deepMerge(data, roundTrip(opts.Data))
	}
	if len(opts.DataJSON) > 0 {
		var extra map[string]any
		dec := json.NewDecoder(bytes.NewReader(opts.DataJSON))
		dec.UseNumber() // keep big numbers exact
		if err := dec.Decode(&extra); err != nil {
			return nil, nil, Errors{{Code: CodeLoad, Message: fmt.Sprintf("data JSON: %v", err)}}
		}
		if dec.More() {
			return nil, nil, Errors{{Code: CodeLoad, Message: "data JSON: trailing data after the object"}}
		}
		deepMerge(data, extra)
	}
	return files, data, nil
}

// build runs OPA's compiler with its wasm target and returns the module and
// its entrypoints.
//
// OPA's compiler sees the policy only: roots are the packages and the data
// stays out, so that the optimiser (levels 1 and 2) treats every data
// reference outside the packages as unknown and never folds data into the
// module. The manifest records the full roots.
func build(ctx context.Context, opts Options, files []opabundle.ModuleFile, caps *ast.Capabilities, regoVersion ast.RegoVersion) ([]byte, []string, error) {
	policyRoots := defaultRoots(files, nil)
	parsed := make([]*ast.Module, len(files))
	for i, f := range files {
		parsed[i] = f.Parsed
	}
	rewritten := hoistInputRefs(aliasHostBuiltins(parsed))
	files = slices.Clone(files)
	for i := range files {
		files[i].Parsed = rewritten[i]
	}
	caps = withHostAliases(caps)
	ob := &opabundle.Bundle{Data: map[string]any{}, Modules: files}
	ob.SetRegoVersion(regoVersion)
	ob.Manifest.Roots = &policyRoots
	ob.Manifest.Init()
	c := compile.New().
		WithTarget(compile.TargetWasm).
		WithCapabilities(caps).
		WithRegoVersion(regoVersion).
		WithEntrypoints(opts.Entrypoints...).
		WithOptimizationLevel(opts.OptimizationLevel).
		WithRevision(opts.Revision).
		WithRoots(policyRoots...).
		WithEnablePrintStatements(opts.EnablePrint).
		WithBundle(ob)
	if err := c.Build(ctx); err != nil {
		return nil, nil, buildErrors(err)
	}
	out := c.Bundle()
	if len(out.WasmModules) != 1 {
		return nil, nil, fmt.Errorf("compiler: expected one wasm module, got %d", len(out.WasmModules))
	}
	var eps []string
	for _, r := range out.Manifest.WasmResolvers {
		eps = append(eps, r.Entrypoint)
	}
	return out.WasmModules[0].Raw, eps, nil
}

// unsupportedBuiltins names, in one error, every call to a function that is
// neither a builtin of the capabilities nor a user-defined function.
func unsupportedBuiltins(files []opabundle.ModuleFile, caps *ast.Capabilities) Errors {
	known := make(map[string]struct{}, len(caps.Builtins))
	for _, b := range caps.Builtins {
		known[b.Name] = struct{}{}
	}
	seen := map[string]*ast.Location{}
	for _, f := range files {
		imports := map[string]bool{}
		for _, imp := range f.Parsed.Imports {
			if imp.Alias != "" {
				imports[string(imp.Alias)] = true
			}
			if r, ok := imp.Path.Value.(ast.Ref); ok && len(r) > 0 {
				if s, ok := r[len(r)-1].Value.(ast.String); ok {
					imports[string(s)] = true
				}
			}
		}
		check := func(op ast.Ref, loc *ast.Location) {
			if len(op) == 0 {
				return
			}
			v, isVar := op[0].Value.(ast.Var)
			if !isVar || op[0].Equal(ast.DefaultRootDocument) || op[0].Equal(ast.InputRootDocument) {
				return
			}
			name := op.String()
			if _, ok := known[name]; ok {
				return
			}
			if imports[string(v)] || isLocalFunc(f.Parsed, v) {
				return
			}
			if _, dup := seen[name]; !dup {
				seen[name] = loc
			}
		}
		ast.NewGenericVisitor(func(x any) bool {
			switch x := x.(type) {
			case *ast.Expr:
				if x.IsCall() {
					check(x.Operator(), x.Location)
				}
			case *ast.Term:
				if c, ok := x.Value.(ast.Call); ok && len(c) > 0 {
					if r, ok := c[0].Value.(ast.Ref); ok {
						check(r, x.Location)
					}
				}
			}
			return false
		}).Walk(f.Parsed)
	}
	if len(seen) == 0 {
		return nil
	}
	names := sortedKeys(seen)
	first := seen[names[0]]
	e := &Error{Code: CodeUnsupportedBuiltin, Message: "unsupported builtins (neither OPA's Wasm runtime nor nexus provides them): " + strings.Join(names, ", ")}
	if first != nil {
		e.File, e.Line, e.Column = first.File, first.Row, first.Col
	}
	return Errors{e}
}

func isLocalFunc(m *ast.Module, v ast.Var) bool {
	for _, r := range m.Rules {
		if ref := r.Head.Ref(); len(ref) > 0 && ref[0].Value.Compare(v) == 0 {
			return true
		}
	}
	return false
}

// defaultRoots is the minimal prefix set covering every package and every
// top-level data key.
func defaultRoots(files []opabundle.ModuleFile, data map[string]any) []string {
	var cands []string
	for _, f := range files {
		p := f.Parsed.Package.Path
		var parts []string
		for _, t := range p[1:] {
			s, ok := t.Value.(ast.String)
			if !ok {
				break
			}
			parts = append(parts, string(s))
		}
		if len(parts) > 0 {
			cands = append(cands, strings.Join(parts, "/"))
		}
	}
	for k := range data {
		cands = append(cands, k)
	}
	sort.Slice(cands, func(i, j int) bool {
		return len(cands[i]) < len(cands[j]) || (len(cands[i]) == len(cands[j]) && cands[i] < cands[j])
	})
	var roots []string
outer:
	for _, c := range cands {
		for _, r := range roots {
			if c == r || strings.HasPrefix(c, r+"/") {
				continue outer
			}
		}
		roots = append(roots, c)
	}
	sort.Strings(roots)
	return roots
}

func loadErrors(err error) error {
	var lerrs loader.Errors
	if errors.As(err, &lerrs) {
		var out Errors
		for _, e := range lerrs {
			out = append(out, astErrors(e, CodeLoad)...)
		}
		return out
	}
	return astErrors(err, CodeLoad)
}

func buildErrors(err error) error {
	return astErrors(err, CodeCompile)
}

// astErrors converts OPA errors (ast.Errors, *ast.Error, loader errors) into
// located Errors.
func astErrors(err error, fallback string) Errors {
	var aerrs ast.Errors
	if errors.As(err, &aerrs) {
		out := make(Errors, 0, len(aerrs))
		for _, e := range aerrs {
			out = append(out, fromAST(e, fallback))
		}
		return out
	}
	var aerr *ast.Error
	if errors.As(err, &aerr) {
		return Errors{fromAST(aerr, fallback)}
	}
	return Errors{{Code: fallback, Message: err.Error()}}
}

func fromAST(e *ast.Error, fallback string) *Error {
	out := &Error{Code: fallback, Message: e.Message}
	switch e.Code {
	case ast.ParseErr:
		out.Code = CodeParse
	case ast.TypeErr:
		out.Code = CodeType
	case ast.CompileErr:
		out.Code = CodeCompile
	}
	if e.Location != nil {
		out.File, out.Line, out.Column = e.Location.File, e.Location.Row, e.Location.Col
	}
	return out
}

func deepMerge(dst, src map[string]any) {
	for k, v := range src {
		if sv, ok := v.(map[string]any); ok {
			if dv, ok := dst[k].(map[string]any); ok {
				deepMerge(dv, sv)
				continue
			}
		}
		dst[k] = v
	}
}

// roundTrip normalises Go values to what encoding/json produces, so data
// given as Go structs behaves as data read from JSON.
func roundTrip(m map[string]any) map[string]any {
	raw, err := json.Marshal(m)
	if err != nil {
		return m
	}
	var out map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&out) != nil {
		return m
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
