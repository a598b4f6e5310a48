package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestHoistDifferential drives the compiler's rewrite of input references
// and constants (compiler/hoist.go) with random policies: bodies that mix
// loops over data and input, comparisons, calls that can fail, negation,
// `with`, print, comprehensions, every, else chains, rules that conflict,
// partial sets, functions whose arguments shadow imports, `some input`,
// object.get on parts of input,
// constants inside loops and references with variable keys, over inputs
// where the prefixes they read are missing, of another type, null or
// present. Every (policy, input) answer of the engine must be OPA's
// evaluator's: the same value, both undefined, or both an error.
//
// The run is seeded and so deterministic; NEXUS_HOIST_N sets the number of
// policies (default 200) and NEXUS_HOIST_SEED the seed.
func TestHoistDifferential(t *testing.T) {
	n, seed := 200, uint64(1)
	if s := os.Getenv("NEXUS_HOIST_N"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("NEXUS_HOIST_N: %v", err)
		}
		n = v
	}
	if s := os.Getenv("NEXUS_HOIST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("NEXUS_HOIST_SEED: %v", err)
		}
		seed = v
	}
	if testing.Short() {
		n = min(n, 20)
	}
	ctx := context.Background()
	entrypoints := []string{"test/allow", "test/s", "test/out", "test/w", "test/al"}
	compiled, failures, known, pruned := 0, 0, 0, 0
	for i := range n {
		g := &hoistGen{r: rand.New(rand.NewPCG(seed, uint64(i)))}
		policy := g.module()
		data := g.data()
		// A second module of the package defines r, which conflicts
		// when data.rs has two elements.
		lib := "package test\n\nr := x if {\n\tsome x in data.rs\n}\n"
		base := &corpusCase{Modules: []string{policy, lib}, dataJSON: []byte(data)}
		oracle := newCorpusOracleGroup(ctx, base)
		if oracle.err != nil {
			continue // not a valid policy (unsafe variables and the like)
		}
		compiled++
		e, bun, err := corpusEngineBundle(ctx, base, entrypoints)
		if err != nil {
			failures++
			t.Errorf("policy %d (seed %d): OPA compiles it, the engine does not: %v\n%s\n%s\ndata: %s", i, seed, err, policy, lib, data)
			continue
		}
		for range 6 {
			c := *base
			c.inputJSON = []byte(g.input())
			for _, ep := range entrypoints {
				c.Query = ep
				want := corpusOracle(ctx, oracle, &c)
				got := corpusEval(ctx, e, c.Query, c.inputJSON)
				if want.err == nil && got.err != nil && strings.Contains(got.err.Error(), "var assignment conflict") {
					// OPA's rule indexer and early exit skip bodies the
					// Wasm planner evaluates: a conflict OPA never sees
					// is a known difference, with the rewrite or without.
					known++
					continue
				}
				diff := corpusCompare(want, got)
				if in, ok, err := corpusPruned(bun, ep, c.inputJSON); err != nil {
					t.Fatal(err)
				} else if ok && diff == "" {
					pruned++
					if d := corpusCompare(want, corpusEval(ctx, e, c.Query, in)); d != "" {
						diff = "with the input pruned to " + string(in) + "\n" + d
					}
				}
				if diff != "" {
					failures++
					t.Errorf("policy %d (seed %d), query %s differs:\n%s\ninput: %s\ndata: %s\n%s",
						i, seed, ep, policy, c.inputJSON, data, diff)
				}
			}
			if failures > 10 {
				t.Fatal("too many differences")
			}
		}
		_ = e.Close(ctx)
	}
	t.Logf("%d of %d random policies were valid Rego, each run with 6 inputs; %d answers were conflicts only the engine saw; %d answers were checked again on the input pruned to what the query reads", compiled, n, known, pruned)
	if pruned == 0 && compiled > 20 {
		t.Error("no answer was checked on a pruned input: the generator needs fixing")
	}
	if compiled < n/3 {
		t.Errorf("only %d of %d random policies compiled with OPA: the generator needs fixing", compiled, n)
	}
}

// hoistGen writes random policies, data and inputs. A policy is package
// test with input.a.b imported as h, aliases ha (input.a.b) and hm
// (ha.m), rules allow (several bodies), al (a set of what the aliases
// read), q (a
// complete rule that may conflict), s (a partial set), out (an else
// chain), w (a comprehension) and f (a function whose argument is named h).
type hoistGen struct {
	r      *rand.Rand
	bound  []string // variables bound so far in the body being written
	later  []string // expressions that bind variables used earlier
	n      int      // fresh variable counter
	noWith bool     // writing f, where OPA's Wasm planner rejects `with`, `=` and rules
	refs   bool     // writing allow or w, which may refer to the other rules
}

