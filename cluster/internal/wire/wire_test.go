package wire

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
)

func tuple(t testing.TB, s string) api.Tuple {
	t.Helper()
	tu, err := api.ParseTuple(s)
	if err != nil {
		t.Fatal(err)
	}
	return tu
}

func TestWriteRoundTrip(t *testing.T) {
	req := datastore.WriteRequest{
		Touches: []api.Tuple{tuple(t, "folder:a#viewer@user:ann"), tuple(t, "folder:a#viewer@group:eng#member")},
		Deletes: []api.Tuple{tuple(t, "folder:b#editor@user:bob")},
		Preconditions: []datastore.Precondition{
			{Filter: datastore.Filter{ObjectType: "folder", ObjectID: "a", Relation: "viewer"}, MustExist: true},
			{Filter: datastore.Filter{SubjectType: "group", SubjectID: "eng", SubjectRelation: "member"}},
		},
	}
	b, err := Write("r1", req)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != KindWrite || m.Origin != "r1" {
		t.Fatalf("decoded %+v", m)
	}
	got, err := m.WriteRequest()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, req) {
		t.Fatalf("round trip\n%+v\nwant\n%+v", got, req)
	}
}

func TestSchemaAndPolicy(t *testing.T) {
	sc, err := schema.Parse([]byte("types:\n  user: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Schema("r", sc, true)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(b)
	if err != nil || m.Kind != KindSchema || m.Schema != string(sc.Source()) || !m.Force {
		t.Fatalf("schema: %+v, %v", m, err)
	}
	ref := PolicyRef{Object: "policy/x", SHA256: strings.Repeat("ab", 32), Size: 10}
	if b, err = Policy("r", ref); err != nil {
		t.Fatal(err)
	}
	if m, err = Decode(b); err != nil || m.Kind != KindPolicy || *m.Policy != ref {
		t.Fatalf("policy: %+v, %v", m, err)
	}
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{"not json", `nope`},
		{"trailing", `{"v":1,"kind":"write"} {}`},
		{"version", `{"v":2,"kind":"write"}`},
		{"kind", `{"v":1,"kind":"drop"}`},
		{"unknown field", `{"v":1,"kind":"write","extra":1}`},
		{"bad tuple", `{"v":1,"kind":"write","touches":["folder:a#viewer"]}`},
		{"write with schema", `{"v":1,"kind":"write","schema":"types: {}"}`},
		{"bad schema", `{"v":1,"kind":"schema","schema":"types: [1]"}`},
		{"schema with tuples", `{"v":1,"kind":"schema","schema":"types:\n  user: {}\n","touches":["folder:a#viewer@user:b"]}`},
		{"policy without ref", `{"v":1,"kind":"policy"}`},
		{"policy bad digest", `{"v":1,"kind":"policy","policy":{"object":"p","sha256":"zz","size":1}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Decode([]byte(tt.in)); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode(%s) = %v, want ErrMalformed", tt.in, err)
			}
		})
	}
}

// FuzzDecode: whatever a log holds, Decode either rejects it or returns a
// message that encodes back to one that decodes to the same thing.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"v":1,"kind":"write","touches":["folder:a#viewer@user:ann"],"preconditions":[{"filter":{"object_type":"folder"},"must_exist":true}]}`))
	f.Add([]byte(`{"v":1,"kind":"schema","schema":"types:\n  user: {}\n"}`))
	f.Add([]byte(`{"v":1,"kind":"policy","policy":{"object":"policy/a","sha256":"` + strings.Repeat("0f", 32) + `","size":3}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		if m.Kind != KindWrite {
			return
		}
		req, err := m.WriteRequest()
		if err != nil {
			t.Fatalf("decoded message has a bad write: %v", err)
		}
		again, err := Write(m.Origin, req)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := Decode(again)
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v\n%s", err, again)
		}
		req2, _ := m2.WriteRequest()
		if !reflect.DeepEqual(req, req2) {
			t.Fatalf("round trip changed the write:\n%+v\n%+v", req, req2)
		}
	})
}

// FuzzPlainWrite: where the reflection-free path decodes a message, it
// decodes it exactly as encoding/json does.
func FuzzPlainWrite(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"kind":"write"}`,
		`{"v":1,"kind":"write","origin":"r1","touches":["folder:a#viewer@user:ann","folder:a#viewer@group:eng#member"],"deletes":["folder:b#editor@user:bob"]}`,
		`{"v":1,"kind":"write","deletes":["folder:b#editor@user:bob"]}`,
		`{"v":1,"kind":"write","touches":["folder:a#viewer@user:ann"],"preconditions":[{"filter":{"object_type":"folder"}}]}`,
		`{"v":1,"kind":"write","touches":["folder:a#viewer@user:\u0061nn"]}`,
		`{"v":1,"kind":"write","touches":[]}`,
		`{"v":1,"kind":"write","touches":["folder:a#viewer@user:ann"],"touches":["folder:a#viewer@user:bob"]}`,
		`{"v":1,"kind":"write","touches":["folder:a#viewer@user:ann"]} `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := decodePlainWrite(b)
		if !ok {
			return
		}
		slow, err := decode(b)
		if err != nil {
			t.Fatalf("the plain path accepts what encoding/json rejects (%v): %q", err, b)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("the two paths differ on %q:\n%#v\n%#v", b, fast, slow)
		}
	})
}

// TestPlainWrite checks which messages the plain path takes, so that a
// change that sends every write down the general path fails.
func TestPlainWrite(t *testing.T) {
	req := datastore.WriteRequest{
		Touches: []api.Tuple{tuple(t, "folder:a#viewer@user:ann"), tuple(t, "folder:a#viewer@group:eng#member")},
		Deletes: []api.Tuple{tuple(t, "folder:b#editor@user:bob")},
	}
	b, err := Write("r1", req)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := decodePlainWrite(b)
	if !ok {
		t.Fatalf("a plain write takes the general path: %s", b)
	}
	got, _ := m.WriteRequest()
	if m.Origin != "r1" || !reflect.DeepEqual(got, req) {
		t.Fatalf("decoded %+v, want %+v", got, req)
	}
	for _, in := range []string{
		`{"v":1,"kind":"write","touches":["folder:a#viewer@user:ann"],"preconditions":[{"filter":{"object_type":"folder"}}]}`,
		`{"v":1,"kind":"write","touches":["folder:a#viewer@user:\u0061nn"]}`,
		`{"v":1,"kind":"write","touches":["folder:a#viewer"]}`,
		`{"v":1,"kind":"write","touches":["folder:a#viewer@user:ann"],"extra":1}`,
		"{\"v\":1,\"kind\":\"write\",\"touches\":[\"folder:a#viewer@user:\xff\"]}",
	} {
		if _, ok := decodePlainWrite([]byte(in)); ok {
			t.Errorf("the plain path took %s", in)
		}
	}
}

func BenchmarkDecodeWrite(b *testing.B) {
	msg, err := Write("replica-1", datastore.WriteRequest{Touches: []api.Tuple{tuple(b, "doc:d-123456#viewer@user:u-98765")}})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name   string
		decode func([]byte) (Message, error)
	}{{"plain", Decode}, {"encoding-json", decode}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.decode(msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
