package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/internal/cli"
	"github.com/nexuspdp/nexus/internal/fixture"
)

const testedPolicy = `package authz

default allow := false

allow if input.user == data.admins[_]

allow if {
	input.method == "GET"
	nexus.check(input.object, "read", input.user)
}
`

func TestTestCommand(t *testing.T) {
	good := fixture.WriteTree(t, map[string]string{
		"authz.rego": testedPolicy,
		"data.json":  `{"admins": ["ann"]}`,
		"authz_test.rego": `package authz_test

import data.authz

test_admin if authz.allow with input as {"user": "ann"}

test_post_denied if not authz.allow with input as {"user": "bo", "method": "POST"}

test_check_mocked if authz.allow with input as {"user": "u", "method": "GET", "object": "o"} with nexus.check as true

test_store if not authz.allow with input as {"user": "user:carol", "method": "GET", "object": "file:report.pdf"}
`,
	})
	failing := fixture.WriteTree(t, map[string]string{
		"p.rego": `package p

test_ok if true

test_wrong if {
	print("looking at", 1 + 1)
	1 + 1 == 3
}
`,
	})
	skipped := fixture.WriteTree(t, map[string]string{"p.rego": "package p\n\ntest_ok if true\n\ntodo_test_later if false\n"})
	badParse := fixture.WriteTree(t, map[string]string{"p.rego": "package p\n\ntest_x if {\n\tinput.a ==\n}\n"})
	badType := fixture.WriteTree(t, map[string]string{"p.rego": "package p\n\ntest_x if nexus.check(\"a\", \"b\")\n"})
	demo := t.TempDir()
	if _, err := runNexus(t, "", "rel", "schema", "write", "../../defaults/drive/schema.yaml", "--data-dir="+demo); err != nil {
		t.Fatal(err)
	}
	if _, err := runNexus(t, "", "rel", "import", "../../defaults/drive/tuples.txt", "--data-dir="+demo); err != nil {
		t.Fatal(err)
	}
	storeTest := fixture.WriteTree(t, map[string]string{
		"authz.rego": testedPolicy,
		"t_test.rego": `package t_test

import data.authz

test_bob_reads if authz.allow with input as {"user": "user:bob", "method": "GET", "object": "file:report.pdf"}
`,
	})

	tests := []struct {
		name     string
		args     []string
		code     int      // exit status
		want     []string // substrings of the output
		wantNot  []string
		jsonPass int // with --format json: the number of passing tests
	}{
		{name: "passing tests", args: []string{"--data-dir", demo, good}, want: []string{"PASS: 4/4"}, wantNot: []string{"data.authz_test"}},
		{name: "verbose shows every test and target", args: []string{"-v", "--data-dir", demo, good}, want: []string{
			"data.authz_test.test_admin: PASS", "rego: PASS", "wasm: PASS",
			"data.authz_test.test_check_mocked: PASS",
			"data.authz_test.test_store: PASS",
		}, wantNot: []string{"not run"}},
		{name: "run filter", args: []string{"-v", "--run", "post", good}, want: []string{"test_post_denied: PASS", "PASS: 1/1"}, wantNot: []string{"test_admin"}},
		{name: "rego target", args: []string{"-v", "-t", "rego", "--data-dir", demo, good}, want: []string{"rego: PASS", "PASS: 4/4"}, wantNot: []string{"  wasm: "}},
		{name: "wasm target", args: []string{"-v", "--target", "wasm", "--data-dir", demo, good}, want: []string{"wasm: PASS", "PASS: 4/4"}, wantNot: []string{"  rego: "}},
		{name: "json", args: []string{"--format", "json", "--data-dir", demo, good}, jsonPass: 4},
		{name: "a failing test", args: []string{failing}, code: 2, want: []string{"data.p.test_wrong: FAIL", "rego printed:", "looking at 2", "FAIL: 1/2", "1 of 2 tests did not pass"}, wantNot: []string{"test_ok"}},
		{name: "skipped fails like opa test", args: []string{skipped}, code: 2, want: []string{"data.p.todo_test_later: SKIPPED"}},
		{name: "skipped with -z", args: []string{"-z", skipped}, want: []string{"SKIPPED: 1/2"}},
		{name: "store builtins read --data-dir", args: []string{"-v", "--data-dir", demo, storeTest}, want: []string{"test_bob_reads: PASS", "rego: PASS", "wasm: PASS"}},
		{name: "store builtins on an empty store", args: []string{storeTest}, code: 2, want: []string{"test_bob_reads: ERROR", "rego: error: ", "wasm: error: ", "no schema"}},
		{name: "missing data dir", args: []string{"--data-dir", demo + "/nope", storeTest}, code: 1, want: []string{"no relationship store in " + demo + "/nope"}},
		{name: "parse error", args: []string{badParse}, code: 1, want: []string{"p.rego:5:1: unexpected } token"}},
		{name: "type error on a nexus builtin", args: []string{badType}, code: 1, want: []string{"p.rego:3:11: nexus.check: arity mismatch"}},
		{name: "missing path", args: []string{good + "/nope"}, code: 1, want: []string{"no such file"}},
		{name: "bad target", args: []string{"--target", "js", good}, code: 2, want: []string{`target "js": want rego, wasm or both`}},
		{name: "bad run regex", args: []string{"--run", "(", good}, code: 1, want: []string{"--run: error parsing regexp"}},
		{name: "no path", args: nil, code: 2, want: []string{"requires at least 1 arg"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runNexus(t, "", append([]string{"test"}, tt.args...)...)
			code := 0
			if err != nil {
				code = cli.ExitCode(err)
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d; output:\n%s", code, tt.code, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
			if tt.jsonPass > 0 {
				var doc struct {
					Results []struct {
						Name   string `json:"name"`
						Result string `json:"result"`
						Rego   *struct {
							Result string `json:"result"`
						} `json:"rego"`
						Wasm *struct {
							Result string `json:"result"`
						} `json:"wasm"`
					} `json:"results"`
					Summary map[string]int `json:"summary"`
				}
				if err := json.Unmarshal([]byte(out), &doc); err != nil {
					t.Fatalf("json output: %v\n%s", err, out)
				}
				if doc.Summary["pass"] != tt.jsonPass || len(doc.Results) != 4 || doc.Results[0].Wasm == nil || doc.Results[0].Wasm.Result != "pass" {
					t.Errorf("json document %+v", doc)
				}
			}
		})
	}
}

// A test on which the targets disagree fails loudly, naming the test.
func TestTestCommandDisagreement(t *testing.T) {
	dir := fixture.WriteTree(t, map[string]string{"p.rego": "package p\n\ntest_one if true\n\ntest_two if 1 < 2\n"})
	afterWasmHook = func(test string, res []byte, err error) ([]byte, error) {
		if test == "data.p.test_two" {
			return []byte("false"), nil
		}
		return res, err
	}
	t.Cleanup(func() { afterWasmHook = nil })
	for _, format := range []string{"pretty", "json"} {
		t.Run(format, func(t *testing.T) {
			out, err := runNexus(t, "", "test", "--format", format, dir)
			if err == nil || cli.ExitCode(err) != exitTestsFailed {
				t.Fatalf("err = %v, want exit %d; output:\n%s", err, exitTestsFailed, out)
			}
			want := "the Wasm and the Go evaluator disagree on data.p.test_two: Go evaluator pass, Wasm fail"
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
			if format == "pretty" {
				for _, w := range []string{"data.p.test_two: DISAGREE: " + want, "rego: PASS", "wasm: FAIL", "DISAGREE: 1/2"} {
					if !strings.Contains(out, w) {
						t.Errorf("output lacks %q:\n%s", w, out)
					}
				}
			} else if !strings.Contains(out, `"name":"data.p.test_two","location":`) || !strings.Contains(out, `"result":"disagree"`) {
				t.Errorf("json output:\n%s", out)
			}
		})
	}
}

// A real difference, with no hook: the Go evaluator stops at the first
// body of allow that holds, while the Wasm evaluates every body, and a
// store builtin that fails aborts the Wasm evaluation (nexus fails
// closed).
func TestTestCommandRealDisagreement(t *testing.T) {
	dir := fixture.WriteTree(t, map[string]string{
		"p.rego":      "package p\n\nallow if input.user == \"ann\"\n\nallow if nexus.check(\"file:x\", \"read\", input.user)\n",
		"p_test.rego": "package p_test\n\nimport data.p\n\ntest_ann if p.allow with input as {\"user\": \"ann\"}\n",
	})
	out, err := runNexus(t, "", "test", dir)
	if err == nil || cli.ExitCode(err) != exitTestsFailed || !strings.Contains(out, "disagree on data.p_test.test_ann: Go evaluator pass, Wasm error") {
		t.Fatalf("err = %v; output:\n%s", err, out)
	}
}
