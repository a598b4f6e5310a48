package policytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/tester"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/builtins"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/policyload"
)

// Targets says where tests run.
type Targets int

// The targets.
const (
	// Both runs every test on the Go evaluator and on the Wasm, and
	// compares them.
	Both Targets = iota
	// Rego runs tests on OPA's Go evaluator only.
	Rego
	// Wasm runs tests on the compiled Wasm only.
	Wasm
)

// ParseTargets reads "both", "rego" or "wasm".
func ParseTargets(s string) (Targets, error) {
	switch s {
	case "both":
		return Both, nil
	case "rego":
		return Rego, nil
	case "wasm":
		return Wasm, nil
	}
	return 0, fmt.Errorf("target %q: want rego, wasm or both", s)
}

// Options says which tests to run and how.
type Options struct {
	// Paths are Rego files, data files and directories of them, as
	// compiler.Options.Paths. Required.
	Paths []string
	// Run, when not empty, is a regular expression: only tests whose full
	// name (data.pkg.test_name) it matches are run.
	Run string
	// Targets says where tests run (zero: Both).
	Targets Targets
	// RegoV0 parses the files as Rego v0.
	RegoV0 bool
	// Store backs nexus' store builtins (nexus.check, nexus.roles, ...) on
	// both targets. Nil: a call to one is an error.
	Store builtins.Store
	// Timeout bounds each test on each target. Zero means 5 seconds.
	Timeout time.Duration
	// AfterWasm, when not nil, sees each Wasm evaluation (the test's full
	// name, the result or the error) and may replace its result: tests
	// use it to make the targets disagree. Nil in production.
	AfterWasm func(test string, result []byte, err error) ([]byte, error)
}

// Status is the outcome of one test on one target.
type Status string

// The statuses.
const (
	Pass    Status = "pass"
	Fail    Status = "fail"
	Error   Status = "error"
	Skip    Status = "skip"    // a todo_ rule
	NotRun  Status = "not_run" // see Outcome.Reason
	Differs Status = "disagree"
)

