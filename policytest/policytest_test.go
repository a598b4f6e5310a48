package policytest_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/policytest"
)

const authzPolicy = `package authz

default allow := false

allow if input.user == data.admins[_]

allow if {
	input.method == "GET"
	nexus.check(input.object, "read", input.user)
}
`

const authzTests = `package authz_test

import data.authz

test_admin if authz.allow with input as {"user": "ann"}

test_stranger_denied if not authz.allow with input as {"user": "zed", "method": "POST"}

test_wrong if authz.allow with input as {"user": "zed", "method": "POST"}

test_bob_reads if authz.allow with input as {"user": "user:bob", "method": "GET", "object": "file:report.pdf"}

test_mocked_check if authz.allow with input as {"user": "u", "method": "GET", "object": "o"} with nexus.check as true

test_error if 1 / 0 == 0

test_roles if nexus.roles("user:alice", "acme") == ["admin"]

test_relations if "user:bob" in nexus.relations("folder:root", "viewer")

test_lookup_resources if "report.pdf" in nexus.lookup_resources("user:bob", "read", "file")

test_lookup_subjects if "bob" in nexus.lookup_subjects("file:report.pdf", "read", "user")

test_store_error if nexus.check("file:report.pdf", "read", "nobody")

test_not_a_string if not nexus.check(input.n, "read", "user:bob") with input as {"n": 1}

test_roles_mocked if nexus.roles("user:x", "t") == ["r"] with nexus.roles as ["r"]

test_valid_ids if {
	nexus.valid_ids("ann", "", "x")
	not nexus.valid_ids("a b", "", "")
}

test_prints if {
	print("hello from", "the test")
	true
}

todo_test_later if false

test_cases[name] := r if {
	some name, c in {"ann": {"user": "ann"}, "bo": {"user": "bo", "method": "POST"}}
	r := authz.allow with input as c
}
`

func TestRun(t *testing.T) {
	dir := fixture.WriteTree(t, map[string]string{
		"authz.rego":      authzPolicy,
		"authz_test.rego": authzTests,
		"data.json":       `{"admins": ["ann"]}`,
	})
	store := fixture.DemoStore(t)
	rep, err := policytest.Run(t.Context(), policytest.Options{Paths: []string{dir}, Store: store})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	type want struct {
		status     policytest.Status
		rego, wasm policytest.Status
		reason     string // in the error on both targets
	}
	wants := map[string]want{
		"data.authz_test.test_admin":            {policytest.Pass, policytest.Pass, policytest.Pass, ""},
		"data.authz_test.test_stranger_denied":  {policytest.Pass, policytest.Pass, policytest.Pass, ""},
		"data.authz_test.test_wrong":            {policytest.Fail, policytest.Fail, policytest.Fail, ""},
		"data.authz_test.test_bob_reads":        {policytest.Pass, policytest.Pass, policytest.Pass, ""},
		"data.authz_test.test_roles":            {policytest.Pass, policytest.Pass, policytest.Pass, ""},
		"data.authz_test.test_relations":        {policytest.Pass, policytest.Pass, policytest.Pass, ""},
		"data.authz_test.test_lookup_resources": {policytest.Pass, policytest.Pass, policytest.Pass, ""},
		"data.authz_test.test_lookup_subjects":  {policytest.Pass, policytest.Pass, policytest.Pass, ""},
		"data.authz_test.test_not_a_string":     {policytest.Pass, policytest.Pass, policytest.Pass, ""},
		"data.authz_test.test_roles_mocked":     {policytest.Pass, policytest.Pass, policytest.Pass, ""},
		"data.authz_test.test_store_error":      {policytest.Error, policytest.Error, policytest.Error, "want subject type:id"},
		"data.authz_test.test_mocked_check":     {policytest.Pass, policytest.Pass, policytest.Pass, ""},
		"data.authz_test.test_error":            {policytest.Fail, policytest.Fail, policytest.Fail, ""},
		"data.authz_test.test_valid_ids":        {policytest.Pass, policytest.Pass, policytest.Pass, ""},
		"data.authz_test.test_prints":           {policytest.Pass, policytest.Pass, policytest.Pass, ""},
		"data.authz_test.todo_test_later":       {policytest.Skip, policytest.Skip, policytest.Skip, ""},
		"data.authz_test.test_cases":            {policytest.Fail, policytest.Fail, policytest.Fail, ""},
	}
	if len(rep.Results) != len(wants) {
		t.Errorf("%d results, want %d: %+v", len(rep.Results), len(wants), rep.Results)
	}
	for _, r := range rep.Results {
		w, ok := wants[r.Name]
		if !ok {
			t.Errorf("unexpected test %s", r.Name)
			continue
		}
		if r.Status != w.status || r.Rego.Status != w.rego || r.Wasm.Status != w.wasm {
			t.Errorf("%s: %s (rego %+v, wasm %+v), want %s (rego %s, wasm %s)", r.Name, r.Status, r.Rego, r.Wasm, w.status, w.rego, w.wasm)
		}
		if w.reason != "" && (!strings.Contains(r.Rego.Error, w.reason) || !strings.Contains(r.Wasm.Error, w.reason)) {
			t.Errorf("%s: errors %q and %q, want both to say %q", r.Name, r.Rego.Error, r.Wasm.Error, w.reason)
		}
		if !strings.HasPrefix(r.Location, filepath.Join(dir, "authz_test.rego")+":") {
			t.Errorf("%s: location %q", r.Name, r.Location)
		}
		if r.Name == "data.authz_test.test_prints" {
			for target, o := range map[string]*policytest.Outcome{"rego": r.Rego, "wasm": r.Wasm} {
				if !strings.Contains(o.Output, "hello from the test") {
					t.Errorf("%s output %q lacks the print", target, o.Output)
				}
			}
		}
	}
}

