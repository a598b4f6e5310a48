package input

import (
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

// TestParsedPathAndQuery holds parsed_path and parsed_query to what
// opa-envoy-plugin computes since its path-parsing security fix: the path
// is percent-decoded, then split at "/" after its leading slashes are
// trimmed; it is never read as an authority; a query that does not parse
// is a request-parse error. The expected values are written by hand.
func TestParsedPathAndQuery(t *testing.T) {
	tests := []struct {
		name      string
		path      string
		wantPath  []string
		wantQuery map[string][]string
		wantErr   error
	}{
		{name: "plain", path: "/files/f1", wantPath: []string{"files", "f1"}, wantQuery: map[string][]string{}},
		{name: "double-slash-is-a-path", path: "//admin/x", wantPath: []string{"admin", "x"}, wantQuery: map[string][]string{}},
		{name: "triple-slash", path: "///tenants/acme", wantPath: []string{"tenants", "acme"}, wantQuery: map[string][]string{}},
		{name: "encoded-slash-splits", path: "/files%2Fsecret/x", wantPath: []string{"files", "secret", "x"}, wantQuery: map[string][]string{}},
		{name: "dot-dot-kept", path: "/files/../admin", wantPath: []string{"files", "..", "admin"}, wantQuery: map[string][]string{}},
		{name: "root", path: "/", wantPath: []string{""}, wantQuery: map[string][]string{}},
		{name: "empty", path: "", wantPath: []string{""}, wantQuery: map[string][]string{}},
		{name: "trailing-slash", path: "/a/", wantPath: []string{"a", ""}, wantQuery: map[string][]string{}},
		{name: "matrix-param-in-path", path: "/files/f1;v=1?a=1", wantPath: []string{"files", "f1;v=1"}, wantQuery: map[string][]string{"a": {"1"}}},
		{name: "query", path: "/a?b=1&b=2&c&d=%20", wantPath: []string{"a"}, wantQuery: map[string][]string{"b": {"1", "2"}, "c": {""}, "d": {" "}}},
		{name: "fragment-is-path", path: "/a#f?x=1", wantPath: []string{"a#f"}, wantQuery: map[string][]string{"x": {"1"}}},
		{name: "second-question-mark", path: "/a?x=1?2", wantPath: []string{"a"}, wantQuery: map[string][]string{"x": {"1?2"}}},
		{name: "semicolon-in-query", path: "/a?x=1;y=2", wantErr: ErrInvalidQuery},
		{name: "bad-escape-in-query", path: "/a?x=%zz", wantErr: ErrInvalidQuery},
		{name: "bad-escape-in-path", path: "/a%zz", wantErr: ErrInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
				Http: &authv3.AttributeContext_HttpRequest{Method: "GET", Path: tt.path},
			}}}
			doc, err := AppendEnvoy(nil, req, Options{})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Path  []string            `json:"parsed_path"`
				Query map[string][]string `json:"parsed_query"`
			}
			if err := json.Unmarshal(doc, &got); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Path, tt.wantPath) {
				t.Errorf("parsed_path = %q, want %q", got.Path, tt.wantPath)
			}
			if len(got.Query) != len(tt.wantQuery) {
				t.Errorf("parsed_query = %q, want %q", got.Query, tt.wantQuery)
			}
			for k, v := range tt.wantQuery {
				if !slices.Equal(got.Query[k], v) {
					t.Errorf("parsed_query[%q] = %q, want %q", k, got.Query[k], v)
				}
			}
		})
	}
}

// FuzzPlainQuery: a query the path reader checks without parsing is one
// url.ParseQuery accepts; a query it has ParseQuery parse is refused only
// by ParseQuery's own verdict.
func FuzzPlainQuery(f *testing.F) {
	for _, q := range []string{"a=1&b=2", "a=%41", "a=%4", "a=%zz", "a;b=1", "%", "a=1&&b", "=x", "a+b=c%20d", "ü=ä", "a=%"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		if plainQuery(q) {
			if _, err := url.ParseQuery(q); err != nil {
				t.Fatalf("plainQuery(%q) but ParseQuery: %v", q, err)
			}
		}
	})
}

// FuzzParsePath holds parsePath to net/url, whatever the policy reads: a
// path it only checks (the policy reads no parsed_path) is refused
// exactly when url.PathUnescape refuses its path part, with the same
// error as when it decodes it; a path it decodes is url.PathUnescape's.
// The query is checked as FuzzPlainQuery says.
func FuzzParsePath(f *testing.F) {
	for _, p := range []string{"/", "/files/f1", "/a%2Fb", "/a%zz", "/a%", "/a%4", "/a%41?x=%zz", "//a;b?c=1", "/%e2%82%ac/x?y=1&y=2", "/a?", "?a=1", "/a%2", "/a+b", "/%%41"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		rawPath, _, _ := strings.Cut(path, "?")
		want, wantErr := url.PathUnescape(rawPath)
		if got := wellEscaped(rawPath); got != (wantErr == nil) {
			t.Fatalf("wellEscaped(%q) = %v, url.PathUnescape: %v", rawPath, got, wantErr)
		}
		for _, parse := range []bool{false, true} {
			decoded, _, err := parsePath(path, true, parse)
			checked, _, cerr := parsePath(path, false, parse)
			if (err == nil) != (cerr == nil) || err != nil && err.Error() != cerr.Error() {
				t.Fatalf("parsePath(%q, parse %v): decoding: %v, checking: %v", path, parse, err, cerr)
			}
			if wantErr != nil {
				if !errors.Is(err, ErrInvalidPath) {
					t.Fatalf("parsePath(%q): %v, want ErrInvalidPath (url.PathUnescape: %v)", path, err, wantErr)
				}
				continue
			}
			if errors.Is(err, ErrInvalidPath) {
				t.Fatalf("parsePath(%q): %v, url.PathUnescape accepts it", path, err)
			}
			if err == nil && decoded != want {
				t.Fatalf("parsePath(%q) decoded %q, url.PathUnescape %q", path, decoded, want)
			}
			if err == nil && checked != "" && checked != want {
				t.Fatalf("parsePath(%q) without decoding gave %q, url.PathUnescape %q", path, checked, want)
			}
		}
	})
}
