package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/nexuspdp/nexus/engine"
)

// fuzzPolicy reads input in many ways without arithmetic (number formatting
// differs between OPA's Wasm runtime and its evaluator; the corpus lists
// those differences).
const fuzzPolicy = `package fz

default allow := false

allow if {
	input.user in data.admins
	input.action in {"read", "list"}
}

allow if {
	some g in input.groups
	data.grants[g][input.action]
}

kind := type_name(input)

keys := {k | some k, _ in input} if is_object(input)

names := [n | some x in input.items; n := x.name; is_string(n)]

size := count(input) if is_array(input)

size := count(input) if is_object(input)

size := count(input) if is_string(input)

shout := upper(input.user) if is_string(input.user)

eq := input.a == input.b

has_admin if "admin" in input.roles
`

var fuzzData = map[string]any{
	"admins": []any{"alice", "root"},
	"grants": map[string]any{"eng": map[string]any{"read": true, "write": true}, "ops": map[string]any{"deploy": true}},
}

var fuzzEntrypoints = []string{"fz/allow", "fz/kind", "fz/keys", "fz/names", "fz/size", "fz/shout", "fz/eq", "fz/has_admin"}

var setValued = map[string]bool{"fz/keys": true}

func sortArray(v any) {
	if a, ok := v.([]any); ok {
		sort.Slice(a, func(i, j int) bool { return fmt.Sprint(a[i]) < fmt.Sprint(a[j]) })
	}
}

// FuzzEvalInput evaluates random input: the engine never crashes, rejects
// invalid JSON, and agrees with OPA's evaluator on valid JSON.
func FuzzEvalInput(f *testing.F) {
	for _, s := range []string{
		`{"user":"alice","action":"read"}`,
		`{"user":"bob","action":"write","groups":["eng","ops"]}`,
		`{"items":[{"name":"a"},{"name":1},{}],"a":[1,2],"b":[1,2]}`,
		`[1,2,3]`, `"str"`, `null`, `{"roles":["admin"]}`, `{"a":{"x":1},"b":{"x":1.0}}`,
		`{"user":"\u00e9\ud83d\ude00"}`, `{`, `{"a":1}garbage`,
	} {
		f.Add([]byte(s))
	}
	b := compileModules(f, map[string]string{"fz.rego": fuzzPolicy}, fuzzData, fuzzEntrypoints...)
	e := newEngine(f, engine.Config{MaxInstances: 1}, b)
	ctx := context.Background()
	prepared := map[string]rego.PreparedEvalQuery{}
	for _, ep := range fuzzEntrypoints {
		pq, err := rego.New(
			rego.Query("data."+strings.ReplaceAll(ep, "/", ".")),
			rego.Module("fz.rego", fuzzPolicy),
			rego.Store(inmem.NewFromObject(fuzzData)),
		).PrepareForEval(ctx)
		if err != nil {
			f.Fatal(err)
		}
		prepared[ep] = pq
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		blank := len(bytes.TrimSpace(input)) == 0
		valid := !blank && json.Valid(input) && utf8.Valid(input)
		var in any
		if valid {
			dec := json.NewDecoder(bytes.NewReader(input))
			dec.UseNumber()
			if dec.Decode(&in) != nil {
				t.Skip()
			}
		}
		for _, ep := range fuzzEntrypoints {
			got, err := e.Eval(ctx, ep, input, nil)
			if blank {
				continue // no input: nothing to compare with
			}
			if !valid {
				if !errors.Is(err, engine.ErrInvalidInput) {
					t.Fatalf("%s: invalid input %q: err = %v, want ErrInvalidInput", ep, input, err)
				}
				continue
			}
			var ee *engine.EvalError
			if errors.As(err, &ee) {
				t.Fatalf("%s(%s): %v", ep, input, err)
			}
			rs, oerr := prepared[ep].Eval(ctx, rego.EvalInput(in))
			if oerr != nil {
				t.Fatalf("%s(%s): OPA error %v, engine %s, %v", ep, input, oerr, got, err)
			}
			if len(rs) == 0 {
				if !errors.Is(err, engine.ErrUndefined) {
					t.Fatalf("%s(%s): OPA undefined, engine %s, %v", ep, input, got, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s(%s): OPA %v, engine error %v", ep, input, rs[0].Expressions[0].Value, err)
			}
			var want, have any
			wb, _ := json.Marshal(rs[0].Expressions[0].Value)
			_ = json.Unmarshal(wb, &want)
			if jerr := json.Unmarshal(got, &have); jerr != nil {
				t.Fatalf("%s(%s): engine result %s is not JSON: %v", ep, input, got, jerr)
			}
			if setValued[ep] {
				// OPA's Wasm runtime writes sets in hash order, its
				// evaluator sorted (an allowed difference of the corpus).
				sortArray(want)
				sortArray(have)
			}
			if !reflect.DeepEqual(want, have) {
				t.Fatalf("%s(%s): OPA %s, engine %s", ep, input, wb, got)
			}
		}
	})
}