func (g *hoistGen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }

func (g *hoistGen) module() string {
	var b strings.Builder
	b.WriteString("package test\n\nimport input.a.b as h\nimport input.a\n\n")
	// Rules that only name a part of input, read through by the
	// analysis of what the policy reads.
	b.WriteString("ha := input.a.b\n\nhm := ha.m\n\n")
	b.WriteString("default allow := false\n\n")
	g.refs = true
	for range 1 + g.r.IntN(3) {
		fmt.Fprintf(&b, "allow if {\n%s}\n\n", g.body(2+g.r.IntN(5)))
	}
	// OPA's rule index skips rules whose input is undefined, but not
	// comprehension bodies, which so show the order of errors and
	// undefined readings.
	fmt.Fprintf(&b, "w := [1 |\n%s]\n\n", g.body(2+g.r.IntN(5)))
	// al shows what the aliases read, whole or a field at a time.
	for range 1 + g.r.IntN(3) {
		fmt.Fprintf(&b, "al contains x if {\n\tx := %s\n}\n\n", g.pick("ha", "hm", "ha.c", "hm.k", "count(ha)", "object.keys(hm)",
			"sort([k | some k, _ in ha])", "json.marshal(ha)", "data.test.ha", "data.test.hm.k", `object.get(hm, "k", "none")`, `object.get(input.a.b, "s", "none")`))
	}
	g.refs = false
	fmt.Fprintf(&b, "q := 1 if {\n%s}\n\n", g.body(1+g.r.IntN(3)))
	fmt.Fprintf(&b, "q := 2 if {\n%s}\n\n", g.body(1+g.r.IntN(3)))
	fmt.Fprintf(&b, "s contains %s if {\n%s}\n\n", "v0", g.bodyBinding("v0", 1+g.r.IntN(4)))
	fmt.Fprintf(&b, "out := \"one\" if {\n%s} else := \"two\" if {\n%s} else := \"three\"\n\n",
		g.body(1+g.r.IntN(4)), g.body(1+g.r.IntN(4)))
	g.noWith = true
	fmt.Fprintf(&b, "f(h) := y if {\n\ty := h\n%s}\n", g.body(1+g.r.IntN(3)))
	g.noWith = false
	return b.String()
}

// bodyBinding writes a body that binds v as its last expression.
func (g *hoistGen) bodyBinding(v string, n int) string {
	body := g.body(n)
	return body + "\t" + v + " := " + g.pick("h.c", "input.a.b.d", "h.arr[0]", "1", "a.b.s") + "\n"
}

// body writes n expressions, one a line, each indented by a tab.
func (g *hoistGen) body(n int) string {
	g.bound, g.later = g.bound[:0], g.later[:0]
	var b strings.Builder
	for range n {
		b.WriteString("\t" + g.expr() + "\n")
	}
	for _, e := range g.later {
		b.WriteString("\t" + e + "\n")
	}
	return b.String()
}

func (g *hoistGen) fresh() string {
	g.n++
	return fmt.Sprintf("x%d", g.n)
}

// val is an operand: a constant, a bound variable or a read of input.
func (g *hoistGen) val() string {
	if len(g.bound) > 0 && g.r.IntN(3) == 0 {
		return g.bound[g.r.IntN(len(g.bound))]
	}
	return g.pick("1", "2", `"s"`, "null", "h.c", "h.d", "h.s", "input.a.b.c", "a.b.c",
		"input.a.b.arr[0]", "h.m.k", "data.y", "input.a.b", "input.x", "h.n", "ha.c", "hm.k", "ha", "data.test.ha.s",
		`object.get(h, "c", 0)`, `object.get(hm, "k", null)`, `object.get(input.a, ["b", "m", "k"], 1)`, `object.get(ha, ["arr", 0], 2)`)
}

// in is an operand that reads input.
func (g *hoistGen) in() string {
	return g.pick("h.c", "h.d", "h.s", "input.a.b.c", "a.b.c", "input.a.b.arr[0]", "h.m.k", "input.a.b", "input.x", "h.n", "ha.d", "hm.k", "hm")
}

// ref is a read of input for the calls and loops.
func (g *hoistGen) ref() string {
	return g.pick("h.c", "h.s", "h.arr", "h.m", "input.a.b.arr", "input.a.b.s", "a.b.m", "input.a", "h", "input.a.b.m.k", "ha", "hm", "ha.arr")
}

