package checkapi

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

// FuzzFlatReaders: a body the flat reader reads means what encoding/json
// makes of it, the same check or the same error, for /allowed and
// AuthZEN's evaluation (a body read from anything but a *bytes.Buffer
// goes to encoding/json alone).
func FuzzFlatReaders(f *testing.F) {
	for _, s := range []string{
		`{"user":"alice","action":"read","resource":{"type":"file","key":"report.pdf","tenant":"acme"}}`,
		`{"user":{"key":"bob"},"action":"read","resource":"file:report.pdf"}`,
		`{"user":{"key":""},"action":"read","resource":{"type":"file"}}`,
		` { "user" : "a b" , "action":"x", "resource":{"Type":"file","key":"k"}} `,
		`{"user":"alice","action":"read","resource":{"type":"file","key":"r","key":"s"}}`,
		`{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf","properties":{"tenant":"acme"}}}`,
		`{"subject":{"type":"user","id":"bob","properties":{}},"action":{"name":"read","properties":{"a":"b"}},"resource":{"type":"file","id":"x"}}`,
		`{"subject":{"type":"user","id":"bob"},"action":{"name":""},"resource":{"type":"file","id":"x","properties":{"tenant":{"a":"b"}}}}`,
		`{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file","id":"x"},"subject":{"type":"user","id":"eve"}}`,
		`{"user":"alice","action":"read","resource":{"type":"file","key":"\u0072"}}`,
		`{"user":{},"action":"read","resource":""}`,
		`{"user":{"key":"a","key":"b"},"action":"read","resource":"file:x"}`,
		`{"user":"a","action":{"name":"read"},"resource":{"type":"file","tenant":"t","tenant":"u"}}`,
		`{"user":"a","action":"read","resource":"file:x","user":"b"}`,
		`{"user":"a","action":"read"}`,
		`{}`,
		`{"user":"a","action":"read","resource":{"type":"file","key":"x"},}`,
		`{"user":"a","action":"read","resource":{"type":"file","key":"x"}} {}`,
		`{"subject":{"type":"user","id":"a","properties":{"x":"1","x":"2"}},"action":{"name":"read"},"resource":{"type":"file","id":"x"}}`,
		`{"subject":{},"action":{},"resource":{}}`,
		`{"action":{"name":"read","name":"write"},"resource":{"type":"file","id":"x"}}`,
		`{"subject":"user:a","action":{"name":"read"},"resource":{"type":"file","id":"x","properties":{"tenant":"t","n":"1"}}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, read := range []struct {
			name string
			fn   func(r io.Reader) (Check, error)
		}{
			{"/allowed", func(r io.Reader) (Check, error) { return ReadPermit(r) }},
			{"evaluation", func(r io.Reader) (Check, error) { return ReadAuthZEN(r) }},
		} {
			got, gotErr := read.fn(bytes.NewBufferString(body))
			want, wantErr := read.fn(strings.NewReader(body))
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: the flat reader reads %#v (%v), encoding/json %#v (%v)\nbody: %s", read.name, got, gotErr, want, wantErr, body)
			}
		}
	})
}

// TestFlatReaderReadsCommonBodies: the bodies checks usually have are
// read by the flat reader (else it would be dead code).
func TestFlatReaderReadsCommonBodies(t *testing.T) {
	c, ok, err := readPermitFlat(bytes.NewBufferString(`{"user":"alice","action":"read","resource":{"type":"file","key":"report.pdf","tenant":"acme"}}`))
	if !ok || err != nil || c.Subject.ID != "alice" || c.Resource.Tenant != "acme" {
		t.Fatalf("Permit: %+v %v %v", c, ok, err)
	}
	var s, res authzenEntity
	var a authzenAction
	if _, _, r, ok := readAuthZENFlat(bytes.NewBufferString(`{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf","properties":{"tenant":"acme"}}}`), &s, &a, &res); !ok || r.Properties["tenant"] != "acme" {
		t.Fatalf("AuthZEN: %+v %v", r, ok)
	}
}

// BenchmarkReadCheck: reading the common bodies of /allowed and AuthZEN's
// evaluation, as the handlers hand them over.
func BenchmarkReadCheck(b *testing.B) {
	for _, bc := range []struct {
		name, body string
		read       func(io.Reader) (Check, error)
	}{
		{"allowed", `{"user":"alice","action":"read","resource":{"type":"file","key":"report.pdf","tenant":"acme"}}`, ReadPermit},
		{"evaluation", `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf","properties":{"tenant":"acme"}}}`, ReadAuthZEN},
	} {
		b.Run(bc.name, func(b *testing.B) {
			body := []byte(bc.body)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.read(bytes.NewBuffer(body)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
