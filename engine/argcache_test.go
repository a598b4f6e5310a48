package engine_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/engine"
)

// TestBuiltinArgumentCache: OPA's builtins get the terms of their
// arguments from the instance's cache when a value of the same content
// was read before; values that read as different terms are never
// confused, within an evaluation and across them (numbers of another
// text, strings and numbers, arrays and sets, empty collections, keys).
func TestBuiltinArgumentCache(t *testing.T) {
	const policy = `package c

import rego.v1

marshalled := [json.marshal(x) | some x in input.xs]

twice := [[json.marshal(x), json.marshal(x)] | some x in input.xs]

sets := [json.marshal({x}) | some x in input.xs]

types := [type_name(x) | some x in input.xs]
`
	b := compileModules(t, map[string]string{"c.rego": policy}, nil, "c/marshalled", "c/twice", "c/sets", "c/types")
	e := newEngine(t, engine.Config{}, b)
	ctx := context.Background()
	xs := `[1, 1.0, 1.5, 100, 1e2, "1", "1.0", [1], ["1"], [1.0], {"a":1}, {"a":"1"}, {"a":[1]}, {"b":1}, [], {}, null, false, true, "", [[]], [{}], {"1":1},
		"ünï", "a\u0000b", 112345678901234567890, 112345678901234567891, -0, 0, [1,2], [2,1], {"a":1,"b":2}, {"b":2,"a":1}, [[1,[2,[3,[4,[5,[6,[7,[8,[9,[10]]]]]]]]]]]]`
	var vals []any
	dec := json.NewDecoder(strings.NewReader(xs))
	dec.UseNumber()
	if err := dec.Decode(&vals); err != nil {
		t.Fatal(err)
	}
	want := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for round := range 3 {
		out, err := e.Eval(ctx, "c/marshalled", []byte(`{"xs":`+xs+`}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		if err := json.Unmarshal(out, &got); err != nil || len(got) != len(vals) {
			t.Fatalf("round %d: %s, %v", round, out, err)
		}
		for i, v := range vals {
			if w := want(v); got[i] != w {
				t.Errorf("round %d: json.marshal(%s) = %s, want %s", round, w, got[i], w)
			}
		}
		out, err = e.Eval(ctx, "c/twice", []byte(`{"xs":`+xs+`}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		var pairs [][2]string
		if err := json.Unmarshal(out, &pairs); err != nil {
			t.Fatal(err)
		}
		for i, p := range pairs {
			if w := want(vals[i]); p[0] != w || p[1] != w {
				t.Errorf("round %d: twice %s = %v", round, w, p)
			}
		}
		for _, ep := range []string{"c/sets", "c/types"} {
			out, err := e.Eval(ctx, ep, []byte(`{"xs":`+xs+`}`), nil)
			if err != nil {
				t.Fatal(err)
			}
			first, _ := e.Eval(ctx, ep, []byte(`{"xs":`+xs+`}`), nil)
			if string(out) != string(first) {
				t.Errorf("round %d: %s = %s, then %s", round, ep, out, first)
			}
		}
	}
	out, err := e.Eval(ctx, "c/types", []byte(`{"xs":`+xs+`}`), nil)
	if want := `["number","number","number","number","number","string","string","array","array","array","object","object","object","object","array","object","null","boolean","boolean","string","array","array","object","string","string","number","number","number","number","array","array","object","object","array"]`; err != nil || string(out) != want {
		t.Errorf("types = %s, %v\nwant %s", out, err, want)
	}
	// Many distinct values: the cache starts again when full.
	for i := range 600 {
		in := []byte(`{"xs":["v` + string(rune('a'+i%26)) + `", ` + jsonInt(i) + `]}`)
		out, err := e.Eval(ctx, "c/marshalled", in, nil)
		if w := `["\"v` + string(rune('a'+i%26)) + `\"","` + jsonInt(i) + `"]`; err != nil || string(out) != w {
			t.Fatalf("%s = %s, %v; want %s", in, out, err, w)
		}
	}
}

func jsonInt(i int) string { b, _ := json.Marshal(i); return string(b) }
