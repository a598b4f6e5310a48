package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/engine"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/util"
)

// fuzzPolicyCases name corpus cases whose policies (modules, data and every
// entrypoint their group queries) FuzzDifferential drives with random
// inputs. They avoid the constructs listed as allowed differences (array
// comprehensions over objects, division, json.marshal/unmarshal of strings,
// concat of sets), so any difference is a finding.
var fuzzPolicyCases = []string{
	"generic_strings",    // walks any input through native and host builtins
	"rbac_admin_allowed", // tenants, roles, grants
	"routes_glob_get_allowed",
	"rebac_direct_viewer",
	"abac_envoy_response_allowed",
	"object_get_header_present", // object.get keeps one header of input
}

// fuzzTarget is one entrypoint of a compiled policy, ready in both
// evaluators.
type fuzzTarget struct {
	policy     string
	entrypoint string
	prepared   rego.PreparedEvalQuery
	engine     *engine.Engine
	bundle     *bundle.Bundle // what the engine runs, its manifest's input paths included
}

func buildFuzzTargets(f *testing.F) []fuzzTarget {
	f.Helper()
	ctx := context.Background()
	byName := map[string]*corpusGroup{}
	groups := groupCorpus(loadCorpus(f))
	for _, g := range groups {
		for _, c := range g.cases {
			byName[c.Name] = g
		}
	}
	var picked []*corpusGroup
	for _, name := range fuzzPolicyCases {
		g, ok := byName[name]
		if !ok {
			f.Fatalf("fuzz policy case %q is not in the corpus", name)
		}
		picked = append(picked, g)
	}
	var targets []fuzzTarget
	for i, b := range buildCorpus(ctx, picked) {
		if b.err != nil || b.oracle.err != nil {
			f.Fatalf("%s: engine: %v; OPA: %v", fuzzPolicyCases[i], b.err, b.oracle.err)
		}
		e := b.engine
		f.Cleanup(func() { _ = e.Close(context.Background()) })
		for _, ep := range b.entrypoints {
			pq, err := rego.New(
				rego.Query(corpusQuery(ep)),
				rego.Compiler(b.oracle.compiler),
				rego.Store(b.oracle.store),
			).PrepareForEval(ctx)
			if err != nil {
				f.Fatalf("%s: prepare %s: %v", fuzzPolicyCases[i], ep, err)
			}
			targets = append(targets, fuzzTarget{policy: fuzzPolicyCases[i], entrypoint: ep, prepared: pq, engine: e, bundle: b.bundle})
		}
	}
	return targets
}

// oracle evaluates the target with OPA for an input already decoded.
func (ft *fuzzTarget) oracle(ctx context.Context, input any, hasInput bool) corpusOracleResult {
	var captured *ast.Term
	opts := []rego.EvalOption{rego.EvalGenerateJSON(func(t *ast.Term, _ *rego.EvalContext) (any, error) {
		captured = t
		return nil, nil
	})}
	if hasInput {
		opts = append(opts, rego.EvalInput(input))
	}
	rs, err := ft.prepared.Eval(ctx, opts...)
	switch {
	case err != nil:
		return corpusOracleResult{err: err}
	case len(rs) == 0:
		return corpusOracleResult{undefined: true}
	case captured == nil:
		return corpusOracleResult{err: fmt.Errorf("unexpected result set shape: %v", rs)}
	}
	return corpusOracleResult{value: captured.Value}
}

// hugeExponent matches a JSON number whose exponent has three or more
// significant digits.
var hugeExponent = regexp.MustCompile(`[0-9][eE][+-]?0*[1-9][0-9]{2}`)

// FuzzDifferential feeds random input documents to compiled policies: the
// engine must never panic, must reject input that is not JSON with
// ErrInvalidInput, and must otherwise give OPA's answer, on the whole input
// and on the input pruned to what the entrypoint reads.
//
// JSON text must be UTF-8 (RFC 8259). The engine rejects input with invalid
// UTF-8 as invalid input, where OPA's evaluator replaces the bad bytes with
// U+FFFD and evaluates: a deliberate difference (fail closed), checked here.
func FuzzDifferential(f *testing.F) {
	targets := buildFuzzTargets(f)
	for _, c := range loadCorpus(f) {
		for _, name := range fuzzPolicyCases {
			if c.Name == name && c.inputJSON != nil {
				f.Add(c.inputJSON)
			}
		}
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		// A generous deadline: a runaway evaluation is a finding, not a hang.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		hasInput := len(input) > 0
		valid := json.Valid(input) && utf8.Valid(input)
		if valid && hugeExponent.Match(input) {
			// Numbers beyond float64's range differ in known ways between
			// OPA's two evaluators (corpus cases number_beyond_opa_limit,
			// number_tiny_exponent_compare,
			// number_set_equal_spellings_beyond_float64).
			t.Skip("number beyond float64's range")
		}
		var decoded any
		if hasInput && valid {
			if err := util.UnmarshalJSON(input, &decoded); err != nil {
				t.Skipf("OPA cannot decode input json.Valid accepts: %v", err)
			}
		}
		for i := range targets {
			ft := &targets[i]
			got, err := ft.engine.Eval(ctx, ft.entrypoint, input, nil)
			if hasInput && !valid {
				if !errors.Is(err, engine.ErrInvalidInput) {
					t.Fatalf("%s %s: invalid input %q: got %s, %v; want ErrInvalidInput", ft.policy, ft.entrypoint, input, got, err)
				}
				continue
			}
			res := corpusEngineResult{value: got, err: err}
			if errors.Is(err, engine.ErrUndefined) {
				res = corpusEngineResult{undefined: true}
			}
			want := ft.oracle(ctx, decoded, hasInput)
			if err != nil && strings.Contains(err.Error(), "opa_number_to_bf: invalid number") {
				// A number beyond libmpdec's exponent range aborts OPA's
				// Wasm runtime (corpus case number_tiny_exponent_compare).
				t.Skipf("OPA's Wasm runtime cannot represent a number in the input: %v", err)
			}
			if want.err != nil && strings.Contains(want.err.Error(), "invalid number") {
				// OPA's evaluator refuses numbers beyond a binary exponent
				// of 1e5 (ast.validateNumber); the engine does not. The
				// corpus case number_beyond_opa_limit tracks this.
				t.Skipf("OPA rejects a number in the input: %v", want.err)
			}
			if diff := corpusCompare(want, res); diff != "" {
				t.Fatalf("%s %s: input %s\n%s", ft.policy, ft.entrypoint, input, diff)
			}
			// The same answer on the input pruned to what the entrypoint
			// reads, as the server passes it.
			pruned, ok, err := corpusPruned(ft.bundle, ft.entrypoint, input)
			if err != nil || !ok {
				continue
			}
			if diff := corpusCompare(want, corpusEval(ctx, ft.engine, ft.entrypoint, pruned)); diff != "" {
				t.Fatalf("%s %s: input %s, pruned to %s\n%s", ft.policy, ft.entrypoint, input, pruned, diff)
			}
		}
	})
}
