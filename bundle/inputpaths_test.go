package bundle_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
)

func TestInputPaths(t *testing.T) {
	const data = `{"nexus":{"subject_header":"x-user","n":1}}`
	tests := []struct {
		name  string
		meta  string // the metadata's nexus_input_paths, as JSON; "" for none
		want  [][]string
		known bool
	}{
		{name: "not recorded", meta: "", known: false},
		{name: "keys", meta: `[["user"],["req","method"]]`, want: [][]string{{"user"}, {"req", "method"}}, known: true},
		{name: "none read", meta: `[]`, want: [][]string{}, known: true},
		{name: "key from data", meta: `[["headers",{"data":["nexus","subject_header"]}]]`, want: [][]string{{"headers", "x-user"}}, known: true},
		{name: "data key ends the path", meta: `[["headers",{"data":["nexus","subject_header"]},"v"]]`, want: [][]string{{"headers", "x-user"}}, known: true},
		{name: "key absent from data", meta: `[["headers",{"data":["nexus","nope"]}],["user"]]`, want: [][]string{{"user"}}, known: true},
		{name: "key not a string", meta: `[["headers",{"data":["nexus","n"]}]]`, want: [][]string{{"headers"}}, known: true},
		{name: "empty path", meta: `[[]]`, known: false},
		{name: "path not a list", meta: `["user"]`, known: false},
		{name: "number segment", meta: `[["a",1]]`, known: false},
		{name: "object with other keys", meta: `[["a",{"data":["nexus"],"x":1}]]`, known: false},
		{name: "data ref not strings", meta: `[["a",{"data":[1]}]]`, known: false},
		{name: "only a data key", meta: `[[{"data":["nexus","n"]}]]`, known: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := bundle.Manifest{Entrypoints: []string{"p/allow"}}
			if tt.meta != "" {
				var v any
				if err := json.Unmarshal([]byte(tt.meta), &v); err != nil {
					t.Fatal(err)
				}
				m.Metadata = map[string]any{bundle.MetadataInputPaths: v}
			}
			got, known := m.InputPaths([]byte(data))
			if known != tt.known {
				t.Fatalf("known = %v, want %v (%v)", known, tt.known, got)
			}
			if known && !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("paths = %v, want %v", got, tt.want)
			}
		})
	}
}
