package decisionlogs

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestMask(t *testing.T) {
	const ev = `{"decision_id":"d","input":{"a":{"b":1,"c":2},"list":[1,2,3],"k/x":"v"},"result":{"allowed":true,"token":"t"}}`
	tests := []struct {
		name string
		mask string
		want string
	}{
		{"erase a member", `["/input/a/b"]`, `{"decision_id":"d","erased":["/input/a/b"],"input":{"a":{"c":2},"list":[1,2,3],"k/x":"v"},"result":{"allowed":true,"token":"t"}}`},
		{"erase an array item", `["/input/list/1"]`, `{"decision_id":"d","erased":["/input/list/1"],"input":{"a":{"b":1,"c":2},"list":[1,3],"k/x":"v"},"result":{"allowed":true,"token":"t"}}`},
		{"erase an escaped key", `["/input/k%2Fx"]`, `{"decision_id":"d","erased":["/input/k%2Fx"],"input":{"a":{"b":1,"c":2},"list":[1,2,3]},"result":{"allowed":true,"token":"t"}}`},
		{"erase the whole input", `[{"op":"remove","path":"/input"}]`, `{"decision_id":"d","erased":["/input"],"result":{"allowed":true,"token":"t"}}`},
		{"upsert in the result", `[{"op":"upsert","path":"/result/token","value":"***"}]`, `{"decision_id":"d","input":{"a":{"b":1,"c":2},"list":[1,2,3],"k/x":"v"},"masked":["/result/token"],"result":{"allowed":true,"token":"***"}}`},
		{"upsert makes objects", `[{"op":"upsert","path":"/input/x/y","value":1}]`, `{"decision_id":"d","input":{"a":{"b":1,"c":2},"list":[1,2,3],"k/x":"v","x":{"y":1}},"masked":["/input/x/y"],"result":{"allowed":true,"token":"t"}}`},
		{"a missing path is skipped", `["/input/nope/deeper", "/input/list/9"]`, ev},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ops, err := parseMask([]byte(tt.mask))
			if err != nil {
				t.Fatal(err)
			}
			got, err := applyMask([]byte(ev), ops)
			if err != nil {
				t.Fatal(err)
			}
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tt.want), &w); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestParseMaskRejects(t *testing.T) {
	for _, m := range []string{`{"a":1}`, `["input/a"]`, `["/labels/id"]`, `[7]`, `[{"op":"hide","path":"/input"}]`, `[{"path":5}]`, `[{"op":"remove","path":"/input","extra":1}]`, `["/input/%zz"]`} {
		if _, err := parseMask([]byte(m)); err == nil {
			t.Errorf("%s: accepted", m)
		}
	}
}
