package datadoc

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzReplace holds Member and Replace to encoding/json: the member read
// is the one json.Unmarshal keeps, and the document written decodes to
// the original with the member set.
func FuzzReplace(f *testing.F) {
	for _, s := range []string{
		`{}`, ``, ` `, `{"a":1}`, `{"nexus":{"x":[1,2,{"y":"}"}]},"b":"\"nexus\""}`, ` { "a" : [ ] , "nexus" : 1 , "nexus" : { } } `,
		`{"n\u0065xus":true,"z":null}`, `[]`, `"s"`, `{"a":1.5e3,"b":false}`, `{"a":"x\\"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want map[string]json.RawMessage
		isObject := json.Unmarshal(data, &want) == nil && want != nil
		blank := len(trim(data)) == 0
		raw, ok, err := Member(data, "nexus")
		if !isObject && !blank {
			if err == nil {
				t.Fatalf("Member(%q): no error for a document that is not an object", data)
			}
			return
		}
		if err != nil {
			t.Fatalf("Member(%q): %v", data, err)
		}
		if w, has := want["nexus"]; has != ok || (ok && !jsonEqual(t, w, raw)) {
			t.Fatalf("Member(%q) = %s %v, want %s %v", data, raw, ok, w, has)
		}
		out, err := Replace(data, "nexus", []byte(`{"set":[1]}`))
		if err != nil {
			t.Fatalf("Replace(%q): %v", data, err)
		}
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("Replace(%q) = %q: %v", data, out, err)
		}
		var exp map[string]any
		if !blank {
			_ = json.Unmarshal(data, &exp)
		}
		if exp == nil {
			exp = map[string]any{}
		}
		exp["nexus"] = map[string]any{"set": []any{1.0}}
		if !reflect.DeepEqual(got, exp) {
			t.Fatalf("Replace(%q) = %s, want %v", data, out, exp)
		}
	})
}

func trim(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	return b
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
