package result

import (
	"errors"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		want    Decision
		wantErr bool
	}{
		{name: "true", doc: "true", want: Decision{Allowed: true}},
		{name: "false", doc: " false\n", want: Decision{}},
		{name: "object", doc: `{"allowed":false,"http_status":401,"body":"who are you","headers":{"x-a":"1","x-b":["2","3"]},"reason":"no_subject","subject":"bob"}`,
			want: Decision{Object: true, HTTPStatus: 401, Body: "who are you", Reason: "no_subject", Subject: "bob", Headers: []Header{{"x-a", "1"}, {"x-b", "2"}, {"x-b", "3"}}}},
		{name: "allow-alias", doc: `{"allow":true,"request_headers_to_remove":["cookie"],"response_headers_to_add":{"x-r":"y"}}`,
			want: Decision{Allowed: true, Object: true, RequestHeadersToRemove: []string{"cookie"}, ResponseHeadersToAdd: []Header{{"x-r", "y"}}}},
		{name: "metadata", doc: `{"allowed":true,"dynamic_metadata":{"k":1,"s":{"t":["u",true,null]}}}`, want: Decision{Allowed: true, Object: true, DynamicMetadata: mustStruct(map[string]any{"k": 1, "s": map[string]any{"t": []any{"u", true, nil}}})}},
		{name: "no-allowed", doc: `{"headers":{}}`, wantErr: true},
		{name: "string", doc: `"yes"`, wantErr: true},
		{name: "bad-status", doc: `{"allowed":false,"http_status":42}`, wantErr: true},
		{name: "float-status", doc: `{"allowed":false,"http_status":403.5}`, wantErr: true},
		{name: "bad-header", doc: `{"allowed":true,"headers":{"x":1}}`, wantErr: true},
		{name: "bad-metadata", doc: `{"allowed":true,"dynamic_metadata":[1]}`, wantErr: true},
		{name: "garbage", doc: `{`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.doc))
			if tt.wantErr {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !proto.Equal(got.DynamicMetadata, tt.want.DynamicMetadata) {
				t.Fatalf("dynamic metadata %v, want %v", got.DynamicMetadata, tt.want.DynamicMetadata)
			}
			got.DynamicMetadata, tt.want.DynamicMetadata = nil, nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func mustStruct(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}

func TestParseBoolDoesNotAllocate(t *testing.T) {
	doc := []byte("true")
	if n := testing.AllocsPerRun(100, func() { _, _ = Parse(doc) }); n != 0 {
		t.Fatalf("Parse(true) allocates %v times", n)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"allowed":true,"headers":{"a":["b"]}}`))
	f.Add([]byte(`true`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		d, err := Parse(doc)
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("error not wrapped: %v", err)
		}
		if err == nil && d.HTTPStatus != 0 && (d.HTTPStatus < 100 || d.HTTPStatus > 599) {
			t.Fatalf("status %d accepted", d.HTTPStatus)
		}
	})
}
