package checkapi

import (
	"errors"
	"strings"
	"testing"
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
	body := `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"evaluations":[{"resource":{"type":"file","id":"f1"}},{"action":{"name":"write"},"resource":{"type":"file","id":"f2"}}],"options":{"evaluations_semantic":"deny_on_first_deny"}}`
	cs, sem, err := ReadAuthZENBatch(strings.NewReader(body), 10)
	if err != nil {
		t.Fatal(err)
	}
	if sem != DenyOnFirstDeny || len(cs) != 2 || cs[0].Action != "read" || cs[1].Action != "write" || cs[1].Resource.ID != "f2" || cs[1].Subject.ID != "alice" {
		t.Fatalf("got %q %+v", sem, cs)
	}
	if _, _, err := ReadAuthZENBatch(strings.NewReader(body), 1); err == nil || !strings.Contains(err.Error(), "at most 1") {
		t.Fatalf("limit: err = %v", err)
	}
	if _, _, err := ReadAuthZENBatch(strings.NewReader(`{"options":{"evaluations_semantic":"x"}}`), 1); err == nil {
		t.Fatal("bad semantic accepted")
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
		if c.Subject.ID == "" || c.Action == "" || c.Resource.Type == "" {
			t.Fatalf("accepted an incomplete check %+v", c)
		}
		_ = c.Input()
	})
}
