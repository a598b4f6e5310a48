package prune

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"unicode/utf8"
)

func TestAppend(t *testing.T) {
	src := `{"attributes":{"source":{"principal":"a"},"request":{"http":{"headers":{"x-user":"bob","x-request-id":"1"},"method":"GET","path":"/x"}}},"parsed_path":["x"],"version":{"a":"b"},"k\"ey":1}`
	tests := []struct {
		name  string
		paths [][]string
		want  string
	}{
		{"headers-and-method", [][]string{{"attributes", "request", "http", "headers"}, {"attributes", "request", "http", "method"}, {"parsed_path"}},
			`{"attributes":{"request":{"http":{"headers":{"x-user":"bob","x-request-id":"1"},"method":"GET"}}},"parsed_path":["x"]}`},
		{"ancestor-wins", [][]string{{"attributes", "request"}, {"attributes", "request", "http", "method"}},
			`{"attributes":{"request":{"http":{"headers":{"x-user":"bob","x-request-id":"1"},"method":"GET","path":"/x"}}}}`},
		{"missing-paths", [][]string{{"nope"}, {"attributes", "nope"}}, `{"attributes":{}}`},
		{"escaped-key", [][]string{{"k\"ey"}}, `{"k\"ey":1}`},
		{"into-a-non-object", [][]string{{"parsed_path", "0"}}, `{"parsed_path":["x"]}`},
		{"nothing-read", nil, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := New(tt.paths).Append(nil, []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	var nilTree *Tree
	if got, _ := nilTree.Append(nil, []byte(src)); string(got) != src {
		t.Fatal("a nil tree must copy the input")
	}
}

// FuzzAppend checks the pruner against a reference built on
// encoding/json: the pruned document is what walking the decoded value
// along the same tree gives.
func FuzzAppend(f *testing.F) {
	f.Add(`{"a":{"b":1,"c":[1,{"d":2}]},"e":"x\"y","f":null}`, "a.b", "e")
	f.Add(`{"a" : { "b" : true } , "z":{}}`, "a", "z.q")
	f.Fuzz(func(t *testing.T, doc, p1, p2 string) {
		var v map[string]any
		// Inputs are valid UTF-8 before they are pruned (checked upstream).
		if !utf8.ValidString(doc) || !utf8.ValidString(p1) || !utf8.ValidString(p2) {
			return
		}
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			return
		}
		paths := [][]string{splitDots(p1), splitDots(p2)}
		tree := New(paths)
		got, err := tree.Append(nil, []byte(doc))
		if err != nil {
			t.Fatalf("valid JSON object refused: %v", err)
		}
		var gotV any
		if err := json.Unmarshal(got, &gotV); err != nil {
			t.Fatalf("output is not JSON: %s", got)
		}
		if want := reference(tree, v); !reflect.DeepEqual(gotV, want) {
			t.Fatalf("got %v, want %v", gotV, want)
		}
	})
}

func splitDots(s string) []string {
	var out []string
	cur := ""
	for _, c := range s {
		if c == '.' {
			out = append(out, cur)
			cur = ""
			continue
		}
		cur += string(c)
	}
	return append(out, cur)
}

func reference(t *Tree, v map[string]any) map[string]any {
	out := map[string]any{}
	for k, child := range t.children {
		x, ok := v[k]
		if !ok {
			continue
		}
		if m, isObj := x.(map[string]any); isObj && child.children != nil {
			out[k] = reference(child, m)
		} else {
			out[k] = x
		}
	}
	return out
}

// BenchmarkChild: the lookups an input builder makes in a small node (a
// request's HTTP fields, two of them kept) and a large one (twelve keys),
// hits and misses.
func BenchmarkChild(b *testing.B) {
	small := New([][]string{{"method"}, {"headers", "authorization"}})
	var many [][]string
	for _, k := range []string{"id", "method", "headers", "path", "host", "scheme", "query", "fragment", "size", "protocol", "body", "raw_body"} {
		many = append(many, []string{k, "x"})
	}
	large := New(many)
	asked := []string{"id", "method", "headers", "path", "host", "scheme", "query", "fragment", "size", "protocol", "body", "raw_body"}
	for _, bc := range []struct {
		name string
		t    *Tree
	}{{"small", small}, {"large", large}} {
		b.Run(bc.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				for _, k := range asked {
					if _, ok := bc.t.Child(k); ok {
						n++
					}
				}
			}
			if n == 0 {
				b.Fatal("no key found")
			}
		})
	}
}

// TestChildSizes: a node finds its children by comparing keys when it has
// few and through its map when it has many; both find every child kept,
// whole or not, and no other key.
func TestChildSizes(t *testing.T) {
	for _, n := range []int{1, linearKeys, linearKeys + 1, 20} {
		var paths [][]string
		for i := range n {
			if i%2 == 0 {
				paths = append(paths, []string{fmt.Sprintf("k%d", i)}) // kept whole
			} else {
				paths = append(paths, []string{fmt.Sprintf("k%d", i), "x"})
			}
		}
		tr := New(paths)
		for i := range n {
			c, ok := tr.Child(fmt.Sprintf("k%d", i))
			if !ok || (c == nil) != (i%2 == 0) {
				t.Errorf("%d keys: k%d: %v, %v", n, i, c, ok)
			}
			if c != nil {
				if _, ok := c.Child("x"); !ok {
					t.Errorf("%d keys: k%d.x not kept", n, i)
				}
				if _, ok := c.Child("y"); ok {
					t.Errorf("%d keys: k%d.y kept", n, i)
				}
			}
		}
		for _, k := range []string{"k", fmt.Sprintf("k%d", n), "", "k0x"} {
			if _, ok := tr.Child(k); ok {
				t.Errorf("%d keys: %q kept", n, k)
			}
		}
	}
}
