package compiler

import (
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestHoistInputRefs pins where the compiler binds a prefix of input to a
// variable and which uses read through it; the differential corpus
// (engine/testdata/corpus/hoisting.yaml) holds the answers to OPA's.
func TestHoistInputRefs(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string // rule bodies after the rewrite, in order
		heads     []string // rule values, when the case checks them
	}{{
		name: "loop over a table",
		src: `package p
import input.attributes.request.http
allow if {
	some route in data.routes
	http.method in route.methods
	glob.match(route.pattern, ["/"], http.path)
}`,
		want: []string{`assign(__nexus_in2__, ["/"]); assign(__nexus_in3__, input.attributes.request.http); assign(__nexus_in0__, __nexus_in3__.method); assign(__nexus_in1__, __nexus_in3__.path); some route in data.routes; internal.member_2(__nexus_in0__, route.methods); glob.match(route.pattern, __nexus_in2__, __nexus_in1__)`},
	}, {
		name: "not before an expression that can fail with an error",
		src: `package p
x := 1
allow if {
	y := x
	some r in data.rs
	input.a.b == r
	input.a.c == y
}`,
		want: []string{`true`, `assign(y, x); assign(__nexus_in0__, input.a.b); assign(__nexus_in1__, input.a.c); some r in data.rs; equal(__nexus_in0__, r); equal(__nexus_in1__, y)`},
	}, {
		name: "a table that a rule defines is not plain",
		src: `package p
rs contains 1
allow if {
	some r in data.p.rs
	input.a.b == r
}`,
		want: []string{`true`, `some r in data.p.rs; equal(input.a.b, r)`},
	}, {
		name: "a key read from input may name a rule",
		src: `package p
rs contains 1
allow if {
	some r in data.rs
	x := data.p[input.k]
	input.a.b == r
}`,
		want: []string{`true`, `some r in data.rs; assign(x, data.p[input.k]); equal(input.a.b, r)`},
	}, {
		name: "an expression OPA moves for safety anchors nothing",
		src: `package p
r := x if some x in data.rs
allow if {
	input.a.b != y
	y = data.one
	r == 1
	input.a.b != 5
}`,
		want: []string{`some x in data.rs`, `neq(input.a.b, y); y = data.one; equal(r, 1); neq(input.a.b, 5)`},
	}, {
		name: "one use outside a loop is left",
		src: `package p
allow if input.a.b.c == 1`,
		want: []string{`equal(input.a.b.c, 1)`},
	}, {
		name: "a call over values anchors it, a call over a call does not",
		src: `package p
a if {
	some r in data.rs
	startswith(input.a.b, r)
}
b if {
	some r in data.rs
	startswith(lower(input.a.b), r)
}`,
		want: []string{`assign(__nexus_in0__, input.a.b); some r in data.rs; startswith(__nexus_in0__, r)`, `some r in data.rs; startswith(lower(input.a.b), r)`},
	}, {
		name: "with, and a use before the first safe reading, keep their references",
		src: `package p
q if input.a.b == 1
allow if {
	some r in data.rs
	startswith(lower(input.a.c), "x")
	input.a.b == r
	q with input as {"a": {"b": r}}
	not input.a.c == r
	input.a.b != 7
}`,
		want: []string{`equal(input.a.b, 1)`, `some r in data.rs; startswith(lower(input.a.c), "x"); assign(__nexus_in0__, input.a.b); equal(__nexus_in0__, r); q with input as {"a": {"b": r}}; not equal(input.a.c, r); neq(__nexus_in0__, 7)`},
	}, {
		name: "negation after the binding reads through it",
		src: `package p
allow if {
	some r in data.rs
	input.a.b == r
	not input.a.c == r
}`,
		want: []string{`assign(__nexus_in1__, input.a); assign(__nexus_in0__, __nexus_in1__.b); some r in data.rs; equal(__nexus_in0__, r); not equal(__nexus_in1__.c, r)`},
	}, {
		name: "a declared import or input is left in that rule",
		src: `package p
import input.req
a if {
	some req in data.reqs
	some r in data.rs
	req.v == r
}
b if {
	some input in data.reqs
	some r in data.rs
	input.v == r
}`,
		want: []string{`some req in data.reqs; some r in data.rs; equal(req.v, r)`, `some input in data.reqs; some r in data.rs; equal(input.v, r)`},
	}, {
		name: "constants a loop reads are built once",
		src: `package p
allow if {
	x := ["a", "b"]
	some r in data.rs
	r.kind in {"GET", "HEAD"}
	r.tags == ["a", "b"]
	r.meta == {"k": [1, {2}]}
	r.tags != [r.kind]
	count([]) == 0
	some [1, 2] in r.pairs
	some k, {"a": 1} in data.by_key
	some [3] in [[3], [4]]
}`,
		want: []string{`assign(__nexus_in0__, {"GET", "HEAD"}); assign(__nexus_in1__, ["a", "b"]); assign(__nexus_in2__, {"k": [1, {2}]}); assign(__nexus_in3__, [[3], [4]]); assign(x, ["a", "b"]); some r in data.rs; internal.member_2(r.kind, __nexus_in0__); equal(r.tags, __nexus_in1__); equal(r.meta, __nexus_in2__); neq(r.tags, [r.kind]); equal(count([]), 0); some [1, 2] in r.pairs; some k, {"a": 1} in data.by_key; some [3] in __nexus_in3__`},
	}, {
		name: "comprehension and every bodies are bodies",
		src: `package p
xs := [r | some r in data.rs; some s in data.ss; input.a.b != s] if true
ok if every r in data.rs { some s in data.ss; input.a.b != s }`,
		want:  []string{`true`, `every r in data.rs { assign(__nexus_in1__, input.a.b); some s in data.ss; neq(__nexus_in1__, s) }`},
		heads: []string{`[r | assign(__nexus_in0__, input.a.b); some r in data.rs; some s in data.ss; neq(__nexus_in0__, s)]`, `true`},
	}}
	// A rule of the same package in another module is a rule too: the
	// loop over it may fail with an error, so the binding stays below it.
	other := ast.MustParseModuleWithOpts("package p\nrs contains 1\n", ast.ParserOptions{RegoVersion: ast.RegoV1})
	m := ast.MustParseModuleWithOpts("package p\nallow if {\n\tsome r in rs\n\tinput.a.b == r\n}", ast.ParserOptions{RegoVersion: ast.RegoV1})
	if got := hoistInputRefs([]*ast.Module{other, m})[1].Rules[0].Body.String(); got != `some r in rs; equal(input.a.b, r)` {
		t.Errorf("a rule of another module read as a variable: %s", got)
	}
	// An import named like a function does not make its calls readings.
	m = ast.MustParseModuleWithOpts("package p\nimport input.f\nallow if {\n\tsome r in data.rs\n\tf(r)\n\tf(r)\n}", ast.ParserOptions{RegoVersion: ast.RegoV1})
	if got := hoistInputRefs([]*ast.Module{m})[0].Rules[0].Body.String(); got != `some r in data.rs; f(r); f(r)` {
		t.Errorf("a call's function read as input: %s", got)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := ast.MustParseModuleWithOpts(c.src, ast.ParserOptions{RegoVersion: ast.RegoV1})
			out := hoistInputRefs([]*ast.Module{m})[0]
			if len(out.Rules) != len(c.want) {
				t.Fatalf("%d rules, want %d", len(out.Rules), len(c.want))
			}
			for i, r := range out.Rules {
				if got := r.Body.String(); got != c.want[i] {
					t.Errorf("rule %d:\n got %s\nwant %s", i, got, c.want[i])
				}
				if c.heads != nil {
					if got := r.Head.Value.String(); got != c.heads[i] {
						t.Errorf("rule %d value:\n got %s\nwant %s", i, got, c.heads[i])
					}
				}
			}
			if strings.Contains(m.String(), hoistPrefix) {
				t.Error("the rewrite changed its input module")
			}
		})
	}
}
