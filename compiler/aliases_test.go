package compiler

import (
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestAliasHostBuiltins checks which calls the host runs: json.marshal,
// json.unmarshal, json.is_valid, to_number, base64 decoding, the CIDR
// builtins, concat over anything but an array literal, and replace and
// indexof of anything but a constant string that is not empty, in rule bodies, heads, functions and comprehensions; none of a
// builtin a module replaces with `with`.
func TestAliasHostBuiltins(t *testing.T) {
	parse := func(src string) *ast.Module {
		return ast.MustParseModuleWithOpts(src, ast.ParserOptions{RegoVersion: ast.RegoV1})
	}
	mods := aliasHostBuiltins([]*ast.Module{parse(`package a
s contains x if some x in input.xs
j := json.marshal(input)
k := [json.unmarshal(v) | some v in input.vs]
v if json.is_valid(input.raw)
c1 := concat(",", s)
c2 := concat(",", ["a", input.b])
f(x) := concat("-", x)
d := nexus.envoy_decide(json.marshal(input.table), json.marshal([input.a, {"b": 1}]))
`), parse(`package b
t := x if {
	x := json.marshal(input) with time.now_ns as 1
}
u := concat(",", input.list)
r1 := replace(input.p, "/", "|")
r2 := replace(input.p, input.old, "")
r3 := replace(input.p, "", "-")
i1 := indexof(input.p, "/")
i2 := indexof(input.p, input.s)
n := to_number(input.n)
b := base64.decode(input.b)
ip if net.cidr_contains("10.0.0.0/8", input.ip)
re if regex.match("^a+$", input.p)
f2 := format_int(input.n, 16)
`)})
	got := mods[0].String() + "\n" + mods[1].String()
	for _, want := range []string{
		`j := nexus.internal.json_marshal(input)`,
		`v = true if { nexus.internal.json_is_valid(input.raw) }`,
		`nexus.internal.json_unmarshal(v)`,
		`c1 := nexus.internal.concat(",", s)`,
		`c2 := concat(",", ["a", input.b])`,
		`f(x) := nexus.internal.concat("-", x)`,
		`d := nexus.envoy_decide(json.marshal(input.table), json.marshal([input.a, {"b": 1}]))`,
		`nexus.internal.json_marshal(input)) with time.now_ns as 1`,
		`u := nexus.internal.concat(",", input.list)`,
		`r1 := replace(input.p, "/", "|")`,
		`r2 := nexus.internal.replace(input.p, input.old, "")`,
		`r3 := nexus.internal.replace(input.p, "", "-")`,
		`i1 := indexof(input.p, "/")`,
		`i2 := nexus.internal.indexof(input.p, input.s)`,
		`n := nexus.internal.to_number(input.n)`,
		`b := nexus.internal.base64_decode(input.b)`,
		`nexus.internal.cidr_contains("10.0.0.0/8", input.ip)`,
		`nexus.internal.regex_match("^a+$", input.p)`,
		`f2 := nexus.internal.format_int(input.n, 16)`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
	// A module replacing concat keeps every concat native, in every module.
	mods = aliasHostBuiltins([]*ast.Module{parse(`package c
x := concat(",", input.list)
`), parse(`package d
y := z if {
	z := data.c.x with concat as fake
}
fake(_, _) := "faked"
`)})
	if got := mods[0].String(); !strings.Contains(got, `x := concat(",", input.list)`) {
		t.Errorf("concat aliased although a module replaces it:\n%s", got)
	}
	// A module whose own names are json, concat, glob or split keeps its
	// calls.
	for _, src := range []string{
		"package e\nimport data.lib as json\nx := json.marshal(input)\n",
		"package f\nconcat(a, b) := a\nx := concat(1, input.s)\n",
		"package g\nimport data.lib as glob\nx := glob.match(input.s, [], input.t)\n",
		"package h\nsplit(a, b) := [a, b]\nx := split(input.s, \" \")\n",
	} {
		got := aliasHostBuiltins([]*ast.Module{parse(src)})[0].String()
		if strings.Contains(got, "nexus.internal") {
			t.Errorf("a module's own name renamed:\n%s", got)
		}
	}
	if got := aliasHostBuiltins([]*ast.Module{parse("package i\nx := split(input.s, \" \")\n")})[0].String(); !strings.Contains(got, "nexus.internal.split(input.s") {
		t.Errorf("split not run by the host:\n%s", got)
	}
}
