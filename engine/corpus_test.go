package engine_test

// The differential corpus: every case under testdata/corpus is evaluated by
// OPA's own evaluator (the oracle) and by nexus' Wasm engine, and the two
// results must be the same JSON value, also on the input pruned to the
// paths the compiler records that the query reads.
//
// Each file holds `cases:`, a list of cases with: name (unique), modules (Rego
// sources, each with its package line), data (optional object), input
// (optional), query (the entrypoint, "test/p" for data.test.p), and optional
// want_error (both must fail), want_undefined (the answer is undefined) and
// allowed_difference (the reason the engine may answer differently). Cases
// that share modules and data (YAML anchors) are compiled once.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/engine"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/util"
	"go.yaml.in/yaml/v3"
)

// corpusCase is one differential case as written in the YAML files.
type corpusCase struct {
	Name    string   `yaml:"name"`
	Modules []string `yaml:"modules"`
	// Data and Input are kept as YAML nodes and turned into JSON text by
	// corpusNodeJSON so that numbers keep their exact decimal spelling.
	Data  yaml.Node `yaml:"data"`
	Input yaml.Node `yaml:"input"`
	// Query is the entrypoint, slash separated: "test/p" is data.test.p.
	Query string `yaml:"query"`
	// WantError: both OPA and the engine must fail (compile or eval).
	WantError bool `yaml:"want_error"`
	// WantUndefined documents that the oracle's answer is undefined; a case
	// whose result is undefined without it is a mistake in the corpus.
	WantUndefined bool `yaml:"want_undefined"`
	// AllowedDifference, when set, is the reason the engine may differ.
	AllowedDifference string `yaml:"allowed_difference"`

	file      string
	dataJSON  []byte // nil: no data
	inputJSON []byte // nil: no input
}

type corpusFile struct {
	Cases []corpusCase `yaml:"cases"`
}

// loadCorpus reads every testdata/corpus/*.yaml file and checks the cases
// are well formed.
func loadCorpus(t testing.TB) []*corpusCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "corpus", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no corpus files under testdata/corpus")
	}
	seen := map[string]string{}
	var out []*corpusCase
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cf corpusFile
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(&cf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for i := range cf.Cases {
			c := &cf.Cases[i]
			c.file = filepath.Base(f)
			where := fmt.Sprintf("%s: case %d (%q)", c.file, i, c.Name)
			switch {
			case c.Name == "":
				t.Fatalf("%s: no name", where)
			case strings.ContainsAny(c.Name, " /"):
				t.Fatalf("%s: name must not contain spaces or slashes", where)
			case len(c.Modules) == 0:
				t.Fatalf("%s: no modules", where)
			case c.Query == "" || strings.HasPrefix(c.Query, "/") || strings.HasPrefix(c.Query, "data"):
				t.Fatalf("%s: query must be an entrypoint such as test/p", where)
			case c.WantError && c.WantUndefined:
				t.Fatalf("%s: want_error and want_undefined together", where)
			}
			if prev, ok := seen[c.Name]; ok {
				t.Fatalf("%s: name already used in %s", where, prev)
			}
			seen[c.Name] = c.file
			if c.Data.Kind != 0 {
				if c.dataJSON, err = corpusNodeJSON(&c.Data); err != nil {
					t.Fatalf("%s: data: %v", where, err)
				}
				if !bytes.HasPrefix(c.dataJSON, []byte("{")) {
					t.Fatalf("%s: data must be an object", where)
				}
			}
			if c.Input.Kind != 0 {
				if c.inputJSON, err = corpusNodeJSON(&c.Input); err != nil {
					t.Fatalf("%s: input: %v", where, err)
				}
			}
			out = append(out, c)
		}
	}
	return out
}

// corpusNodeJSON converts a YAML node to JSON text, keeping the literal text of
// numbers (yaml.v3 would otherwise round big integers through float64).
func corpusNodeJSON(n *yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	if err := writeCorpusNodeJSON(&buf, n); err != nil {
		return nil, err
	}
	if !json.Valid(buf.Bytes()) {
		return nil, fmt.Errorf("not valid JSON after conversion: %s", buf.String())
	}
	return buf.Bytes(), nil
}

