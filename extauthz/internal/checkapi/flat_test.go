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
	f, ok := readFlat(bytes.NewBufferString(`{"user":"alice","action":"read","resource":{"type":"file","key":"report.pdf","tenant":"acme"}}`))
	if !ok {
		t.Fatal("a Permit body is not flat")
	}
	if c, ok, err := readPermitFlat(f); !ok || err != nil || c.Subject.ID != "alice" || c.Resource.Tenant != "acme" {
		t.Fatalf("Permit: %+v %v %v", c, ok, err)
	}
	f, ok = readFlat(bytes.NewBufferString(`{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf","properties":{"tenant":"acme"}}}`))
	if !ok {
		t.Fatal("an AuthZEN body is not flat")
	}
	if req, ok := readAuthZENFlat(f); !ok || req.Resource.Properties["tenant"] != "acme" {
		t.Fatalf("AuthZEN: %+v %v", req, ok)
	}
}
