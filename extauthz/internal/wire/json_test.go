package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nexuspdp/nexus/pdp"
)

func TestScan(t *testing.T) {
	manyKeys := func(n int, dup bool) string {
		var b strings.Builder
		b.WriteByte('{')
		for i := range n {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		if dup {
			b.WriteString(`"k3":0,`)
		}
		b.WriteString(`"last":{"k1":1}}`)
		return b.String()
	}
	tests := []struct {
		name    string
		body    string
		wantErr string // "" means accepted
	}{
		{name: "flat", body: `{"user":"bob","action":"read","resource":"file:x"}`},
		{name: "depth-64", body: strings.Repeat("[", 64) + strings.Repeat("]", 64)},
		{name: "depth-65", body: strings.Repeat("[", 65) + strings.Repeat("]", 65), wantErr: "JSON nested deeper than 64"},
		{name: "depth-9000", body: `{"a":` + strings.Repeat(`{"a":`, 9000) + `1` + strings.Repeat("}", 9001), wantErr: "JSON nested deeper than 64"},
		{name: "unclosed-deep", body: strings.Repeat("[", 9000), wantErr: "JSON nested deeper than 64"},
		{name: "brackets-in-strings", body: `{"a":"` + strings.Repeat("[{", 100) + `\"a\":","b":1}`},
		{name: "duplicate", body: `{"user":"alice","user":"bob"}`, wantErr: `duplicate key "user"`},
		{name: "duplicate-escaped", body: `{"user":"alice","\u0075ser":"bob"}`, wantErr: `duplicate key "user"`},
		{name: "duplicate-nested", body: `{"a":{"x":1,"y":{"x":2},"x":3}}`, wantErr: `duplicate key "x"`},
		{name: "same-key-other-objects", body: `{"x":{"x":1},"y":[{"x":1},{"x":2}],"z":{"x":{"x":3}}}`},
		{name: "many-keys", body: manyKeys(100, false)},
		{name: "many-keys-duplicate", body: manyKeys(100, true), wantErr: `duplicate key "k3"`},
		{name: "value-equals-key", body: `{"a":"a","b":"a"}`},
		{name: "invalid-utf8", body: "{\"user\":\"bo\xffb\"}", wantErr: "not valid UTF-8 (at byte 11)"},
		{name: "invalid-utf8-key", body: "{\"\xc3\":1}", wantErr: "not valid UTF-8"},
		{name: "malformed-left-to-the-decoder", body: `{"a":`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Scan([]byte(tt.body))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Scan = %v, want nil", err)
				}
				return
			}
			if err == nil || !errors.Is(err, pdp.ErrBadRequest) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Scan = %v, want ErrBadRequest containing %q", err, tt.wantErr)
			}
		})
	}
}

// refScan is Scan's reference on valid JSON: encoding/json's tokens,
// with the depth and each object's keys tracked on a stack.
func refScan(body []byte) (depth int, dup bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		obj     bool
		keys    map[string]bool
		wantKey bool
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return depth, dup
		}
		var top *frame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		if top != nil && top.obj && top.wantKey {
			if k, ok := tok.(string); ok {
				if top.keys[k] {
					dup = true
				}
				top.keys[k] = true
				top.wantKey = false
				continue
			}
		}
		if top != nil && top.obj {
			top.wantKey = true // the value is read (or opens now)
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			stack = append(stack, frame{obj: tok == json.Delim('{'), keys: map[string]bool{}, wantKey: tok == json.Delim('{')})
			depth = max(depth, len(stack))
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}

// FuzzScan holds Scan to its reference on valid JSON: refused exactly
// when too deep or with a key twice, and on invalid UTF-8 always refused.
func FuzzScan(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[{"a":2}]}`, `{"a":1,"a":2}`, `{"a":{"b":{"c":{}}}}`, `[[[[]]]]`, `{"\u0061":1,"a":2}`, `{"a":"\"}{","b":"\\"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		err := Scan(body)
		if !utf8.Valid(body) {
			if err == nil {
				t.Fatalf("invalid UTF-8 accepted: %q", body)
			}
			return
		}
		if !json.Valid(body) {
			return
		}
		depth, dup := refScan(body)
		if want := depth > MaxDepth || dup; (err != nil) != want {
			t.Fatalf("Scan(%q) = %v; depth %d, duplicate %v", body, err, depth, dup)
		}
	})
}

func TestDecodeJSONNamesNoGoTypes(t *testing.T) {
	var v struct {
		User struct {
			Key string `json:"key"`
		} `json:"user"`
		N []int `json:"n"`
	}
	for _, body := range []string{`{"user":{"key":5}}`, `{"user":[1]}`, `{"n":{}}`, `{"n":["x"]}`, `[]`, `{"user":1e400}`, `{"x":1}`} {
		err := DecodeJSON([]byte(body), &v, true, "")
		if err == nil || !errors.Is(err, pdp.ErrBadRequest) {
			t.Fatalf("%s: err = %v, want ErrBadRequest", body, err)
		}
		for _, leak := range []string{"json:", "Go ", "struct", "[]int", "main.", "unmarshal"} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("%s: %q names %q", body, err, leak)
			}
		}
	}
}

func TestCheckURL(t *testing.T) {
	for _, tt := range []struct {
		target string
		ok     bool
	}{
		{"/allowed", true},
		{"/allowed?a=b&c=%C3%A9", true},
		{"/allowed?a=%FF", false},
		{"/allowed?%FE=b", false},
		{"/allowed?a=%zz&b=%FF", false},
		{"/allowed%FF", false},
	} {
		r := httptest.NewRequest("GET", tt.target, nil)
		if err := CheckURL(r); (err == nil) != tt.ok {
			t.Errorf("CheckURL(%s) = %v, want ok %v", tt.target, err, tt.ok)
		}
	}
}

// BenchmarkScan is the scan's cost on a typical check body.
func BenchmarkScan(b *testing.B) {
	body := []byte(`{"subject":{"type":"user","id":"bob","properties":{"department":"sales","level":3}},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf","properties":{"tenant":"acme"}},"context":{"ip":"10.0.0.1"}}`)
	b.ReportAllocs()
	for range b.N {
		if err := Scan(body); err != nil {
			b.Fatal(err)
		}
	}
}