func writeCorpusNodeJSON(buf *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		return writeCorpusNodeJSON(buf, n.Content[0])
	case yaml.AliasNode:
		return writeCorpusNodeJSON(buf, n.Alias)
	case yaml.MappingNode:
		buf.WriteByte('{')
		for i := 0; i < len(n.Content); i += 2 {
			if i > 0 {
				buf.WriteByte(',')
			}
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: mapping keys must be scalars", k.Line)
			}
			kb, _ := json.Marshal(k.Value)
			buf.Write(kb)
			buf.WriteByte(':')
			if err := writeCorpusNodeJSON(buf, v); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, v := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCorpusNodeJSON(buf, v); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			buf.WriteString("null")
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return err
			}
			fmt.Fprint(buf, b)
		case "!!int", "!!float":
			if !json.Valid([]byte(n.Value)) {
				return fmt.Errorf("line %d: number %q is not a JSON number", n.Line, n.Value)
			}
			buf.WriteString(n.Value)
		case "!!str":
			sb, _ := json.Marshal(n.Value)
			buf.Write(sb)
		default:
			return fmt.Errorf("line %d: unsupported YAML tag %s", n.Line, n.ShortTag())
		}
	default:
		return fmt.Errorf("line %d: unsupported YAML node kind %d", n.Line, n.Kind)
	}
	return nil
}

// corpusOracleResult is OPA's answer for one case.
type corpusOracleResult struct {
	undefined bool
	err       error
	value     ast.Value
}

func (r corpusOracleResult) String() string {
	switch {
	case r.err != nil:
		return "error: " + r.err.Error()
	case r.undefined:
		return "undefined"
	default:
		return r.value.String()
	}
}

// corpusModules names the modules of a case the same way for OPA and the engine.
func corpusModules(mods []string) map[string]string {
	m := make(map[string]string, len(mods))
	for i, src := range mods {
		m[fmt.Sprintf("mod%d.rego", i)] = src
	}
	return m
}

// corpusOracleGroup is OPA's compiled form of a group's modules and data,
// shared by the group's cases so that the modules are compiled once.
type corpusOracleGroup struct {
	compiler *ast.Compiler
	store    storage.Store
	err      error // the modules or data do not load
}

func newCorpusOracleGroup(ctx context.Context, c *corpusCase) *corpusOracleGroup {
	g := &corpusOracleGroup{store: inmem.New()}
	if c.dataJSON != nil {
		var data map[string]any
		if err := util.UnmarshalJSON(c.dataJSON, &data); err != nil {
			g.err = fmt.Errorf("data: %w", err)
			return g
		}
		g.store = inmem.NewFromObject(data)
	}
	mods := corpusModules(c.Modules)
	names := make([]string, 0, len(mods))
	for n := range mods {
		names = append(names, n)
	}
	sort.Strings(names)
	opts := []func(*rego.Rego){
		rego.Query("true"),
		rego.Store(g.store),
		rego.CompilerHook(func(c *ast.Compiler) { g.compiler = c }),
	}
	for _, n := range names {
		opts = append(opts, rego.Module(n, mods[n]))
	}
	if _, err := rego.New(opts...).PrepareForEval(ctx); err != nil {
		g.err = err
	}
	return g
}

// corpusQuery is the Rego query of an entrypoint: test/p is data.test.p.
func corpusQuery(entrypoint string) string {
	return "data." + strings.ReplaceAll(entrypoint, "/", ".")
}

// corpusOracle evaluates a case with OPA's topdown evaluator.
func corpusOracle(ctx context.Context, g *corpusOracleGroup, c *corpusCase) corpusOracleResult {
	if g.err != nil {
		return corpusOracleResult{err: g.err}
	}
	query := corpusQuery(c.Query)
	var captured *ast.Term
	opts := []func(*rego.Rego){
		rego.Query(query),
		rego.Compiler(g.compiler),
		rego.Store(g.store),
		rego.GenerateJSON(func(t *ast.Term, _ *rego.EvalContext) (any, error) {
			captured = t
			return nil, nil
		}),
	}
	if c.inputJSON != nil {
		var input any
		if err := util.UnmarshalJSON(c.inputJSON, &input); err != nil {
			return corpusOracleResult{err: fmt.Errorf("input: %w", err)}
		}
		opts = append(opts, rego.Input(input))
	}
	rs, err := rego.New(opts...).Eval(ctx)
	switch {
	case err != nil:
		return corpusOracleResult{err: err}
	case len(rs) == 0:
		return corpusOracleResult{undefined: true}
	case len(rs) > 1 || len(rs[0].Expressions) != 1 || captured == nil:
		return corpusOracleResult{err: fmt.Errorf("unexpected result set shape: %v", rs)}
	}
	return corpusOracleResult{value: captured.Value}
}

