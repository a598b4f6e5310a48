package builtins_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/builtins"
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