func TestRunDisagreement(t *testing.T) {
	dir := fixture.WriteTree(t, map[string]string{"p.rego": "package p\n\ntest_one if true\n\ntest_two if true\n"})
	rep, err := policytest.Run(t.Context(), policytest.Options{
		Paths: []string{dir},
		AfterWasm: func(test string, res []byte, err error) ([]byte, error) {
			if test == "data.p.test_two" {
				return []byte("false"), nil
			}
			return res, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Results[0].Status; got != policytest.Pass {
		t.Errorf("test_one: %s", got)
	}
	two := rep.Results[1]
	if two.Status != policytest.Differs {
		t.Fatalf("test_two: %s, want a disagreement", two.Status)
	}
	if want := "the Wasm and the Go evaluator disagree on data.p.test_two: Go evaluator pass, Wasm fail"; two.Disagreement() != want {
		t.Errorf("disagreement %q, want %q", two.Disagreement(), want)
	}
}

func TestRunTargetsAndFilter(t *testing.T) {
	dir := fixture.WriteTree(t, map[string]string{"p.rego": "package p\n\ntest_a if true\n\ntest_b if false\n\ntest_b if true\n"})
	tests := []struct {
		name    string
		opts    policytest.Options
		names   []string
		targets string // r for rego, w for wasm
	}{
		{"rego only", policytest.Options{Targets: policytest.Rego}, []string{"data.p.test_a", "data.p.test_b", "data.p.test_b#01"}, "r"},
		{"wasm only", policytest.Options{Targets: policytest.Wasm}, []string{"data.p.test_a", "data.p.test_b", "data.p.test_b#01"}, "w"},
		{"run filter", policytest.Options{Run: "test_a$"}, []string{"data.p.test_a"}, "rw"},
		{"run filter on a repeated name", policytest.Options{Run: "test_b$", Targets: policytest.Rego}, []string{"data.p.test_b"}, "r"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Paths = []string{dir}
			rep, err := policytest.Run(t.Context(), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, r := range rep.Results {
				names = append(names, r.Name)
				if (r.Rego != nil) != strings.Contains(tt.targets, "r") || (r.Wasm != nil) != strings.Contains(tt.targets, "w") {
					t.Errorf("%s: rego %v, wasm %v; want targets %q", r.Name, r.Rego, r.Wasm, tt.targets)
				}
			}
			if strings.Join(names, " ") != strings.Join(tt.names, " ") {
				t.Errorf("tests %v, want %v", names, tt.names)
			}
		})
	}
	// A repeated name runs per definition on the Go evaluator only.
	rep, err := policytest.Run(t.Context(), policytest.Options{Paths: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	b := rep.Results[1]
	if b.Rego.Status != policytest.Fail || b.Wasm.Status != policytest.NotRun || b.Status != policytest.Fail || !strings.Contains(b.Wasm.Reason, "defined more than once") {
		t.Errorf("repeated test_b: %s, rego %+v, wasm %+v", b.Status, b.Rego, b.Wasm)
	}
}

func TestRunPolicyErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"parse", "package p\n\ntest_x if {\n", "p.rego:4:0: unexpected eof token"},
		{"type", "package p\n\ntest_x if count(1) == 1\n", "p.rego:3:11: count: invalid argument(s)"},
		{"unknown function", "package p\n\ntest_x if nope(1)\n", "p.rego:3:11: undefined function nope"},
		{"bad regex", "", "--run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := policytest.Options{}
			if tt.src == "" {
				tt.src = "package p\n\ntest_x if true\n"
				opts.Run = "("
			}
			opts.Paths = []string{fixture.WriteTree(t, map[string]string{"p.rego": tt.src})}
			_, err := policytest.Run(t.Context(), opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			var errs compiler.Errors
			if tt.name != "bad regex" && !errors.As(err, &errs) {
				t.Errorf("err %T is not compiler.Errors", err)
			}
		})
	}
}