func (g *hoistGen) expr() string {
	switch g.r.IntN(33) {
	case 0, 1:
		v := g.fresh()
		g.bound = append(g.bound, v)
		return fmt.Sprintf("some %s in %s", v, g.pick("data.xs", "data.xs", "h.arr", "input.a.b.m", "[1, 2, 3]"))
	case 2:
		k, v := g.fresh(), g.fresh()
		g.bound = append(g.bound, k, v)
		return fmt.Sprintf("some %s, %s in %s", k, v, g.pick("h", "input.a.b", "h.m", "a.b.arr", "ha", "hm"))
	case 3, 4, 5:
		return fmt.Sprintf("%s %s %s", g.in(), g.pick("==", "!=", "<", ">=", "=="), g.val())
	case 6:
		return fmt.Sprintf("%s in %s", g.val(), g.pick(`{1, "s", 2}`, "[1, 2]", "h.arr", "data.xs", "input.a.b.m", `{"k": 1}`))
	case 7:
		return "not " + g.pick("h.c == 1", "h.e", "input.a.b.d", "q == 1", `startswith(h.s, "a")`, "h.c in data.xs")
	case 8:
		return fmt.Sprintf("startswith(%s, %s)", g.pick("h.s", "input.a.b.s", "a.b.c"), g.pick(`"a"`, `"1"`, "h.s"))
	case 9:
		x := g.ref()
		if len(g.bound) > 0 && g.r.IntN(3) == 0 {
			x = g.bound[g.r.IntN(len(g.bound))]
		}
		return fmt.Sprintf("count(%s) %s %d", x, g.pick(">", "==", "<"), g.r.IntN(3))
	case 10:
		return fmt.Sprintf(`sprintf("%%v", [%s]) == %s`, g.val(), g.pick(`"1"`, `"s"`, `"null"`))
	case 11:
		obj := g.pick("input.a", "h", "h.m", "input")
		if len(g.bound) > 0 && g.r.IntN(2) == 0 {
			// A variable that may hold a part of input, and may be
			// read some other way too.
			obj = g.bound[g.r.IntN(len(g.bound))]
		}
		return fmt.Sprintf(`object.get(%s, %s, %s) == %s`, obj,
			g.pick(`"b"`, `"c"`, `["b", "c"]`, `"k"`), g.pick("1", "{}", "null"), g.val())
	case 12:
		return fmt.Sprintf("to_number(%s) > %d", g.pick("h.s", "h.c", "input.a.b.d", "a.b.s"), g.r.IntN(3))
	case 13:
		return fmt.Sprintf("count(split(%s, \"/\")) > 1", g.pick("h.s", "input.a.b.c", "h.m"))
	case 14:
		if !g.refs {
			return "true"
		}
		return g.pick("q == 1", "q", "q != 2", "r == 1", "r", "1 in s", `"s" in s`, "out == \"one\"", "f(1) == 1", "f(h.c) == 1", "f(input.a) == h")
	case 15:
		return fmt.Sprintf("print(%s)", g.val())
	case 16:
		v := g.fresh()
		defer func() { g.bound = append(g.bound, v) }()
		return fmt.Sprintf("%s := [z | some z in %s; z != %s]", v, g.pick("data.xs", "h.arr", "input.a.b.arr"), g.val())
	case 17:
		return fmt.Sprintf("every z in %s { z != %s; h.c != 3 }", g.pick("data.xs", "h.arr", "[1, 2]"), g.val())
	case 18:
		if !g.refs {
			return "true"
		}
		return fmt.Sprintf("%s with %s", g.pick("q == 1", "1 in s", "h.c == 1", "out == \"one\"", "f(1) == 1"),
			g.pick(`input as {"a": {"b": {"c": 1, "d": 1}}}`, `input as {"a": {"b": "s"}}`, `input as {"a": {"b": {"c": "s"}}, "x": 1}`, "data.y as 2"))
	case 19:
		v := g.fresh()
		defer func() { g.bound = append(g.bound, v) }()
		return fmt.Sprintf("%s := %s", v, g.val())
	case 20:
		v := g.fresh()
		g.bound = append(g.bound, v)
		return fmt.Sprintf("%s[%s] %s", g.pick("h.arr", "input.a.b.arr", "a.b.m", "h"), v, g.pick("== 1", "!= 2", ""))
	case 21:
		return fmt.Sprintf("%s %s %s", g.pick(`[1, 2, "s"]`, `{"k": 1}`, `{1, 2}`, `["s"]`),
			g.pick("==", "!="), g.pick("h.arr", "h.m", "input.a.b.arr"))
	case 22:
		return fmt.Sprintf(`%s == %s`, g.pick(`{"s": 1, "t": 2}[h.s]`, `["a", "s", 1][h.c]`, `{"s": 1}[input.a.b.c]`, `["a", "s"][h.n]`), g.val())
	case 23:
		return fmt.Sprintf("%s[_] == %s", g.pick(`[1, 2, "s"]`, `{"k": 1}`), g.val())
	case 24:
		v := g.fresh()
		g.bound = append(g.bound, v)
		return fmt.Sprintf("some %s in input", v)
	case 25:
		return fmt.Sprintf("glob.match(%s, [\"/\"], %s)", g.pick(`"a/*"`, "h.s", `"*"`), g.pick("h.s", "input.a.b.c", "h.m.k"))
	case 26:
		return fmt.Sprintf("is_string(%s)", g.val())
	case 27:
		if g.noWith {
			return "true"
		}
		return fmt.Sprintf("%s = %s", g.in(), g.val())
	case 28:
		return fmt.Sprintf("%s.%s %s", g.pick("h", "input.a.b", "a.b", "a"), g.pick("c", "d", "e", "m.k", "b.c"), g.pick("== 1", "", `== "s"`))
	case 31:
		if g.r.IntN(4) == 0 {
			// A constant pattern, which declares nothing.
			return g.pick("some [1, 2] in data.pairs", "some _, [1, 2] in data.pairs")
		}
		return fmt.Sprintf("some %s in data.pairs", g.fresh())
	case 30:
		if g.noWith {
			return "true"
		}
		// A reading that OPA's reordering for safety runs late.
		v := g.fresh()
		g.later = append(g.later, fmt.Sprintf("%s = %s", v, g.pick("data.y", "1", "h.c")))
		return fmt.Sprintf("%s %s %s", g.in(), g.pick("!=", "<", ">"), v)
	case 32:
		// A part of input bound to a variable for object.get, maybe
		// read whole too.
		v, got := g.fresh(), g.fresh()
		defer func() { g.bound = append(g.bound, v, got) }()
		also := g.pick("", "", "; count("+v+") > 1", "; "+v+" == "+g.val(), "; is_object("+v+")")
		return fmt.Sprintf("%s := %s; %s := object.get(%s, %s, %s)%s", v, g.pick("h", "input.a", "ha", "hm", "input.a.b.m"),
			got, v, g.pick(`"c"`, `"k"`, `["m", "k"]`, `"b"`), g.pick("1", "null"), also)
	default:
		return fmt.Sprintf("concat(\"\", [%s, \"x\"]) != \"\"", g.pick("h.s", "a.b.c", "input.a.b.m.k"))
	}
}

