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
	"github.com/nexuspdp/nexus/internal/policyload"
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
	// Store backs nexus' store builtins on the Wasm. Nil: a call to one
	// is an error.
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

// storeBuiltins are nexus' builtins that read the relationship store,
// which the Go evaluator cannot run: all but nexus.valid_ids.
var storeBuiltins = func() map[string]bool {
	m := map[string]bool{}
	for _, b := range bundle.NexusBuiltins {
		if b.Name != validIDs {
			m[b.Name] = true
		}
	}
	return m
}()

const validIDs = "nexus.valid_ids"

// errGoEvaluator is what a store builtin answers on the Go evaluator.
var errGoEvaluator = errors.New("the Go evaluator has no relationship store")

// goBuiltins gives the Go evaluator nexus' builtins: nexus.valid_ids as
// the engine implements it, and the store builtins as functions that halt
// the evaluation with errGoEvaluator (so that a test may still replace
// them with `with`).
func goBuiltins() []*tester.Builtin {
	var out []*tester.Builtin
	for _, hb := range bundle.NexusBuiltins {
		decl := &rego.Function{Name: hb.Name, Decl: hb.Decl, Description: hb.Description}
		impl := func(rego.BuiltinContext, []*ast.Term) (*ast.Term, error) {
			return nil, rego.NewHaltError(errGoEvaluator)
		}
		if hb.Name == validIDs {
			impl = func(_ rego.BuiltinContext, args []*ast.Term) (*ast.Term, error) {
				for _, a := range args {
					s, ok := a.Value.(ast.String)
					if !ok {
						return nil, fmt.Errorf("want strings, got %s", ast.ValueName(a.Value))
					}
					if s != "" && !api.ValidID(string(s)) {
						return ast.BooleanTerm(false), nil
					}
				}
				return ast.BooleanTerm(true), nil
			}
		}
		out = append(out, &tester.Builtin{
			Decl: &ast.Builtin{Name: hb.Name, Decl: hb.Decl, Description: hb.Description},
			Func: rego.FunctionDyn(decl, impl),
		})
	}
	return out
}

// test is one discovered test rule.
type test struct {
	name       string // data.pkg.test_x (with #NN for a repeated name)
	entrypoint string // pkg/test_x, "" when it cannot be one
	loc        *ast.Location
	skip       bool
	duplicate  bool
	calls      []string // store builtins it can reach
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
	modules, store, err := tester.LoadWithParserOptions(opts.Paths, nil, popts)
	if err != nil {
		return nil, policyload.Located(err)
	}
	tests, err := discover(modules, caps, re)
	if err != nil {
		return nil, err
	}
	rep := &Report{Results: make([]Result, len(tests))}
	for i, t := range tests {
		rep.Results[i] = Result{Name: t.name, Location: fmt.Sprintf("%s:%d:%d", t.loc.File, t.loc.Row, t.loc.Col)}
	}
	if len(tests) == 0 {
		return rep, nil
	}
	if opts.Targets != Wasm {
		outs, err := runRego(ctx, opts, modules, store, caps)
		if err != nil {
			return nil, err
		}
		for i, t := range tests {
			o, ok := outs[t.name]
			switch {
			case !ok:
				o = &Outcome{Status: NotRun, Reason: "the Go evaluator did not report it"}
			case o.Status == Error && len(t.calls) > 0 && strings.Contains(o.Error, errGoEvaluator.Error()):
				o = &Outcome{Status: NotRun, Reason: "not run on the Go evaluator: calls " + strings.Join(t.calls, ", ")}
			}
			rep.Results[i].Rego = o
		}
	}
	if opts.Targets != Rego {
		outs, err := runWasm(ctx, opts, tests)
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
			t.calls = reachable(c, rule)
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

// reachable lists the store builtins the rule calls, itself or through
// the rules and functions it depends on.
func reachable(c *ast.Compiler, rule *ast.Rule) []string {
	seen := map[*ast.Rule]bool{}
	found := map[string]bool{}
	var walk func(r *ast.Rule)
	walk = func(r *ast.Rule) {
		if seen[r] {
			return
		}
		seen[r] = true
		ast.WalkTerms(r, func(t *ast.Term) bool {
			var op ast.Ref
			switch v := t.Value.(type) {
			case ast.Call:
				op, _ = v[0].Value.(ast.Ref)
			}
			if op != nil && storeBuiltins[op.String()] {
				found[op.String()] = true
			}
			return false
		})
		ast.WalkExprs(r, func(e *ast.Expr) bool {
			if e.IsCall() && storeBuiltins[e.Operator().String()] {
				found[e.Operator().String()] = true
			}
			return false
		})
		for dep := range c.Graph.Dependencies(r) {
			if d, ok := dep.(*ast.Rule); ok {
				walk(d)
			}
		}
	}
	walk(rule)
	out := make([]string, 0, len(found))
	for n := range found {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// runRego runs the tests with OPA's test runner.
func runRego(ctx context.Context, opts Options, modules map[string]*ast.Module, store storage.Store, caps *ast.Capabilities) (map[string]*Outcome, error) {
	c := ast.NewCompiler().
		WithCapabilities(caps).
		WithEnablePrintStatements(true).
		WithUseTypeCheckAnnotations(true)
	txn, err := store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return nil, fmt.Errorf("policytest: %w", err)
	}
	defer store.Abort(ctx, txn)
	runner := tester.NewRunner().
		SetCompiler(c).
		SetStore(store).
		SetModules(modules).
		AddCustomBuiltins(goBuiltins()).
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
func runWasm(ctx context.Context, opts Options, tests []test) ([]*Outcome, error) {
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
	var store builtins.Store = noStore{}
	if opts.Store != nil {
		store = opts.Store
	}
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