// corpusDecodeJSON parses the engine's answer keeping numbers exact.
func corpusDecodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

// corpusSameValue reports whether got (decoded JSON from the engine) is the JSON
// form of want (OPA's value). Sets, which JSON writes as arrays in no
// particular order, are compared as sets; numbers are compared by their exact
// decimal value, never through float64.
func corpusSameValue(want ast.Value, got any) bool {
	switch w := want.(type) {
	case ast.Null:
		return got == nil
	case ast.Boolean:
		g, ok := got.(bool)
		return ok && g == bool(w)
	case ast.String:
		g, ok := got.(string)
		return ok && g == string(w)
	case ast.Number:
		g, ok := got.(json.Number)
		return ok && corpusSameNumber(string(w), string(g))
	case *ast.Array:
		g, ok := got.([]any)
		if !ok || len(g) != w.Len() {
			return false
		}
		for i := range g {
			if !corpusSameValue(w.Elem(i).Value, g[i]) {
				return false
			}
		}
		return true
	case ast.Set:
		g, ok := got.([]any)
		if !ok || len(g) != w.Len() {
			return false
		}
		// Set elements are distinct, so a greedy matching is exact.
		used := make([]bool, len(g))
		all := true
		w.Foreach(func(x *ast.Term) {
			for i := range g {
				if !used[i] && corpusSameValue(x.Value, g[i]) {
					used[i] = true
					return
				}
			}
			all = false
		})
		return all
	case ast.Object:
		g, ok := got.(map[string]any)
		if !ok || len(g) != w.Len() {
			return false
		}
		all := true
		w.Foreach(func(k, v *ast.Term) {
			key, err := corpusObjectKey(k.Value)
			if err != nil {
				all = false
				return
			}
			gv, ok := g[key]
			if !ok || !corpusSameValue(v.Value, gv) {
				all = false
			}
		})
		return all
	}
	return false
}

// corpusObjectKey is the JSON object key OPA writes for an object key.
func corpusObjectKey(k ast.Value) (string, error) {
	if s, ok := k.(ast.String); ok {
		return string(s), nil
	}
	x, err := ast.JSONWithOpt(k, ast.JSONOpt{SortSets: true})
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(x)
	return string(b), err
}

// corpusSameNumber compares two JSON numbers by exact value.
func corpusSameNumber(a, b string) bool {
	if a == b {
		return true
	}
	ra, oka := new(big.Rat).SetString(a)
	rb, okb := new(big.Rat).SetString(b)
	return oka && okb && ra.Cmp(rb) == 0
}

// corpusGroup is the cases that share modules and data: compiled once,
// with every entrypoint they query, and loaded into one engine.
type corpusGroup struct {
	cases []*corpusCase
}

func groupCorpus(cases []*corpusCase) []*corpusGroup {
	var groups []*corpusGroup
	index := map[string]*corpusGroup{}
	for _, c := range cases {
		key := strings.Join(c.Modules, "\x00module\x00") + "\x00data\x00" + string(c.dataJSON)
		g, ok := index[key]
		if !ok {
			g = &corpusGroup{}
			index[key] = g
			groups = append(groups, g)
		}
		g.cases = append(g.cases, c)
	}
	return groups
}