// Outcome is what one target made of one test.
type Outcome struct {
	Status Status `json:"result"`
	// Error is the evaluation error (Status Error).
	Error string `json:"error,omitempty"`
	// Reason says why the test was not run (Status NotRun).
	Reason string `json:"reason,omitempty"`
	// Output is what the test printed.
	Output   string        `json:"output,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// Result is one test.
type Result struct {
	// Name is the test's full name: data.pkg.test_name.
	Name string `json:"name"`
	// Location is file:row:col of the test rule.
	Location string `json:"location"`
	// Status is the test's overall result: Differs when both targets ran
	// it and their statuses differ; else Error or Fail if one target had
	// it; else Skip, Pass, or NotRun when no target ran it.
	Status Status `json:"result"`
	// Rego and Wasm are the outcome on each target, nil for a target not
	// asked for.
	Rego *Outcome `json:"rego,omitempty"`
	Wasm *Outcome `json:"wasm,omitempty"`
}

// Disagreement says how the targets disagree on the test, or "" when
// they do not.
func (r Result) Disagreement() string {
	if r.Status != Differs {
		return ""
	}
	return fmt.Sprintf("the Wasm and the Go evaluator disagree on %s: Go evaluator %s, Wasm %s", r.Name, r.Rego.Status, r.Wasm.Status)
}

// Report is the result of a run, tests in the order of their files and
// rules.
type Report struct {
	Results []Result `json:"results"`
}

// Counts tallies the overall statuses.
func (r *Report) Counts() map[Status]int {
	m := map[Status]int{}
	for _, t := range r.Results {
		m[t.Status]++
	}
	return m
}

// goBuiltins gives the Go evaluator nexus' builtins, as the engine runs
// them: the store builtins read s (and halt the evaluation on an error,
// as a host builtin's error aborts the Wasm's), an argument that is not a
// string makes the call undefined.
func goBuiltins(s builtins.Store) []*tester.Builtin {
	impls := map[string]func(ctx context.Context, a []string) (*ast.Term, error){
		"nexus.check": func(ctx context.Context, a []string) (*ast.Term, error) {
			obj, err := api.SplitObject(a[0])
			if err != nil {
				return nil, err
			}
			sub, err := api.SplitSubject(a[2])
			if err != nil {
				return nil, err
			}
			res, err := s.Check(ctx, datastore.CheckRequest{Object: obj, Permission: a[1], Subject: sub})
			if err != nil {
				return nil, err
			}
			return ast.BooleanTerm(res.Allowed), nil
		},
		"nexus.valid_ids": func(_ context.Context, a []string) (*ast.Term, error) {
			for _, id := range a {
				if id != "" && !api.ValidID(id) {
					return ast.BooleanTerm(false), nil
				}
			}
			return ast.BooleanTerm(true), nil
		},
		"nexus.roles": func(ctx context.Context, a []string) (*ast.Term, error) {
			sub, err := api.ParseSubject(a[0])
			if err != nil {
				return nil, fmt.Errorf("nexus.roles: %w", err)
			}
			return stringsTerm(s.AppendRoles(ctx, nil, sub, a[1]))
		},
		"nexus.relations": func(ctx context.Context, a []string) (*ast.Term, error) {
			obj, err := api.ParseObject(a[0])
			if err != nil {
				return nil, fmt.Errorf("nexus.relations: %w", err)
			}
			ts, err := s.Read(ctx, datastore.Filter{ObjectType: obj.Type, ObjectID: obj.ID, Relation: a[1]})
			if err != nil {
				return nil, fmt.Errorf("nexus.relations: %w", err)
			}
			subs := make([]string, len(ts))
			for i, t := range ts {
				subs[i] = t.Subject.String()
			}
			return stringsTerm(subs, nil)
		},
		"nexus.lookup_resources": func(ctx context.Context, a []string) (*ast.Term, error) {
			sub, err := api.ParseSubject(a[0])
			if err != nil {
				return nil, fmt.Errorf("nexus.lookup_resources: %w", err)
			}
			ids, err := s.LookupResources(ctx, sub, a[1], a[2])
			if err != nil {
				return nil, fmt.Errorf("nexus.lookup_resources: %w", err)
			}
			return stringsTerm(ids, nil)
		},
		"nexus.lookup_subjects": func(ctx context.Context, a []string) (*ast.Term, error) {
			obj, err := api.ParseObject(a[0])
			if err != nil {
				return nil, fmt.Errorf("nexus.lookup_subjects: %w", err)
			}
			ids, err := s.LookupSubjects(ctx, obj, a[1], a[2])
			if err != nil {
				return nil, fmt.Errorf("nexus.lookup_subjects: %w", err)
			}
			return stringsTerm(ids, nil)
		},
	}
	impls["nexus.envoy_decide"] = func(ctx context.Context, a []string) (*ast.Term, error) {
		b, err := builtins.EnvoyDecide(ctx, s, nil, a[0], a[1])
		if err != nil {
			return nil, err
		}
		return ast.ParseTerm(string(b))
	}
	impls["nexus.resource_tenant"] = func(ctx context.Context, a []string) (*ast.Term, error) {
		return stringsTerm(builtins.ResourceTenant(ctx, s, nil, a[0], a[1]))
	}
	impls["nexus.grant"] = func(ctx context.Context, a []string) (*ast.Term, error) {
		return stringsTerm(builtins.Grant(ctx, s, nil, a[0], a[1], a[2], a[3]))
	}
	var out []*tester.Builtin
	for _, hb := range bundle.NexusBuiltins {
		impl, ok := impls[hb.Name]
		if !ok {
			continue // a builtin added to nexus and not here: the Go evaluator reports it unsupported
		}
		arity := len(hb.Decl.FuncArgs().Args)
		fn := func(bctx rego.BuiltinContext, terms []*ast.Term) (*ast.Term, error) {
			if len(terms) < arity {
				return nil, rego.NewHaltError(fmt.Errorf("%s: %d arguments, want %d", hb.Name, len(terms), arity))
			}
			args := make([]string, arity)
			for i, t := range terms[:arity] {
				str, ok := t.Value.(ast.String)
				if arr, isArr := t.Value.(*ast.Array); !ok && isArr && hb.Name == "nexus.envoy_decide" && i == 1 {
					// Its request may be the array itself, which the
					// engine reads as it reads the array's JSON.
					v, err := ast.JSON(arr)
					if err != nil {
						return nil, rego.NewHaltError(err)
					}
					b, err := json.Marshal(v)
					if err != nil {
						return nil, rego.NewHaltError(err)
					}
					str, ok = ast.String(b), true
				}
				if !ok {
					return nil, nil // undefined, as the engine answers
				}
				args[i] = string(str)
			}
			res, err := impl(bctx.Context, args)
			if err != nil {
				return nil, rego.NewHaltError(err)
			}
			return res, nil
		}
		out = append(out, &tester.Builtin{
			Decl: &ast.Builtin{Name: hb.Name, Decl: hb.Decl, Description: hb.Description},
			Func: rego.FunctionDyn(&rego.Function{Name: hb.Name, Decl: hb.Decl, Description: hb.Description}, fn),
		})
	}
	return out
}

// stringsTerm is an array of strings, or the error.
func stringsTerm(list []string, err error) (*ast.Term, error) {
	if err != nil {
		return nil, err
	}
	terms := make([]*ast.Term, len(list))
	for i, x := range list {
		terms[i] = ast.StringTerm(x)
	}
	return ast.ArrayTerm(terms...), nil
}

// test is one discovered test rule.
type test struct {
	name       string // data.pkg.test_x (with #NN for a repeated name)
	entrypoint string // pkg/test_x, "" when it cannot be one
	loc        *ast.Location
	skip       bool
	duplicate  bool
}

// Run loads the policy and its tests, runs them on the targets asked for
// and reports each. An error is a policy that does not load, parse or
// compile (for the Wasm too): located errors are [compiler.Errors].
func Run(ctx context.Context, opts Options) (*Report, error) {
	if len(opts.Paths) == 0 {
		return nil, errors.New("policytest: no paths")
	}
	var re *regexp.Regexp
	if opts.Run != "" {
		var err error
		if re, err = regexp.Compile(opts.Run); err != nil {
			return nil, fmt.Errorf("--run: %w", err)
		}
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	version := ast.RegoV1
	if opts.RegoV0 {
		version = ast.RegoV0
	}
	caps := compiler.Capabilities()
	popts := ast.ParserOptions{RegoVersion: version, Capabilities: caps, ProcessAnnotation: true}
	modules, data, err := tester.LoadWithParserOptions(opts.Paths, nil, popts)
	if err != nil {
		return nil, policyload.Located(err)
	}
	tests, err := discover(modules, caps, re)
	if err != nil {
		return nil, err
	}
	var store builtins.Store = noStore{}
	if opts.Store != nil {
		store = opts.Store
	}
	rep := &Report{Results: make([]Result, len(tests))}
	for i, t := range tests {
		rep.Results[i] = Result{Name: t.name, Location: fmt.Sprintf("%s:%d:%d", t.loc.File, t.loc.Row, t.loc.Col)}
	}
	if len(tests) == 0 {
		return rep, nil
	}
	if opts.Targets != Wasm {
		outs, err := runRego(ctx, opts, modules, data, caps, store)
		if err != nil {
			return nil, err
		}
		for i, t := range tests {
			o, ok := outs[t.name]
			if !ok {
				o = &Outcome{Status: NotRun, Reason: "the Go evaluator did not report it"}
			}
			rep.Results[i].Rego = o
		}
	}
	if opts.Targets != Rego {
		outs, err := runWasm(ctx, opts, tests, store)
		if err != nil {
			return nil, err
		}
		for i := range tests {
			rep.Results[i].Wasm = outs[i]
		}
	}
	for i := range rep.Results {
		rep.Results[i].Status = overall(rep.Results[i])
	}
	return rep, nil
}

// overall is a test's status over its targets.
func overall(r Result) Status {
	var ran []*Outcome
	for _, o := range []*Outcome{r.Rego, r.Wasm} {
		if o != nil && o.Status != NotRun {
			ran = append(ran, o)
		}
	}
	if len(ran) == 2 && ran[0].Status != ran[1].Status {
		return Differs
	}
	if len(ran) == 0 {
		return NotRun
	}
	st := ran[0].Status
	for _, o := range ran[1:] {
		if o.Status == Error || (o.Status == Fail && st != Error) {
			st = o.Status
		}
	}
	return st
}

// discover compiles the modules and lists their tests in file and rule
// order, with the store builtins each can reach.
func discover(modules map[string]*ast.Module, caps *ast.Capabilities, re *regexp.Regexp) ([]test, error) {
	c := ast.NewCompiler().
		WithCapabilities(caps).
		WithEnablePrintStatements(true).
		WithUseTypeCheckAnnotations(true)
	if c.Compile(modules); c.Failed() {
		return nil, policyload.Located(c.Errors)
	}
	files := make([]string, 0, len(c.Modules))
	for f := range c.Modules {
		files = append(files, f)
	}
	sort.Strings(files)
	var tests []test
	count := map[string]int{}
	for _, f := range files {
		mod := c.Modules[f]
		for _, rule := range mod.Rules {
			name, ref := testRef(rule.Head)
			if name == "" {
				continue
			}
			full := mod.Package.Path.Extend(ref)
			key := full.String()
			t := test{name: key, loc: rule.Loc(), skip: strings.HasPrefix(name, tester.SkipTestPrefix)}
			if n := count[key]; n > 0 {
				t.name = fmt.Sprintf("%s#%02d", key, n)
			}
			count[key]++
			if re != nil && !re.MatchString(t.name) {
				continue
			}
			t.entrypoint = entrypointOf(full)
			tests = append(tests, t)
		}
	}
	for i := range tests {
		base, _, _ := strings.Cut(tests[i].name, "#")
		tests[i].duplicate = count[base] > 1
	}
	return tests, nil
}

// testRef is the name and ref of a test rule as OPA's runner finds them:
// the ground prefix of the head up to the first element named test_ or
// todo_; name is "" for a rule that is no test.
func testRef(h *ast.Head) (string, ast.Ref) {
	gp := h.Ref().GroundPrefix()
	for i, t := range gp {
		var n string
		switch v := t.Value.(type) {
		case ast.Var:
			n = string(v)
		case ast.String:
			n = string(v)
		}
		if strings.HasPrefix(n, tester.TestPrefix) || strings.HasPrefix(n, tester.SkipTestPrefix) {
			return n, gp[:i+1]
		}
	}
	return "", nil
}

// entrypointOf is the Wasm entrypoint of data.a.b ("a/b"), or "" when an
// element cannot be written as one.
func entrypointOf(ref ast.Ref) string {
	parts := make([]string, 0, len(ref)-1)
	for _, t := range ref[1:] {
		s, ok := t.Value.(ast.String)
		if !ok || s == "" || strings.Contains(string(s), "/") {
			return ""
		}
		parts = append(parts, string(s))
	}
	return strings.Join(parts, "/")
}

// runRego runs the tests with OPA's test runner.
func runRego(ctx context.Context, opts Options, modules map[string]*ast.Module, data storage.Store, caps *ast.Capabilities, store builtins.Store) (map[string]*Outcome, error) {
	c := ast.NewCompiler().
		WithCapabilities(caps).
		WithEnablePrintStatements(true).
		WithUseTypeCheckAnnotations(true)
	txn, err := data.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return nil, fmt.Errorf("policytest: %w", err)
	}
	defer data.Abort(ctx, txn)
	runner := tester.NewRunner().
		SetCompiler(c).
		SetStore(data).
		SetModules(modules).
		AddCustomBuiltins(goBuiltins(store)).
		CapturePrintOutput(true).
		SetTimeout(opts.Timeout).
		Filter(opts.Run)
	ch, err := runner.RunTests(ctx, txn)
	if err != nil {
		return nil, policyload.Located(err)
	}
	outs := map[string]*Outcome{}
	for tr := range ch {
		o := &Outcome{Status: Pass, Output: string(tr.Output), Duration: tr.Duration}
		switch {
		case tr.Skip:
			o.Status = Skip
		case tr.Error != nil:
			o.Status, o.Error = Error, tr.Error.Error()
		case tr.Fail:
			o.Status = Fail
		}
		outs[tr.Package+"."+tr.Name] = o
	}
	return outs, nil
}

// runWasm compiles the tests as entrypoints of one Wasm module and
// evaluates each with nexus' engine.
func runWasm(ctx context.Context, opts Options, tests []test, store builtins.Store) ([]*Outcome, error) {
	outs := make([]*Outcome, len(tests))
	var eps []string
	for i, t := range tests {
		switch {
		case t.skip:
			outs[i] = &Outcome{Status: Skip}
		case t.duplicate:
			outs[i] = &Outcome{Status: NotRun, Reason: "not run on the Wasm: the name is defined more than once, and the Wasm sees the definitions as one rule"}
		case t.entrypoint == "":
			outs[i] = &Outcome{Status: NotRun, Reason: "not run on the Wasm: its name cannot be an entrypoint"}
		case !slices.Contains(eps, t.entrypoint):
			eps = append(eps, t.entrypoint)
		}
	}
	if len(eps) == 0 {
		return outs, nil
	}
	b, err := compiler.Compile(ctx, compiler.Options{Paths: opts.Paths, Entrypoints: eps, RegoV0: opts.RegoV0, EnablePrint: true})
	if err != nil {
		return nil, fmt.Errorf("compiling the tests to Wasm: %w", err)
	}
	pw := &printWriter{}
	eng, err := builtins.NewEngine(ctx, store, engine.Config{MaxInstances: 1, Print: pw})
	if err != nil {
		return nil, err
	}
	defer eng.Close(context.WithoutCancel(ctx))
	if err := eng.Load(ctx, b); err != nil {
		return nil, fmt.Errorf("loading the tests' Wasm: %w", err)
	}
	for i, t := range tests {
		if outs[i] != nil {
			continue
		}
		pw.reset()
		tctx, cancel := context.WithTimeout(ctx, opts.Timeout)
		start := time.Now()
		res, err := eng.Eval(tctx, t.entrypoint, nil, nil)
		d := time.Since(start)
		cancel()
		if opts.AfterWasm != nil {
			res, err = opts.AfterWasm(t.name, res, err)
		}
		o := &Outcome{Duration: d, Output: pw.String()}
		switch {
		case errors.Is(err, engine.ErrUndefined):
			o.Status = Fail
		case err != nil:
			o.Status, o.Error = Error, err.Error()
		case passes(res):
			o.Status = Pass
		default:
			o.Status = Fail
		}
		outs[i] = o
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return outs, nil
}

// passes reads a test's value as OPA's runner does: true passes; an object
// (a test with cases) passes when each case, recursively, is true.
func passes(res []byte) bool {
	var v any
	if json.Unmarshal(res, &v) != nil {
		return false
	}
	var ok func(v any) bool
	ok = func(v any) bool {
		switch x := v.(type) {
		case bool:
			return x
		case map[string]any:
			for _, e := range x {
				if !ok(e) {
					return false
				}
			}
			return true
		}
		return false
	}
	return ok(v)
}

// printWriter collects what one test prints.
type printWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *printWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *printWriter) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Reset()
}

func (w *printWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// errNoStore is the error of a store builtin called without a store.
var errNoStore = errors.New("no relationship store to answer nexus' store builtins")

// noStore answers every store builtin with errNoStore.
type noStore struct{}

var _ builtins.Store = noStore{}

func (noStore) Check(context.Context, datastore.CheckRequest) (datastore.CheckResult, error) {
	return datastore.CheckResult{}, errNoStore
}

func (noStore) AppendRoles(_ context.Context, dst []string, _ api.Subject, _ string) ([]string, error) {
	return dst, errNoStore
}

func (noStore) Read(context.Context, datastore.Filter) ([]api.Tuple, error) {
	return nil, errNoStore
}

func (noStore) LookupResources(context.Context, api.Subject, string, string) ([]string, error) {
	return nil, errNoStore
}

func (noStore) LookupSubjects(context.Context, api.Object, string, string) ([]string, error) {
	return nil, errNoStore
}

// RegoBuiltins are nexus' host builtins over s as options of OPA's own
// evaluator (rego.New), implemented as `nexus test` runs them: what a test
// needs to evaluate a nexus policy with OPA as its oracle.
func RegoBuiltins(s builtins.Store) []func(*rego.Rego) {
	var out []func(*rego.Rego)
	for _, b := range goBuiltins(s) {
		out = append(out, b.Func)
	}
	return out
}
