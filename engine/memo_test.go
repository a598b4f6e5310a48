package engine_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/nexuspdp/nexus/engine"
)

// TestBuiltinResultMemo: an instance keeps the results of pure OPA
// builtins by their arguments' content, and what it answers is what OPA's
// evaluator answers, for more distinct calls than the memo holds (it
// starts again empty), with calls that repeat and calls that do not,
// with results of every kind (booleans, strings, numbers, undefined,
// arrays, objects).
func TestBuiltinResultMemo(t *testing.T) {
	const policy = `package m

import rego.v1

result := {
	"glob": glob.match(input.pattern, ["/"], input.path),
	"globs": [p | some p in ["/a/*", "/b/**", "/c/x"]; glob.match(p, ["/"], input.path)],
	"fmt": sprintf("%s-%d", [input.path, input.n]),
	"units": units.parse_bytes(sprintf("%dKi", [input.n])),
	"decoded": io.jwt.decode(input.token),
	"split": regex.split("/", input.path),
	"bad": bad,
}

default bad := "undefined"

bad := glob.match(concat("", ["[", input.pattern]), [], input.path)
`
	check := resultMatchesOPA(t, "m", policy)
	tokens := []string{
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2ln",
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJib2IiLCJuIjoxfQ.c2ln",
	}
	paths := []string{"/a/x", "/b/x/y", "/c/x", "/d"}
	for i := range 700 {
		in := map[string]any{
			"pattern": []string{"/a/*", "/b/**", "*"}[i%3],
			"path":    paths[i%len(paths)],
			"n":       i % 300, // past the memo's 256 entries, and back
			"token":   tokens[i%2],
		}
		if i%5 == 0 {
			in["path"] = fmt.Sprintf("/a/%d", i)
		}
		check(i, in)
	}
}

// TestBuiltinMemoSkipsImpure: results of builtins that do not answer from
// their arguments alone are never kept: the clock moves between
// evaluations of one instance.
func TestBuiltinMemoSkipsImpure(t *testing.T) {
	b := compileModules(t, map[string]string{"t.rego": "package t\n\nnow := time.now_ns()\n"}, nil, "t/now")
	e := newEngine(t, engine.Config{MaxInstances: 1}, b)
	ctx := context.Background()
	first, err := e.Eval(ctx, "t/now", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	second, err := e.Eval(ctx, "t/now", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(first) == string(second) {
		t.Fatalf("time.now_ns answered %s twice: its result was kept", first)
	}
	for name, want := range map[string]bool{
		"glob.match": true, "sprintf": true, "io.jwt.decode": true, "regex.match": true,
		"time.now_ns": false, "rand.intn": false, "http.send": false, "uuid.rfc4122": false,
		"io.jwt.decode_verify": false, "io.jwt.verify_rs256": false, "io.jwt.encode_sign": false,
		"crypto.x509.parse_and_verify_certificates": false, "trace": false, "print": false,
		"no.such.builtin": false,
	} {
		if got := engine.PureBuiltin(name); got != want {
			t.Errorf("pureBuiltin(%s) = %v, want %v", name, got, want)
		}
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// TestBuiltinAnswersWrittenAgain: an answer an instance writes again (a
// kept result, a cached verified token's, the answer for a token out of
// its validity) is what OPA's evaluator answers every time, whichever
// answers came between, as the instance moves from writing it to copying
// what it wrote.
func TestBuiltinAnswersWrittenAgain(t *testing.T) {
	const policy = `package j

import rego.v1

result := {
	"verified": io.jwt.decode_verify(input.token, {"secret": input.secret, "time": input.time}),
	"decoded": io.jwt.decode(input.token),
	"parts": regex.split("[.]", input.token),
}
`
	check := resultMatchesOPA(t, "j", policy)
	secret := fmt.Sprintf("secret-%d", time.Now().UnixNano())
	sign := func(claims, secret string) string {
		enc := base64.RawURLEncoding
		signed := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString([]byte(claims))
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(signed))
		return signed + "." + enc.EncodeToString(m.Sum(nil))
	}
	tokens := []string{
		sign(`{"sub":"alice","nbf":1000,"exp":2000,"roles":["a","b"]}`, secret),
		sign(`{"sub":"bob","exp":3000,"n":1.5}`, secret),
		sign(`{"sub":"alice","nbf":1000,"exp":2000,"roles":["a","b"]}`, "forged"),
	}
	times := []int64{1500e9, 2500e9, 500e9, 1999e9}
	for i := range 240 {
		in := map[string]any{"token": tokens[i%3], "secret": secret, "time": times[(i/3)%4]}
		check(i, in)
	}
}

// resultMatchesOPA compiles policy, whose package is pkg, for the
// entrypoint pkg/result on an engine of one instance, and returns a check
// that evaluation i of it on in answers as OPA's evaluator does.
func resultMatchesOPA(t *testing.T, pkg, policy string) func(i int, in map[string]any) {
	t.Helper()
	b := compileModules(t, map[string]string{pkg + ".rego": policy}, nil, pkg+"/result")
	e := newEngine(t, engine.Config{MaxInstances: 1}, b)
	ctx := context.Background()
	pq, err := rego.New(rego.Query("data."+pkg+".result"), rego.Module(pkg+".rego", policy)).PrepareForEval(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return func(i int, in map[string]any) {
		t.Helper()
		raw, _ := json.Marshal(in)
		got, err := e.Eval(ctx, pkg+"/result", raw, nil)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		rs, err := pq.Eval(ctx, rego.EvalInput(in))
		if err != nil || len(rs) != 1 {
			t.Fatalf("%d: OPA: %v, %v", i, rs, err)
		}
		want, _ := json.Marshal(rs[0].Expressions[0].Value)
		if !jsonEqual(t, got, want) {
			t.Fatalf("%d: input %s\n got %s\nwant %s", i, raw, got, want)
		}
	}
}
