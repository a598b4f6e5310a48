package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/types"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/engine"
)

// nvPolicy reads its input every way that depends on how the value sits
// in memory: whole (the result serialised), iterated (bucket order),
// looked up by key or element (hash and bucket), counted, compared and
// walked; and hands it through host builtins and back.
const nvPolicy = `package nv

out := input

keys := [k | some k, _ in input] if is_object(input)

vals := [input[k] | some k, _ in input]

elems := [e | some e in input] if is_set(input)

members := [e | some e in input; input[e] == e] if is_set(input)

cnt := count(input)

paths := [p | walk(input, [p, _])]

eq := input == input

echo := nexus.echo(input)

echo_keys := [k | some k, _ in nexus.echo(input)] if is_object(input)

echo_lookup := [x | some k, _ in input; x := nexus.echo(input)[k]] if is_object(input)

parsed := nexus.parse(input) if is_string(input)

parsed_lookup := [x | v := nexus.parse(input); some k, _ in v; x := v[k]] if is_string(input)
`

var nvEntrypoints = []string{"nv/out", "nv/keys", "nv/vals", "nv/elems", "nv/members", "nv/cnt", "nv/paths", "nv/eq", "nv/echo", "nv/echo_keys", "nv/echo_lookup", "nv/parsed", "nv/parsed_lookup"}

// echoBuiltin and parseBuiltin are Generic builtins: the first returns its
// argument (read from memory, written back by the Go writer), the second
// the value its string argument holds in OPA's syntax.
func echoBuiltin(_ context.Context, args []*ast.Term) (*ast.Term, error) { return args[0], nil }

func parseBuiltin(_ context.Context, args []*ast.Term) (*ast.Term, error) {
	s, ok := args[0].Value.(ast.String)
	if !ok {
		return nil, nil
	}
	t, err := ast.ParseTerm(string(s))
	if err != nil || !ast.IsConstant(t.Value) {
		return nil, nil
	}
	return t, nil
}