// corpusEngineBundle compiles modules and data for the entrypoints and loads
// the bundle into a new engine, which the caller closes, and returns the
// bundle too. Safe to call from any goroutine.
func corpusEngineBundle(ctx context.Context, c *corpusCase, entrypoints []string) (*engine.Engine, *bundle.Bundle, error) {
	b, err := compiler.Compile(ctx, compiler.Options{
		Modules:     corpusModules(c.Modules),
		DataJSON:    c.dataJSON,
		Entrypoints: entrypoints,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("compile: %w", err)
	}
	e, err := engine.New(ctx, engine.Config{MaxInstances: 1})
	if err != nil {
		return nil, nil, fmt.Errorf("engine.New: %w", err)
	}
	if err := e.Load(ctx, b); err != nil {
		_ = e.Close(ctx)
		return nil, nil, fmt.Errorf("load: %w", err)
	}
	return e, b, nil
}

// corpusPruned is input (a JSON object) with only the paths the compiler
// recorded that entrypoint ep of b reads, as nexus writes a request's input
// for that policy: a subtree at the end of a path is kept whole, and a value
// that is not an object on the way is kept whole too. It is written here,
// apart from nexus' pruner, from the manifest's meaning. ok is false when
// the paths are unknown (nothing is pruned) or input is not an object.
func corpusPruned(b *bundle.Bundle, ep string, input []byte) (pruned []byte, ok bool, err error) {
	paths, known := b.Manifest.InputPathsFor(ep, b.Data)
	if !known || !bytes.HasPrefix(bytes.TrimSpace(input), []byte("{")) {
		return nil, false, nil
	}
	d := json.NewDecoder(bytes.NewReader(input))
	d.UseNumber()
	var doc any
	if err := d.Decode(&doc); err != nil {
		return nil, false, err
	}
	var keep func(v any, paths [][]string) any
	keep = func(v any, paths [][]string) any {
		obj, isObj := v.(map[string]any)
		if !isObj {
			return v
		}
		out := map[string]any{}
		under := map[string][][]string{}
		for _, p := range paths {
			if len(p) == 0 {
				return v // read whole
			}
			under[p[0]] = append(under[p[0]], p[1:])
		}
		for k, rest := range under {
			if c, ok := obj[k]; ok {
				out[k] = keep(c, rest)
			}
		}
		return out
	}
	pruned, err = json.Marshal(keep(doc, paths))
	return pruned, true, err
}

// corpusBuilt is a group made ready: OPA's compiled modules and the engine
// with the group's bundle loaded (or why it could not be).
type corpusBuilt struct {
	entrypoints []string
	oracle      *corpusOracleGroup
	engine      *engine.Engine
	bundle      *bundle.Bundle
	err         error
}

// buildCorpus compiles every group for OPA and for the engine, a few at a
// time (compiling and loading dominate the run time, evaluating is quick).
func buildCorpus(ctx context.Context, groups []*corpusGroup) []*corpusBuilt {
	built := make([]*corpusBuilt, len(groups))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, g := range groups {
		var eps []string
		seen := map[string]bool{}
		for _, c := range g.cases {
			if !seen[c.Query] {
				seen[c.Query] = true
				eps = append(eps, c.Query)
			}
		}
		built[i] = &corpusBuilt{entrypoints: eps}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			b := built[i]
			b.oracle = newCorpusOracleGroup(ctx, g.cases[0])
			b.engine, b.bundle, b.err = corpusEngineBundle(ctx, g.cases[0], eps)
		}()
	}
	wg.Wait()
	return built
}

// corpusEngineResult is the engine's answer for one case.
type corpusEngineResult struct {
	undefined bool
	err       error
	value     []byte
}

func (r corpusEngineResult) String() string {
	switch {
	case r.err != nil:
		return "error: " + r.err.Error()
	case r.undefined:
		return "undefined"
	default:
		return string(r.value)
	}
}

// corpusCompare says how the engine's answer differs from the oracle's;
// "" means they agree.
func corpusCompare(want corpusOracleResult, got corpusEngineResult) string {
	switch {
	case want.err != nil && got.err != nil:
		return ""
	case want.err != nil || got.err != nil:
		return fmt.Sprintf("OPA: %v\nengine: %v", want, got)
	case want.undefined != got.undefined:
		return fmt.Sprintf("OPA: %v\nengine: %v", want, got)
	case want.undefined:
		return ""
	}
	v, err := corpusDecodeJSON(got.value)
	if err != nil {
		return fmt.Sprintf("engine returned invalid JSON %q: %v", got.value, err)
	}
	if !corpusSameValue(want.value, v) {
		return fmt.Sprintf("OPA: %v\nengine: %s", want, got.value)
	}
	return ""
}

