package engine_test

// The differential corpus: every case under testdata/corpus is evaluated by
// OPA's own evaluator (the oracle) and by nexus' Wasm engine, and the two
// results must be the same JSON value.
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
	"sort"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/util"
	"go.yaml.in/yaml/v3"
)

// corpusCase is one differential case as written in the YAML files.
type corpusCase struct {
	Name    string   `yaml:"name"`
	Modules []string `yaml:"modules"`
	// Data and Input are kept as YAML nodes and turned into JSON text by
	// nodeJSON so that numbers keep their exact decimal spelling.
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
				if c.dataJSON, err = nodeJSON(&c.Data); err != nil {
					t.Fatalf("%s: data: %v", where, err)
				}
				if !bytes.HasPrefix(c.dataJSON, []byte("{")) {
					t.Fatalf("%s: data must be an object", where)
				}
			}
			if c.Input.Kind != 0 {
				if c.inputJSON, err = nodeJSON(&c.Input); err != nil {
					t.Fatalf("%s: input: %v", where, err)
				}
			}
			out = append(out, c)
		}
	}
	return out
}

// nodeJSON converts a YAML node to JSON text, keeping the literal text of
// numbers (yaml.v3 would otherwise round big integers through float64).
func nodeJSON(n *yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	if err := writeNodeJSON(&buf, n); err != nil {
		return nil, err
	}
	if !json.Valid(buf.Bytes()) {
		return nil, fmt.Errorf("not valid JSON after conversion: %s", buf.String())
	}
	return buf.Bytes(), nil
}

func writeNodeJSON(buf *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		return writeNodeJSON(buf, n.Content[0])
	case yaml.AliasNode:
		return writeNodeJSON(buf, n.Alias)
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
			if err := writeNodeJSON(buf, v); err != nil {
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
			if err := writeNodeJSON(buf, v); err != nil {
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

// oracleResult is OPA's answer for one case.
type oracleResult struct {
	undefined bool
	err       error
	value     ast.Value
}

func (r oracleResult) String() string {
	switch {
	case r.err != nil:
		return "error: " + r.err.Error()
	case r.undefined:
		return "undefined"
	default:
		return r.value.String()
	}
}

// modulesMap names the modules of a case the same way for OPA and the engine.
func modulesMap(mods []string) map[string]string {
	m := make(map[string]string, len(mods))
	for i, src := range mods {
		m[fmt.Sprintf("mod%d.rego", i)] = src
	}
	return m
}

// evalOracle evaluates a case with OPA's topdown evaluator.
func evalOracle(ctx context.Context, c *corpusCase) oracleResult {
	query := "data." + strings.ReplaceAll(c.Query, "/", ".")
	var captured *ast.Term
	opts := []func(*rego.Rego){
		rego.Query(query),
		rego.GenerateJSON(func(t *ast.Term, _ *rego.EvalContext) (any, error) {
			captured = t
			return nil, nil
		}),
	}
	mods := modulesMap(c.Modules)
	names := make([]string, 0, len(mods))
	for n := range mods {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		opts = append(opts, rego.Module(n, mods[n]))
	}
	if c.dataJSON != nil {
		var data map[string]any
		if err := util.UnmarshalJSON(c.dataJSON, &data); err != nil {
			return oracleResult{err: fmt.Errorf("data: %w", err)}
		}
		opts = append(opts, rego.Store(inmem.NewFromObject(data)))
	}
	if c.inputJSON != nil {
		var input any
		if err := util.UnmarshalJSON(c.inputJSON, &input); err != nil {
			return oracleResult{err: fmt.Errorf("input: %w", err)}
		}
		opts = append(opts, rego.Input(input))
	}
	rs, err := rego.New(opts...).Eval(ctx)
	switch {
	case err != nil:
		return oracleResult{err: err}
	case len(rs) == 0:
		return oracleResult{undefined: true}
	case len(rs) > 1 || len(rs[0].Expressions) != 1 || captured == nil:
		return oracleResult{err: fmt.Errorf("unexpected result set shape: %v", rs)}
	}
	return oracleResult{value: captured.Value}
}

// decodeJSON parses the engine's answer keeping numbers exact.
func decodeJSON(b []byte) (any, error) {
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

// sameValue reports whether got (decoded JSON from the engine) is the JSON
// form of want (OPA's value). Sets, which JSON writes as arrays in no
// particular order, are compared as sets; numbers are compared by their exact
// decimal value, never through float64.
func sameValue(want ast.Value, got any) bool {
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
		return ok && sameNumber(string(w), string(g))
	case *ast.Array:
		g, ok := got.([]any)
		if !ok || len(g) != w.Len() {
			return false
		}
		for i := range g {
			if !sameValue(w.Elem(i).Value, g[i]) {
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
				if !used[i] && sameValue(x.Value, g[i]) {
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
			key, err := objectKey(k.Value)
			if err != nil {
				all = false
				return
			}
			gv, ok := g[key]
			if !ok || !sameValue(v.Value, gv) {
				all = false
			}
		})
		return all
	}
	return false
}

// objectKey is the JSON object key OPA writes for an object key.
func objectKey(k ast.Value) (string, error) {
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

// sameNumber compares two JSON numbers by exact value.
func sameNumber(a, b string) bool {
	if a == b {
		return true
	}
	ra, oka := new(big.Rat).SetString(a)
	rb, okb := new(big.Rat).SetString(b)
	return oka && okb && ra.Cmp(rb) == 0
}

// TestCorpusLoads checks the corpus is well formed and that OPA, the oracle,
// answers every case as the case says it should (a value, undefined, or an
// error). A case that OPA answers unexpectedly tests nothing.
func TestCorpusLoads(t *testing.T) {
	cases := loadCorpus(t)
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			r := evalOracle(ctx, c)
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
