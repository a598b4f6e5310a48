package builtins_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/datastore/builtins"
	"github.com/nexuspdp/nexus/engine"
)

// testTable is the default policy's route rules and condition, as the
// server writes them.
func testTable(t testing.TB) string {
	t.Helper()
	b, err := builtins.AppendTable(nil, builtins.Table{
		Routes: []builtins.RouteRule{
			{Method: "GET", Action: "read", Type: "file", Segments: []string{"tenants", "{tenant}", "files", "{id}"}},
			{Method: "GET", Action: "read", Type: "file", Segments: []string{"files", "{id}"}},
			{Method: "*", Action: "delete", Type: "file", Segments: []string{"files", "{id}"}},
		},
		Conditions: []builtins.Condition{{Type: "file", Actions: []string{"delete"}, Attribute: "locked", Value: nil, Reason: "locked"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestEnvoyDecideBadArguments: a table or a request that is not what the
// builtin reads is an error (the evaluation fails closed), never a
// decision and never a panic.
func TestEnvoyDecideBadArguments(t *testing.T) {
	s := openDrive(t)
	ctx := context.Background()
	table := testTable(t)
	for _, tc := range []struct{ table, request string }{
		{"", `["GET",["files","x"],null,"alice",""]`},
		{"[1,2]", `["GET",["files","x"],null,"alice",""]`},
		{table, ``},
		{table, `{}`},
		{table, `["GET"]`},
		{table, `["GET",["files","x"],null,"alice"]`},
		{table, `["GET",["files","x"],null,"alice","",5]`},
		{table, `["GET",["files",5],null,"alice",""]`},
		{table, `[1,["files","x"],null,"alice",""]`},
		{table, `["GET",["files","x"],null,"alice",7]`},
		{table, `["GET",["files","x"],{"p":{"sub":"alice"},null,"alice",""]`},
		{table, `["GET",["files","x"],{bad},null,""]`},
		{table, `["GET",["files","x],null,"alice",""]`},
		{table, `["GET",["files","x"],null,"alice",""]trailing`},
	} {
		out, err := builtins.EnvoyDecide(ctx, s, nil, tc.table, tc.request)
		if err == nil {
			t.Errorf("table %.20q request %q: %s, want an error", tc.table, tc.request, out)
		}
	}
}

// FuzzEnvoyDecide: whatever the request, the builtin answers an error or
// a result object, and allows only a subject that is a valid ID, on a
// route rule's action, as the store would.
func FuzzEnvoyDecide(f *testing.F) {
	s := openDrive(f)
	table := testTable(f)
	for _, seed := range []string{
		`["GET",["files","report.pdf"],null,"bob",""]`,
		`["GET",["tenants","acme","files","report.pdf"],null,"alice",""]`,
		`["DELETE",["files","report.pdf"],null,"alice","acme"]`,
		`["GET",["files","report.pdf"],{"p":{"sub":"bob"}},"carol",""]`,
		`["GET",["files","report.pdf"],[{"sub":"bob"},{"sub":"bob"}],null,""]`,
		`["GET",["files","r\u00e9port.pdf"],false,"b\"ob",""]`,
		`["GET",["files",".."],null,"bob",""]`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, request string) {
		out, err := builtins.EnvoyDecide(context.Background(), s, nil, table, request)
		if err != nil {
			return
		}
		var res struct {
			Allowed bool              `json:"allowed"`
			Reason  string            `json:"reason"`
			Subject string            `json:"subject"`
			Headers map[string]string `json:"headers"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("%q: the result %s is not an object: %v", request, out, err)
		}
		if !res.Allowed {
			return
		}
		if !api.ValidID(res.Subject) || res.Headers["x-nexus-subject"] != res.Subject || (res.Reason != "rbac" && res.Reason != "rebac") {
			t.Fatalf("%q: allowed %s", request, out)
		}
		if !strings.Contains(request, res.Subject) {
			t.Fatalf("%q: allowed a subject the request does not name: %s", request, out)
		}
	})
}

// envoyValuesPolicy calls nexus.envoy_decide with the request as the
// array itself and as its JSON text; with seg set, the request's path
// segment, subject header and tenant header are the bytes base64 decodes
// (which need not be UTF-8).
const envoyValuesPolicy = `package p

import rego.v1

req := input.request if not input.seg

req := ["GET", ["files", base64.decode(input.seg)], null, base64.decode(input.sub), base64.decode(input.tenant)] if input.seg

values := nexus.envoy_decide(input.table, req)

text := nexus.envoy_decide(input.table, json.marshal(req))
`

// TestEnvoyDecideValuesMatchText: the builtin reads the request array in
// place exactly as it reads the array's JSON text: the same result or
// both an error, for every shape of request (odd subjects and JWTs,
// strings that are not UTF-8, arrays that are not requests).
func TestEnvoyDecideValuesMatchText(t *testing.T) {
	ctx := context.Background()
	s := openDrive(t)
	b, err := compiler.Compile(ctx, compiler.Options{Modules: map[string]string{"p.rego": envoyValuesPolicy}, Entrypoints: []string{"p/values", "p/text"}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := builtins.NewEngine(ctx, s, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(ctx) })
	if err := e.Load(ctx, b); err != nil {
		t.Fatal(err)
	}
	table := testTable(t)
	var inputs []string
	for _, req := range []string{
		`["GET",["files","report.pdf"],null,"bob",""]`,
		`["GET",["tenants","acme","files","report.pdf"],null,"alice",""]`,
		`["DELETE",["files","report.pdf"],null,"alice","acme"]`,
		`["GET",["files","report.pdf"],{"p":{"sub":"bob"}},"carol",""]`,
		`["GET",["files","report.pdf"],{"p":{"sub":"bob"},"q":{"sub":"bob"}},null,""]`,
		`["GET",["files","report.pdf"],{"p":{"sub":"bob"},"q":{"sub":"alice"}},null,""]`,
		`["GET",["files","report.pdf"],[{"sub":"bob"},{"sub":"bob"}],null,""]`,
		`["GET",["files","report.pdf"],[{"sub":1},{"sub":1.0}],null,""]`,
		`["GET",["files","report.pdf"],{"p":{"sub":{"x":[1,"b"]}}},null,""]`,
		`["GET",["files","report.pdf"],{"p":{"sub":false}},null,""]`,
		`["GET",["files","report.pdf"],{"p":{"iss":"x"}},"bob",""]`,
		`["GET",["files","report.pdf"],true,"bob",""]`,
		`["GET",["files","report.pdf"],false,"bob",""]`,
		`["GET",["files","report.pdf"],"jwt","bob",""]`,
		`["GET",["files","report.pdf"],0,"bob",""]`,
		`["GET",["files","report.pdf"],[],"bob",""]`,
		`["GET",["files","report.pdf"],{},"bob",""]`,
		`["GET",["files","r\u00e9port.pdf"],false,"b\"ob",""]`,
		`["GET",["files","report.pdf"],null,"",""]`,
		`["GET",["files","report.pdf"],null,"b\u0000ob\n",""]`,
		`["GET",["files","report.pdf"],null,"日本",""]`,
		`["GET",["files","report.pdf"],null,false,""]`,
		`["GET",["files","report.pdf"],null,true,""]`,
		`["GET",["files","report.pdf"],null,5,""]`,
		`["GET",["files","report.pdf"],null,{"a":1},""]`,
		`["GET",["files","report.pdf"],null,["bob"],""]`,
		`["GET",["files","report.pdf"],null,null,""]`,
		`["GET",["files",".."],null,"bob",""]`,
		`["GET",["files","report.pdf"],null,"bob","acme,globex"]`,
		`["GET",[],null,"bob",""]`,
		`["PUT",["files","report.pdf"],null,"bob",""]`,
		// Arrays that are not requests.
		`[]`,
		`["GET"]`,
		`["GET",["files","x"],null,"alice"]`,
		`["GET",["files","x"],null,"alice","",5]`,
		`["GET",["files",5],null,"alice",""]`,
		`["GET","files/x",null,"alice",""]`,
		`[1,["files","x"],null,"alice",""]`,
		`["GET",["files","x"],null,"alice",7]`,
		`["GET",["files","x"],null,"alice",null]`,
	} {
		inputs = append(inputs, `{"table":`+mustJSON(table)+`,"request":`+req+`}`)
	}
	for _, bytes := range [][3]string{
		{"cmVwb3J0LnBkZg==", "Ym9i", ""},                 // report.pdf, bob
		{"cmVwb3J0LnBkZg==", "/2JvYg==", ""},             // \xffbob
		{"/w==", "Ym9i", ""},                             // \xff
		{"cmVwb3J0LnBkZg==", "Ym9i", "YWNt/2U="},         // tenant acm\xffe
		{"cmVwb3J0LnBkZg==", "wMBib2I=", "YWNtZQ=="},     // \xc0\xc0bob, acme
		{"cmVwb3J0LnBkZg==", "4oCoYm9i", "YWNtZQ=="},     // U+2028 bob
		{"cmVwb3J0LnBkZg==", "PGI+JmJvYg==", "YWNtZQ=="}, // <b>&bob
	} {
		inputs = append(inputs, `{"table":`+mustJSON(table)+`,"seg":"`+bytes[0]+`","sub":"`+bytes[1]+`","tenant":"`+bytes[2]+`"}`)
	}
	results := map[string]bool{}
	for _, in := range inputs {
		got, gerr := e.Eval(ctx, "p/values", []byte(in), nil)
		want, werr := e.Eval(ctx, "p/text", []byte(in), nil)
		if (gerr != nil) != (werr != nil) || string(got) != string(want) {
			t.Errorf("%s:\nvalues: %s, %v\ntext:   %s, %v", in, got, gerr, want, werr)
		}
		results[string(want)] = true
	}
	t.Logf("%d inputs, %d distinct results", len(inputs), len(results))
	if len(results) < 8 {
		t.Errorf("only %d distinct results: the inputs prove little", len(results))
	}
	// A request that is neither an array nor its text is undefined, as
	// before; so is a table that is not a string.
	for _, in := range []string{
		`{"table":` + mustJSON(table) + `,"request":{"method":"GET"}}`,
		`{"table":` + mustJSON(table) + `,"request":5}`,
		`{"table":[],"request":["GET",["files","x"],null,"alice",""]}`,
	} {
		if out, err := e.Eval(ctx, "p/values", []byte(in), nil); !errors.Is(err, engine.ErrUndefined) {
			t.Errorf("%s: %s, %v; want undefined", in, out, err)
		}
	}
}
