package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
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

// unpairedSurrogate reports whether JSON text holds a \uD800-\uDFFF
// escape that is not half of a surrogate pair. That is valid JSON syntax,
// which Go's decoder and OPA's evaluator turn into U+FFFD, while OPA's
// Wasm parser aborts or reads a different string: a known difference,
// not compared.
func unpairedSurrogate(b []byte) bool {
	hex4 := func(i int) (int, bool) {
		if i+4 > len(b) {
			return 0, false
		}
		v, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
		return int(v), err == nil
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
		}
		i++ // the escaped character
		if b[i] != 'u' {
			continue
		}
		v, ok := hex4(i + 1)
		if !ok {
			continue
		}
		i += 4
		switch {
		case v >= 0xdc00 && v <= 0xdfff:
			return true // a low half first
		case v >= 0xd800 && v <= 0xdbff:
			if i+2 >= len(b) || b[i+1] != '\\' || b[i+2] != 'u' {
				return true
			}
			if w, ok := hex4(i + 3); !ok || w < 0xdc00 || w > 0xdfff {
				return true
			}
			i += 6
		}
	}
	return false
}

var fuzzEntrypoints = []string{"fz/allow", "fz/kind", "fz/keys", "fz/names", "fz/size", "fz/shout", "fz/eq", "fz/has_admin"}

var setValued = map[string]bool{"fz/keys": true}

func sortArray(v any) {
	if a, ok := v.([]any); ok {
		sort.Slice(a, func(i, j int) bool { return fmt.Sprint(a[i]) < fmt.Sprint(a[j]) })
	}
}

// FuzzEvalInput evaluates random input: the engine never crashes, rejects
// invalid JSON, and agrees with OPA's evaluator on valid JSON. EvalTrusted
// gives exactly Eval's answer on valid input, rejects input that is not
// UTF-8, and whatever it makes of UTF-8 that is not JSON, later
// evaluations are unaffected.
func FuzzEvalInput(f *testing.F) {
	for _, s := range []string{
		`{"user":"alice","action":"read"}`,
		`{"user":"bob","action":"write","groups":["eng","ops"]}`,
		`{"items":[{"name":"a"},{"name":1},{}],"a":[1,2],"b":[1,2]}`,
		`[1,2,3]`, `"str"`, `null`, `{"roles":["admin"]}`, `{"a":{"x":1},"b":{"x":1.0}}`,
		`{"user":"\u00e9\ud83d\ude00"}`, `{`, `{"a":1}garbage`,
		`{1,2}`, `set()`, "{\"user\":\"al\xffice\"}", `  `,
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
		unpaired := valid && unpairedSurrogate(input)
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
			trusted, terr := e.EvalTrusted(ctx, ep, input, nil)
			switch {
			case valid || len(input) == 0:
				if !bytes.Equal(trusted, got) || fmt.Sprint(terr) != fmt.Sprint(err) {
					t.Fatalf("%s(%q): EvalTrusted %s, %v; Eval %s, %v", ep, input, trusted, terr, got, err)
				}
			case !utf8.Valid(input):
				if !errors.Is(terr, engine.ErrInvalidInput) {
					t.Fatalf("%s: input %q is not UTF-8: EvalTrusted err = %v, want ErrInvalidInput", ep, input, terr)
				}
			}
			if blank {
				continue // no input: nothing to compare with
			}
			if !valid {
				if !errors.Is(err, engine.ErrInvalidInput) {
					t.Fatalf("%s: invalid input %q: err = %v, want ErrInvalidInput", ep, input, err)
				}
				continue
			}
			if unpaired {
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
		// Nothing the input did stays behind in the instance.
		if out, err := e.Eval(ctx, "fz/allow", []byte(`{"user":"alice","action":"read"}`), nil); err != nil || string(out) != "true" {
			t.Fatalf("after %q: allow = %s, %v; want true", input, out, err)
		}
	})
}

func TestUnpairedSurrogate(t *testing.T) {
	for in, want := range map[string]bool{
		`"\ud83d\ude00"`:    false,
		`"\u00e9 \\ud800"`:  false, // an escaped backslash, then text
		`"\ud800"`:          true,
		`"\udc00\ud800"`:    true,
		`"\ud800\u0000"`:    true,
		`"\uD83D\uDE00 \ud`: false, // truncated escape: not a surrogate
		`"a\ud800b"`:        true,
	} {
		if got := unpairedSurrogate([]byte(in)); got != want {
			t.Errorf("unpairedSurrogate(%s) = %v, want %v", in, got, want)
		}
	}
}