func (g *hoistGen) data() string {
	return fmt.Sprintf(`{"xs": %s, "y": %s, "rs": %s, "pairs": [[1, 2], [3, 4]]}`,
		g.pick(`[1, 2, 3]`, `[0, 1, "s"]`, `[]`, `[1]`), g.pick("1", `"s"`), g.pick("[1]", "[1, 2]"))
}

// input is a JSON input: input.a.b missing, null, of another type, or an
// object with some of the fields the policies read.
func (g *hoistGen) input() string {
	switch g.r.IntN(8) {
	case 0:
		return g.pick(`{}`, `[]`, `"s"`, `null`, `{"a": "s"}`, `{"a": [1]}`, `{"a": {}}`)
	case 1:
		return fmt.Sprintf(`{"a": {"b": %s}}`, g.pick(`null`, `"s"`, `[1, 2]`, `1`, `{}`))
	}
	var fields []string
	for _, f := range []struct{ k, v string }{
		{"c", g.pick("1", "2", `"s"`, "null", `"12"`)},
		{"d", g.pick("1", "0", `"x"`)},
		{"e", g.pick("true", "false")},
		{"s", g.pick(`"a/b"`, `"12"`, `"abc"`, "3")},
		{"arr", g.pick(`[1, 2, 3]`, `[]`, `["s"]`, `{"k": 1}`)},
		{"m", g.pick(`{"k": 1}`, `{"k": "a/b"}`, `[1]`, `"s"`)},
		{"n", g.pick("0", "2")},
	} {
		if g.r.IntN(4) != 0 {
			fields = append(fields, fmt.Sprintf("%q: %s", f.k, f.v))
		}
	}
	return fmt.Sprintf(`{"a": {"b": {%s}}, "x": %s}`, strings.Join(fields, ", "), g.pick("1", `"s"`, "[1]"))
}