// corpusEval is the engine's answer to query on input.
func corpusEval(ctx context.Context, e *engine.Engine, query string, input []byte) corpusEngineResult {
	var got corpusEngineResult
	// A case that runs away (OPA's runtime looped in replace of "") fails
	// at the deadline instead of hanging the run.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got.value, got.err = e.Eval(ctx, query, input, nil)
	if errors.Is(got.err, engine.ErrUndefined) {
		got.undefined, got.err = true, nil
	}
	return got
}

// TestCorpus evaluates every case with OPA and with the engine and requires
// the same answer, except for the cases with an allowed_difference, which are
// listed in the log with their reason. Where the engine agrees, it evaluates
// the case again on the input pruned to what the compiler says the
// entrypoint reads, which must answer the same.
func TestCorpus(t *testing.T) {
	ctx := context.Background()
	groups := groupCorpus(loadCorpus(t))
	built := buildCorpus(ctx, groups)
	var allowed []string
	for gi, g := range groups {
		b := built[gi]
		for _, c := range g.cases {
			t.Run(c.Name, func(t *testing.T) {
				want := corpusOracle(ctx, b.oracle, c)
				if c.WantError != (want.err != nil) {
					t.Fatalf("%s: oracle answered %v, the case says want_error=%v", c.file, want, c.WantError)
				}
				e, bun, err := b.engine, b.bundle, b.err
				if err != nil && len(b.entrypoints) > 1 {
					// One entrypoint may be what fails to compile: try this
					// case on its own.
					if e, bun, err = corpusEngineBundle(ctx, c, []string{c.Query}); err == nil {
						defer func() { _ = e.Close(ctx) }()
					}
				}
				var got corpusEngineResult
				if err != nil {
					got.err = err
				} else {
					got = corpusEval(ctx, e, c.Query, c.inputJSON)
				}
				diff := corpusCompare(want, got)
				if diff == "" && err == nil {
					// The input as nexus writes it for this entrypoint, only
					// the paths the compiler says it reads, must not change
					// the answer.
					pruned, ok, perr := corpusPruned(bun, c.Query, c.inputJSON)
					if perr != nil {
						t.Fatalf("pruning the input: %v", perr)
					}
					if ok {
						if d := corpusCompare(want, corpusEval(ctx, e, c.Query, pruned)); d != "" {
							diff = "with the input pruned to " + string(pruned) + "\n" + d
						}
					}
				}
				switch {
				case diff != "" && c.AllowedDifference != "":
					allowed = append(allowed, fmt.Sprintf("%s: %s", c.Name, c.AllowedDifference))
					t.Logf("allowed difference (%s):\n%s", c.AllowedDifference, diff)
				case diff != "":
					t.Errorf("%s: engine differs from OPA\n%s", c.file, diff)
				case c.AllowedDifference != "":
					t.Errorf("%s: allowed_difference %q is stale: the engine agrees with OPA (%v); remove it", c.file, c.AllowedDifference, want)
				}
			})
		}
		if b.engine != nil {
			_ = b.engine.Close(ctx)
		}
	}
	sort.Strings(allowed)
	for _, a := range allowed {
		t.Logf("allowed difference: %s", a)
	}
}

// TestCorpusLoads checks the corpus is well formed and that OPA, the oracle,
// answers every case as the case says it should (a value, undefined, or an
// error). A case that OPA answers unexpectedly tests nothing.
func TestCorpusLoads(t *testing.T) {
	ctx := context.Background()
	for _, g := range groupCorpus(loadCorpus(t)) {
		oracle := newCorpusOracleGroup(ctx, g.cases[0])
		for _, c := range g.cases {
			t.Run(c.Name, func(t *testing.T) {
				r := corpusOracle(ctx, oracle, c)
				switch {
				case c.WantError && r.err == nil:
					t.Errorf("%s: want an error from OPA, got %v", c.file, r)
				case !c.WantError && r.err != nil:
					t.Errorf("%s: OPA failed: %v", c.file, r.err)
				case c.WantUndefined && !r.undefined:
					t.Errorf("%s: want undefined from OPA, got %v", c.file, r)
				case !c.WantUndefined && r.undefined:
					t.Errorf("%s: OPA says undefined; mark the case want_undefined if that is intended", c.file)
				}
				if testing.Verbose() {
					line, _, _ := strings.Cut(r.String(), "\n")
					t.Logf("oracle: %s", line)
				}
			})
		}
	}
}
