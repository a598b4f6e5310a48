package checkapi

import (
	"errors"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/pdp"
)

func TestReadAuthZEN(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		wantInput string
		wantErr   string
	}{
		{
			name:      "full",
			body:      `{"subject":{"type":"user","id":"alice","properties":{"dept":"eng"}},"action":{"name":"read"},"resource":{"type":"file","id":"f1","properties":{"tenant":"acme","size":12345678901234567890}},"context":{"ip":"10.0.0.1"}}`,
			wantInput: `{"subject":{"type":"user","id":"alice","attributes":{"dept":"eng"}},"action":"read","resource":{"type":"file","id":"f1","tenant":"acme","attributes":{"size":12345678901234567890,"tenant":"acme"}},"context":{"ip":"10.0.0.1"}}`,
		},
		{name: "no-subject", body: `{"action":{"name":"read"},"resource":{"type":"file","id":"f1"}}`, wantErr: "subject is required"},
		{name: "empty-id", body: `{"subject":{"type":"user","id":""},"action":{"name":"read"},"resource":{"type":"file"}}`, wantErr: "subject.id is required"},
		{name: "wrong-type", body: `{"subject":{"type":"user","id":7},"action":{"name":"read"},"resource":{"type":"file"}}`, wantErr: "subject.id must be a string"},
		{name: "malformed", body: `{"subject":`, wantErr: "the JSON ends early"},
		{name: "trailing", body: `{} {}`, wantErr: "unexpected data"},
		{name: "bad-utf8", body: "{\"a\":\"\xff\"}", wantErr: "not valid UTF-8"},
		{name: "reserved", body: `{"subject":{"type":"user","id":"a#b"},"action":{"name":"read"},"resource":{"type":"file"}}`, wantErr: "reserved character"},
		{name: "tenant-not-string", body: `{"subject":{"type":"user","id":"a"},"action":{"name":"read"},"resource":{"type":"file","properties":{"tenant":1}}}`, wantErr: "tenant must be a string"},
		{name: "empty", body: ``, wantErr: "the body is empty"},
		{name: "no-resource-id", body: `{"subject":{"type":"user","id":"a"},"action":{"name":"read"},"resource":{"type":"file"}}`, wantErr: "resource.id is required"},
		{name: "no-action-name", body: `{"subject":{"type":"user","id":"a"},"action":{},"resource":{"type":"file","id":"f"}}`, wantErr: "action.name is required"},
		{name: "subject-string", body: `{"subject":"alice","action":{"name":"read"},"resource":{"type":"file","id":"f"}}`, wantErr: "subject must be an object"},
		{name: "action-name-number", body: `{"subject":{"type":"user","id":"a"},"action":{"name":123},"resource":{"type":"file","id":"f"}}`, wantErr: "action.name must be a string"},
		{
			name:      "action-properties-unknown-fields",
			body:      `{"subject":{"type":"user","id":"alice"},"action":{"name":"delete","properties":{"soft":true}},"resource":{"type":"record","id":"r1"},"foo":"bar","futureField":{"nested":true}}`,
			wantInput: `{"subject":{"type":"user","id":"alice"},"action":"delete","action_attributes":{"soft":true},"resource":{"type":"record","id":"r1"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ReadAuthZEN(strings.NewReader(tt.body))
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrBadRequest containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(c.Input()); got != tt.wantInput {
				t.Fatalf("input\n got %s\nwant %s", got, tt.wantInput)
			}
		})
	}
}

func TestReadAuthZENBatch(t *testing.T) {
	type item struct {
		action, resource string // of the check
		err              string // or a substring of its error
	}
	tests := []struct {
		name    string
		body    string
		single  bool
		sem     string
		items   []item
		wantErr string // the whole request's error
		// tooLarge: wantErr is pdp.ErrTooLarge (413), not ErrBadRequest
		tooLarge bool
	}{
		{name: "defaults", body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"evaluations":[{"resource":{"type":"file","id":"f1"}},{"action":{"name":"write"},"resource":{"type":"file","id":"f2"}}],"options":{"evaluations_semantic":"deny_on_first_deny"}}`,
			sem: DenyOnFirstDeny, items: []item{{action: "read", resource: "f1"}, {action: "write", resource: "f2"}}},
		{name: "no-evaluations", body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"file","id":"f1"}}`,
			single: true, sem: ExecuteAll, items: []item{{action: "read", resource: "f1"}}},
		{name: "empty-evaluations", body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"file","id":"f1"},"evaluations":[]}`,
			single: true, sem: ExecuteAll, items: []item{{action: "read", resource: "f1"}}},
		{name: "no-evaluations-incomplete", body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"}}`, wantErr: "resource is required"},
		{name: "one-item-missing-resource", body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"evaluations":[{"resource":{"type":"file","id":"f1"}},{}]}`,
			sem: ExecuteAll, items: []item{{action: "read", resource: "f1"}, {err: "evaluations[1]: bad request: resource is required"}}},
		{name: "one-item-wrong-type", body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"evaluations":[{"resource":"f1"},{"resource":{"type":"file","id":"f2"}}]}`,
			sem: ExecuteAll, items: []item{{err: "resource must be an object"}, {action: "read", resource: "f2"}}},
		{name: "one-item-not-an-object", body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"evaluations":[7,{"resource":{"type":"file","id":"f2"}}]}`,
			sem: ExecuteAll, items: []item{{err: "evaluations[0] must be an object"}, {action: "read", resource: "f2"}}},
		{name: "one-item-no-resource-id", body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"evaluations":[{"resource":{"type":"file"}}]}`,
			sem: ExecuteAll, items: []item{{err: "resource.id is required"}}},
		{name: "whole-entity-override", body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"file","id":"f1","properties":{"tenant":"acme"}},"evaluations":[{},{"resource":{"type":"file","id":"f2"}}]}`,
			sem: ExecuteAll, items: []item{{action: "read", resource: "f1"}, {action: "read", resource: "f2"}}},
		{name: "evaluations-not-array", body: `{"evaluations":{}}`, wantErr: "evaluations must be an array"},
		{name: "bad-semantic", body: `{"options":{"evaluations_semantic":"x"}}`, wantErr: "is not one of"},
		{name: "too-many", body: `{"subject":{"type":"user","id":"a"},"action":{"name":"read"},"evaluations":[{"resource":{"type":"f","id":"1"}},{"resource":{"type":"f","id":"2"}},{"resource":{"type":"f","id":"3"}}]}`, wantErr: "at most 2", tooLarge: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ReadAuthZENBatch(strings.NewReader(tt.body), 2)
			if tt.wantErr != "" {
				want := ErrBadRequest
				if tt.tooLarge {
					want = pdp.ErrTooLarge
				}
				if err == nil || !errors.Is(err, want) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %v containing %q", err, want, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.Single != tt.single || b.Semantic != tt.sem || len(b.Items) != len(tt.items) {
				t.Fatalf("got single=%v semantic=%q %d items, want %v %q %d", b.Single, b.Semantic, len(b.Items), tt.single, tt.sem, len(tt.items))
			}
			for i, want := range tt.items {
				got := b.Items[i]
				if want.err != "" {
					if got.Err == nil || !errors.Is(got.Err, ErrBadRequest) || !strings.Contains(got.Err.Error(), want.err) {
						t.Fatalf("item %d: err = %v, want %q", i, got.Err, want.err)
					}
					continue
				}
				if got.Err != nil || got.Check.Action != want.action || got.Check.Resource.ID != want.resource || got.Check.Subject.ID != "alice" {
					t.Fatalf("item %d: %+v %v, want %s on %s", i, got.Check, got.Err, want.action, want.resource)
				}
			}
		})
	}
}

func TestReadAuthZENSearch(t *testing.T) {
	tests := []struct {
		name, kind, body string
		want             string // the check's input
		token            string
		limit            int
		wantErr          string
	}{
		{name: "subject", kind: SearchSubject, body: `{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"record","id":"r1"}}`,
			want: `{"subject":{"type":"user","id":""},"action":"read","resource":{"type":"record","id":"r1"}}`},
		{name: "subject-id-ignored", kind: SearchSubject, body: `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"record","id":"r1"},"page":{"limit":1,"token":"t"}}`,
			want: `{"subject":{"type":"user","id":""},"action":"read","resource":{"type":"record","id":"r1"}}`, token: "t", limit: 1},
		{name: "resource", kind: SearchResource, body: `{"subject":{"type":"user","id":"bob","properties":{"role":"admin"}},"action":{"name":"write"},"resource":{"type":"record","id":"ignored"}}`,
			want: `{"subject":{"type":"user","id":"bob","attributes":{"role":"admin"}},"action":"write","resource":{"type":"record"}}`},
		{name: "action", kind: SearchAction, body: `{"subject":{"type":"user","id":"alice"},"resource":{"type":"record","id":"r1"},"context":{"ip":"1"}}`,
			want: `{"subject":{"type":"user","id":"alice"},"action":"","resource":{"type":"record","id":"r1"},"context":{"ip":"1"}}`},
		{name: "subject-no-action", kind: SearchSubject, body: `{"subject":{"type":"user"},"resource":{"type":"record","id":"r1"}}`, wantErr: "action is required"},
		{name: "resource-no-subject", kind: SearchResource, body: `{"action":{"name":"read"},"resource":{"type":"record"}}`, wantErr: "subject is required"},
		{name: "action-no-resource", kind: SearchAction, body: `{"subject":{"type":"user","id":"alice"}}`, wantErr: "resource is required"},
		{name: "subject-input-resource-no-id", kind: SearchSubject, body: `{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"record"}}`, wantErr: "resource.id is required"},
		{name: "resource-input-subject-no-id", kind: SearchResource, body: `{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"record"}}`, wantErr: "subject.id is required"},
		{name: "action-input-subject-no-id", kind: SearchAction, body: `{"subject":{"type":"user"},"resource":{"type":"record","id":"r1"}}`, wantErr: "subject.id is required"},
		{name: "subject-no-type", kind: SearchSubject, body: `{"subject":{},"action":{"name":"read"},"resource":{"type":"record","id":"r1"}}`, wantErr: "subject.type is required"},
		{name: "negative-limit", kind: SearchResource, body: `{"subject":{"type":"user","id":"a"},"action":{"name":"read"},"resource":{"type":"record"},"page":{"limit":-1}}`, wantErr: "page.limit"},
		{name: "fraction-limit", kind: SearchResource, body: `{"subject":{"type":"user","id":"a"},"action":{"name":"read"},"resource":{"type":"record"},"page":{"limit":1.5}}`, wantErr: "page.limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ReadAuthZENSearch(strings.NewReader(tt.body), tt.kind)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrBadRequest containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(s.Check.Input()); got != tt.want || s.PageToken != tt.token || s.PageLimit != tt.limit || s.Kind != tt.kind {
				t.Fatalf("got %s token %q limit %d\nwant %s token %q limit %d", got, s.PageToken, s.PageLimit, tt.want, tt.token, tt.limit)
			}
		})
	}
}

func TestReadPermit(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    Check
		wantErr string
	}{
		{name: "object", body: `{"user":{"key":"bob"},"action":"read","resource":{"type":"file","key":"f1","tenant":"acme"}}`,
			want: Check{Subject: Subject{Type: "user", ID: "bob"}, Action: "read", Resource: Resource{Type: "file", ID: "f1", Tenant: "acme"}}},
		{name: "strings", body: `{"user":"bob","action":"read","resource":"file:f1"}`,
			want: Check{Subject: Subject{Type: "user", ID: "bob"}, Action: "read", Resource: Resource{Type: "file", ID: "f1"}}},
		{name: "no-user", body: `{"action":"read","resource":"file:f1"}`, wantErr: "user is required"},
		{name: "user-number", body: `{"user":3,"action":"read","resource":"file:f1"}`, wantErr: "user must be a string or an object"},
		{name: "no-action", body: `{"user":"bob","resource":"file:f1"}`, wantErr: "action is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ReadPermit(strings.NewReader(tt.body))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(c.Input()) != string(tt.want.Input()) {
				t.Fatalf("got %s want %s", c.Input(), tt.want.Input())
			}
		})
	}
}

func TestReadPermitBulk(t *testing.T) {
	for _, body := range []string{
		`[{"user":"a","action":"read","resource":"file:1"},{"user":"b","action":"read","resource":"file:2"}]`,
		`{"checks":[{"user":"a","action":"read","resource":"file:1"},{"user":"b","action":"read","resource":"file:2"}]}`,
	} {
		cs, err := ReadPermitBulk(strings.NewReader(body), 5)
		if err != nil || len(cs) != 2 || cs[1].Subject.ID != "b" {
			t.Fatalf("%s: %v %+v", body, err, cs)
		}
	}
	if _, err := ReadPermitBulk(strings.NewReader(`{"x":1}`), 5); err == nil {
		t.Fatal("object without checks accepted")
	}
}

func FuzzReadAuthZEN(f *testing.F) {
	f.Add(`{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"file","id":"f1"}}`)
	f.Fuzz(func(t *testing.T, body string) {
		c, err := ReadAuthZEN(strings.NewReader(body))
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("unwrapped error %v", err)
			}
			return
		}
		if c.Subject.ID == "" || c.Action == "" || c.Resource.Type == "" || c.Resource.ID == "" {
			t.Fatalf("accepted an incomplete check %+v", c)
		}
		_ = c.Input()
	})
}

func TestPathSegments(t *testing.T) {
	tests := []struct {
		url     string
		want    string // segments joined by "|"
		wantErr string
	}{
		{url: "https://drive.example.com/tenants/acme/files/report.pdf", want: "tenants|acme|files|report.pdf"},
		{url: "http://drive/files/report%2Epdf?v=1", want: "files|report.pdf"},
		{url: "/files/a%2Fb", want: "files|a|b"}, // decoded, then split, as parsed_path is
		{url: "//files//x", want: "files||x"},
		{url: "/", want: ""},
		{url: "https://drive", want: ""},
		{url: "/files/x#frag", want: "files|x"},
		{url: "ftp://drive/x", wantErr: "must be an http or https URL"},
		{url: "files/x", wantErr: "must be an http or https URL"},
		{url: "/files/%zz", wantErr: "the path does not parse"},
		{url: "/files/x?a=%zz", wantErr: "the query does not parse"},
		{url: "/files/x?a=1;b=2", wantErr: "the query does not parse"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			segs, err := PathSegments(tt.url)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || strings.Join(segs, "|") != tt.want {
				t.Fatalf("got %q, %v, want %q", segs, err, tt.want)
			}
		})
	}
}

func FuzzPathSegments(f *testing.F) {
	for _, s := range []string{"/files/x", "https://h/a/b?c=d", "/a%2Fb", "//", "http://[::1]/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		segs, err := PathSegments(raw)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("unwrapped error %v", err)
			}
			return
		}
		if len(segs) == 0 {
			t.Fatal("no segments: a path has at least one")
		}
		for _, s := range segs {
			if strings.Contains(s, "/") {
				t.Fatalf("segment %q holds a slash", s)
			}
		}
	})
}

func TestReadKong(t *testing.T) {
	tests := []struct {
		name, body string
		want       KongQuery
		wantErr    string
	}{
		{name: "full", body: `{"input":{"request":{"http":{"method":"get","path":"/files/x","headers":{"a":"b"}}},"consumer":{"id":"1","username":"bob"}}}`,
			want: KongQuery{Method: "GET", Path: "/files/x", Consumer: "bob"}},
		{name: "no-consumer", body: `{"input":{"request":{"http":{"method":"GET","path":"/"}}}}`, want: KongQuery{Method: "GET", Path: "/"}},
		{name: "no-input", body: `{}`, wantErr: "input is required"},
		{name: "no-path", body: `{"input":{"request":{"http":{"method":"GET"}}}}`, wantErr: "method and path are required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := ReadKong(strings.NewReader(tt.body))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || k != tt.want {
				t.Fatalf("got %+v, %v, want %+v", k, err, tt.want)
			}
		})
	}
}

// TestReadPermitExactAttributes: a Permit user or resource keeps its
// attributes' numbers exact however the body spells the key (escapes
// included), and a plain string or an escaped one decodes the same.
func TestReadPermitExactAttributes(t *testing.T) {
	for _, body := range []string{
		`{"user":{"key":"alice"},"action":"read","resource":{"type":"file","key":"f1","attributes":{"size":12345678901234567890}}}`,
		`{"user":{"key":"alice"},"action":"read","resource":{"type":"file","key":"f1","attr\u0069butes":{"size":12345678901234567890}}}`,
		`{"user":"al\u0069ce","action":"read","resource":{"type":"file","key":"f1","attributes":{"size":12345678901234567890}}}`,
		`{"user":"alice","action":"read","resource":{"t\u0079pe":"file","key":"f1","attributes":{"size":12345678901234567890}}}`,
	} {
		c, err := ReadPermit(strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		want := `{"subject":{"type":"user","id":"alice"},"action":"read","resource":{"type":"file","id":"f1","attributes":{"size":12345678901234567890}}}`
		if got := string(c.Input()); got != want {
			t.Fatalf("%s:\ngot  %s\nwant %s", body, got, want)
		}
	}
}