func nvEngine(t testing.TB) *engine.Engine {
	t.Helper()
	reg := engine.NewRegistry()
	if err := reg.Register("nexus.echo", 1, engine.Generic(echoBuiltin)); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("nexus.parse", 1, engine.Generic(parseBuiltin)); err != nil {
		t.Fatal(err)
	}
	b, err := compiler.Compile(context.Background(), compiler.Options{
		Modules:     map[string]string{"nv.rego": nvPolicy},
		Entrypoints: nvEntrypoints,
		Builtins: []bundle.HostBuiltin{
			{Name: "nexus.echo", Decl: types.NewFunction(types.Args(types.A), types.A)},
			{Name: "nexus.parse", Decl: types.NewFunction(types.Args(types.A), types.A)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return newEngine(t, engine.Config{Builtins: reg, MaxInstances: 1}, b)
}

// writeTerm writes an OPA value through the ValueWriter (ints as Int,
// other numbers as their text).
func writeTerm(w *engine.ValueWriter, v ast.Value) {
	switch x := v.(type) {
	case ast.Null:
		w.Null()
	case ast.Boolean:
		w.Bool(bool(x))
	case ast.Number:
		if i, ok := x.Int64(); ok && !strings.ContainsAny(string(x), ".eE") && string(x) != "-0" {
			w.Int(i)
		} else {
			w.Number(string(x))
		}
	case ast.String:
		w.String(string(x))
	case *ast.Array:
		w.BeginArray()
		for i := 0; i < x.Len(); i++ {
			writeTerm(w, x.Elem(i).Value)
		}
		w.End()
	case ast.Object:
		w.BeginObject()
		x.Foreach(func(k, v *ast.Term) {
			writeTerm(w, k.Value)
			writeTerm(w, v.Value)
		})
		w.End()
	case ast.Set:
		w.BeginSet()
		x.Foreach(func(e *ast.Term) { writeTerm(w, e.Value) })
		w.End()
	default:
		panic(fmt.Sprintf("not a value: %T", v))
	}
}

type evalOut struct {
	out string
	err string
}

func evalAll(t testing.TB, f func(ep string) ([]byte, error)) map[string]evalOut {
	t.Helper()
	res := map[string]evalOut{}
	for _, ep := range nvEntrypoints {
		out, err := f(ep)
		o := evalOut{out: string(out)}
		if err != nil {
			o.err = err.Error()
		}
		res[ep] = o
	}
	return res
}

// compareNative evaluates text (OPA value syntax) read by the runtime's
// parser and written by the Go writer, and wants byte-identical answers.
func compareNative(t *testing.T, e *engine.Engine, text string) {
	t.Helper()
	term, err := ast.ParseTerm(text)
	if err != nil {
		t.Fatalf("%s: %v", text, err)
	}
	ctx := context.Background()
	ref := evalAll(t, func(ep string) ([]byte, error) { return e.EvalRuntimeParse(ctx, ep, []byte(text), nil) })
	got := evalAll(t, func(ep string) ([]byte, error) {
		var in engine.Input
		writeTerm(in.Writer(), term.Value)
		return e.EvalInput(ctx, ep, &in, nil)
	})
	for _, ep := range nvEntrypoints {
		if ref[ep] != got[ep] {
			t.Errorf("%s %s:\n%s", ep, clip(text), firstDiff(got[ep], ref[ep]))
		}
	}
	if ref["nv/out"].err != "" {
		t.Errorf("%s: runtime's parser: %s", text, ref["nv/out"].err)
	}
	// The same value handed through a host builtin (parsed in Go, written
	// natively) answers as the input does.
	str, _ := json.Marshal(text)
	p := evalAll(t, func(ep string) ([]byte, error) { return e.EvalRuntimeParse(ctx, ep, str, nil) })
	if p["nv/parsed"].out != ref["nv/out"].out || p["nv/parsed_lookup"].out != ref["nv/vals"].out {
		t.Errorf("builtin result %s:\nparsed %+v lookup %+v\nwant %+v %+v", text, p["nv/parsed"], p["nv/parsed_lookup"], ref["nv/out"], ref["nv/vals"])
	}
}

var valueKindCases = []struct{ name, text string }{
	{"null", `null`},
	{"booleans", `[true, false]`},
	{"empty string", `""`},
	{"empty array", `[]`},
	{"empty object", `{}`},
	{"empty set", `set()`},
	{"empties nested", `{"a": [], "b": {}, "c": set(), "d": [set(), {}, []]}`},
	{"set of strings", `{"read", "write", "list", "a", "b", "c", "d", "e", "f", "g"}`},
	{"set of numbers", `{1, 2, 3, 1.5, -7, 100000000000000000000, 0.1}`},
	{"set of mixed", `{null, true, false, 0, "0", [0], {"0": 0}, {0}}`},
	{"set of sets", `{{1, 2}, {2, 1, 3}, set(), {"x"}}`},
	{"non-string keys", `{1: "one", 2.5: "two and a half", true: "t", null: "n", [1, "a"]: "arr", {"k": 1}: "obj", {1}: "set"}`},
	{"big numbers", `[123456789012345678901234567890, -9223372036854775808, 9223372036854775807, 18446744073709551616, 9007199254740993]`},
	{"decimal precision", `[0.1, 0.30000000000000004, 3.141592653589793238462643383279, 1e400, 1E-400, 2.50, 1.0, -0.0, 1e3, 2E-2]`},
	{"number keys that compare equal", `{1: "a", 1.0: "b", 10e-1: "c"}`},
	{"unicode", `{"é": "ü", "日本語": "テキスト", "emoji 😀": "🎉", "ascii": "plain"}`},
	{"escapes", `["quote \" backslash \\ slash \/", "\n\r\t\b\f", "\u0000 nul", "\u001f", "\u00e9\u20ac", "\ud83d\ude00"]`},
	{"many keys", manyKeys(200)},
	{"deep nesting", strings.Repeat(`{"a": [`, 100) + `"leaf"` + strings.Repeat(`]}`, 100)},
	{"duplicate keys", `{"a": 1, "b": 2, "a": 3}`},
	{"duplicate set elements", `{1, 2, 1, "x", "x"}`},
	{"string input for the parse builtin", `"{\"a\": {1, 2}, 3: [set()]}"`},
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// firstDiff shows where two answers part.
func firstDiff(got, want evalOut) string {
	if got.err != want.err {
		return fmt.Sprintf("error %q, want %q", got.err, want.err)
	}
	i := 0
	for i < len(got.out) && i < len(want.out) && got.out[i] == want.out[i] {
		i++
	}
	lo := max(0, i-60)
	return fmt.Sprintf("at byte %d:\nwriter:  ...%s\nruntime: ...%s", i, clip(got.out[lo:]), clip(want.out[lo:]))
}

func manyKeys(n int) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `"key%d": {"n": %d, "s": {"v%d"}}`, i, i, i%7)
	}
	b.WriteString("}")
	return b.String()
}

// TestValueWriterKinds writes every kind of value natively and wants the
// answers the runtime's own parser gives for the same value.
func TestValueWriterKinds(t *testing.T) {
	e := nvEngine(t)
	for _, tc := range valueKindCases {
		t.Run(tc.name, func(t *testing.T) { compareNative(t, e, tc.text) })
	}
}

// TestValueWriterJSON: JSON text read in Go (Eval) answers as the
// runtime's parser does, and the writer's JSON method as Eval.
func TestValueWriterJSON(t *testing.T) {
	e := nvEngine(t)
	ctx := context.Background()
	for _, text := range []string{`{"a": [1, 2.50, "x\u00e9\n"], "b": {"c": null, "d": true}}`, `[]`, `"s"`, `1e2`, `{"k": {}}`} {
		ref := evalAll(t, func(ep string) ([]byte, error) { return e.EvalRuntimeParse(ctx, ep, []byte(text), nil) })
		got := evalAll(t, func(ep string) ([]byte, error) { return e.Eval(ctx, ep, []byte(text), nil) })
		viaWriter := evalAll(t, func(ep string) ([]byte, error) {
			var in engine.Input
			in.Writer().JSON([]byte(text))
			return e.EvalInput(ctx, ep, &in, nil)
		})
		if !reflect.DeepEqual(ref, got) || !reflect.DeepEqual(ref, viaWriter) {
			t.Errorf("%s:\nEval      %v\nJSON      %v\nruntime   %v", text, got, viaWriter, ref)
		}
	}
}

// TestValueWriterMisuse: a misused writer fails the evaluation as invalid
// input, and the instance goes on serving.
func TestValueWriterMisuse(t *testing.T) {
	e := nvEngine(t)
	ctx := context.Background()
	for name, write := range map[string]func(w *engine.ValueWriter){
		"two values":   func(w *engine.ValueWriter) { w.Null(); w.Null() },
		"unclosed":     func(w *engine.ValueWriter) { w.BeginArray() },
		"stray End":    func(w *engine.ValueWriter) { w.End() },
		"odd object":   func(w *engine.ValueWriter) { w.BeginObject(); w.String("k"); w.End() },
		"bad number":   func(w *engine.ValueWriter) { w.Number("01") },
		"bad JSON":     func(w *engine.ValueWriter) { w.JSON([]byte(`{"a":}`)) },
		"invalid UTF8": func(w *engine.ValueWriter) { w.JSON([]byte("\"\xff\"")) },
	} {
		var in engine.Input
		write(in.Writer())
		_, err := e.EvalInput(ctx, "nv/cnt", &in, nil)
		var ee *engine.EvalError
		if !errors.As(err, &ee) || ee.Code != engine.CodeInvalidInput || !errors.Is(err, engine.ErrInvalidInput) {
			t.Errorf("%s: %v, want invalid input", name, err)
		}
	}
	// The instance goes on serving, and an Input evaluates again and
	// again, also after being written anew.
	var in engine.Input
	w := in.Writer()
	w.BeginArray()
	w.Int(1)
	w.End()
	for range 3 {
		out, err := e.EvalInput(ctx, "nv/cnt", &in, nil)
		if err != nil || string(out) != "1" {
			t.Fatalf("after misuse: %s %v", out, err)
		}
	}
	w = in.Writer()
	w.BeginArray()
	w.Int(1)
	w.Int(2)
	w.End()
	if out, err := e.EvalInput(ctx, "nv/cnt", &in, nil); err != nil || string(out) != "2" {
		t.Fatalf("written anew: %s %v", out, err)
	}
	// Another policy's heap starts elsewhere: the same Input is moved there.
	data := map[string]any{}
	for i := range 500 {
		data[fmt.Sprint("k", i)] = strings.Repeat("v", i)
	}
	other := newEngine(t, engine.Config{}, compileModules(t, map[string]string{"o.rego": "package o\n\ncnt := count(input)\n"}, data, "o/cnt"))
	for _, ev := range []struct {
		e  *engine.Engine
		ep string
	}{{other, "o/cnt"}, {e, "nv/cnt"}, {other, "o/cnt"}} {
		if out, err := ev.e.EvalInput(ctx, ev.ep, &in, nil); err != nil || string(out) != "2" {
			t.Fatalf("%s, moved: %s %v", ev.ep, out, err)
		}
	}
	if _, err := e.EvalInput(ctx, "nv/out", &engine.Input{}, nil); !errors.Is(err, engine.ErrUndefined) {
		t.Fatalf("no input: %v, want undefined", err)
	}
}

// randValue renders a random value in OPA's syntax, with sets and
// non-string keys.
func randValue(r *rand.Rand, depth int) string {
	k := r.IntN(9)
	if depth > 4 {
		k = r.IntN(4)
	}
	switch k {
	case 0:
		return []string{"null", "true", "false"}[r.IntN(3)]
	case 1:
		return []string{"0", "1", "-1", "42", "1.5", "-0.25", "1e3", "2E-2", "123456789012345678901234567890", "0.1", "1.0", "-0", "9007199254740993", "7"}[r.IntN(14)]
	case 2, 3:
		return randString(r)
	case 4, 5:
		n := r.IntN(12)
		parts := make([]string, n)
		for i := range parts {
			key := randString(r)
			if r.IntN(5) == 0 {
				key = randValue(r, depth+1)
			}
			parts[i] = key + ": " + randValue(r, depth+1)
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case 6:
		n := r.IntN(12)
		if n == 0 {
			return "set()"
		}
		parts := make([]string, n)
		for i := range parts {
			parts[i] = randValue(r, depth+1)
		}
		return "{" + strings.Join(parts, ", ") + "}"
	default:
		n := r.IntN(6)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = randValue(r, depth+1)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
}

func randString(r *rand.Rand) string {
	alphabet := []string{"a", "b", "key", "é", "😀", "\"", "\\", "\n", "\t", "\x01", " ", "日本", "0", "/"}
	var b strings.Builder
	for range r.IntN(6) {
		b.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	q, _ := json.Marshal(b.String())
	return string(q)
}

// TestValueWriterRandom compares random values (sets, non-string keys)
// written natively with the runtime's parser.
func TestValueWriterRandom(t *testing.T) {
	e := nvEngine(t)
	r := rand.New(rand.NewPCG(1, 2))
	n := 300
	if testing.Short() {
		n = 50
	}
	for range n {
		compareNative(t, e, randValue(r, 0))
		if t.Failed() {
			return
		}
	}
}

// FuzzNativeInput: JSON read in Go and written natively answers exactly
// as the same JSON read by the runtime's parser (the way input went
// before), and invalid JSON is rejected as json.Valid rejects it.
func FuzzNativeInput(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1,2,{"b":[true,null]}]`, `"x\u00e9"`, `1.50`, `{"a":{"a":{"a":[]}}}`, `{"k":"v","k":"w"}`, `[1e400]`, `{"\u0000":0}`, ` {} `, `{`, `tru`, `01`} {
		f.Add([]byte(s))
	}
	e := nvEngine(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, in []byte) {
		valid := json.Valid(in) && len(bytes.TrimSpace(in)) > 0
		_, err := e.Eval(ctx, "nv/cnt", in, nil)
		if !valid {
			if len(bytes.TrimSpace(in)) > 0 && !errors.Is(err, engine.ErrInvalidInput) {
				t.Fatalf("%q is not JSON, Eval: %v", in, err)
			}
			return
		}
		if errors.Is(err, engine.ErrInvalidInput) && utf8Valid(in) {
			t.Fatalf("%q is JSON, Eval rejects it", in)
		}
		if !utf8Valid(in) || unpairedSurrogate(in) {
			return // a known difference of the runtime's parser
		}
		ref := evalAll(t, func(ep string) ([]byte, error) { return e.EvalRuntimeParse(ctx, ep, in, nil) })
		got := evalAll(t, func(ep string) ([]byte, error) { return e.Eval(ctx, ep, in, nil) })
		for _, ep := range nvEntrypoints {
			if ref[ep] != got[ep] {
				t.Fatalf("%s %q:\nGo:      %+v\nruntime: %+v", ep, in, got[ep], ref[ep])
			}
		}
	})
}

func utf8Valid(b []byte) bool { return strings.ToValidUTF8(string(b), "\uFFFD") == string(b) }

// TestBuiltinDifferential hands values through a host builtin (arguments
// read from memory, results written natively) and compares with the
// runtime's parser (the JSON round trip builtins took before) and with
// OPA's evaluator running the same builtin.
func TestBuiltinDifferential(t *testing.T) {
	e := nvEngine(t)
	ctx := context.Background()
	pq, err := rego.New(
		rego.Query("data.nv"),
		rego.Module("nv.rego", nvPolicy),
		rego.Function1(&rego.Function{Name: "nexus.echo", Decl: types.NewFunction(types.Args(types.A), types.A)},
			func(_ rego.BuiltinContext, a *ast.Term) (*ast.Term, error) { return echoBuiltin(ctx, []*ast.Term{a}) }),
		rego.Function1(&rego.Function{Name: "nexus.parse", Decl: types.NewFunction(types.Args(types.A), types.A)},
			func(_ rego.BuiltinContext, a *ast.Term) (*ast.Term, error) { return parseBuiltin(ctx, []*ast.Term{a}) }),
	).PrepareForEval(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	cases := []string{}
	for _, tc := range valueKindCases {
		if !strings.Contains(tc.name, "non-string") && !strings.Contains(tc.name, "compare equal") && !strings.Contains(tc.name, "decimal") {
			cases = append(cases, tc.text)
		}
	}
	for range 100 {
		cases = append(cases, randValue(r, 0))
	}
	for _, text := range cases {
		term := ast.MustParseTerm(text)
		if hasNonStringKey(term.Value) {
			continue // OPA's evaluator has no JSON for them
		}
		// native: the builtin's result written by the Go writer
		var in engine.Input
		writeTerm(in.Writer(), term.Value)
		native, err := e.EvalInput(ctx, "nv/echo", &in, nil)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		// round trip: the same value parsed by the runtime from its text
		rt, err := e.EvalRuntimeParse(ctx, "nv/out", []byte(text), nil)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if !bytes.Equal(native, rt) {
			t.Errorf("%s:\nbuiltin: %s\nruntime: %s", text, native, rt)
		}
		rs, err := pq.Eval(ctx, rego.EvalParsedInput(term.Value))
		if err != nil || len(rs) != 1 {
			t.Fatalf("%s: topdown %v %v", text, rs, err)
		}
		want := rs[0].Expressions[0].Value.(map[string]any)["echo"]
		var got any
		dec := json.NewDecoder(bytes.NewReader(native))
		dec.UseNumber()
		if err := dec.Decode(&got); err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(text, ".eE") {
			continue // number formatting differs between the runtime and OPA's evaluator (see the corpus)
		}
		if !reflect.DeepEqual(canon(got), canon(want)) {
			t.Errorf("%s:\nengine: %v\ntopdown: %v", text, canon(got), canon(want))
		}
	}
}

func hasNonStringKey(v ast.Value) bool {
	switch x := v.(type) {
	case *ast.Array:
		for i := 0; i < x.Len(); i++ {
			if hasNonStringKey(x.Elem(i).Value) {
				return true
			}
		}
	case ast.Set:
		for _, e := range x.Slice() {
			if hasNonStringKey(e.Value) {
				return true
			}
		}
	case ast.Object:
		found := false
		x.Foreach(func(k, e *ast.Term) {
			if _, ok := k.Value.(ast.String); !ok || hasNonStringKey(e.Value) {
				found = true
			}
		})
		return found
	}
	return false
}

// canon makes JSON values comparable whatever the order of set
// elements: arrays sorted by their JSON, numbers as text.
func canon(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]string, len(x))
		for i, e := range x {
			b, _ := json.Marshal(canon(e))
			out[i] = string(b)
		}
		sort.Strings(out)
		return out
	case map[string]any:
		m := map[string]any{}
		for k, e := range x {
			m[k] = canon(e)
		}
		return m
	case json.Number:
		return x.String()
	case float64:
		return fmt.Sprint(x)
	}
	return v
}

// TestEvalUnpairedSurrogate: input JSON is read as OPA's evaluator (and
// encoding/json) reads it: an unpaired surrogate escape is U+FFFD, a
// pair is one character.
func TestEvalUnpairedSurrogate(t *testing.T) {
	e := nvEngine(t)
	for in, want := range map[string]string{
		`"a\ud800b"`:          "\"a\uFFFDb\"",
		`"\udc00\ud800"`:      "\"\uFFFD\uFFFD\"",
		`"\ud800\u0041"`:      "\"\uFFFDA\"",
		`"\ud83d\ude00"`:      "\"😀\"",
		`{"\ud800":"\ud800"}`: "{\"\uFFFD\":\"\uFFFD\"}",
	} {
		var s any
		if err := json.Unmarshal([]byte(in), &s); err != nil {
			t.Fatal(err)
		}
		fromGo, _ := json.Marshal(s)
		got, err := e.Eval(context.Background(), "nv/out", []byte(in), nil)
		if err != nil || string(got) != want || !bytes.Equal(got, fromGo) {
			t.Errorf("%s: %s %v, want %s (encoding/json: %s)", in, got, err, want, fromGo)
		}
	}
}
