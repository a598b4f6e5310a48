package result

import (
	"errors"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestParseEnvoy holds ParseEnvoy to what opa-envoy-plugin reads of a
// result (envoyauth's EvalResult, as internal.check calls it): which
// members it reads on allow and on deny, their types, the default status.
func TestParseEnvoy(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		want    Decision
		wantErr bool
	}{
		{name: "true", doc: "true", want: Decision{Allowed: true}},
		{name: "false", doc: "false", want: Decision{}},
		{name: "bare-object", doc: `{"allowed":true}`, want: Decision{Allowed: true, Object: true}},
		{name: "denied-object-default-status", doc: `{"allowed":false}`, want: Decision{Object: true, HTTPStatus: 403}},
		{name: "allowed-all", doc: `{"allowed":true,"headers":{"x-b":["2","1"],"x-a":"0"},"response_headers_to_add":[{"z":"1"},{"a":"2","b":["3"]}],
			"request_headers_to_remove":["cookie"],"query_parameters_to_set":{"q":["1","2"],"a":"b"},"query_parameters_to_remove":["token"],
			"body":5,"http_status":"ignored on allow","reason":"rbac","subject":7}`,
			want: Decision{Allowed: true, Object: true, Reason: "rbac",
				Headers:                 []Header{{"x-a", "0"}, {"x-b", "2"}, {"x-b", "1"}},
				ResponseHeadersToAdd:    []Header{{"z", "1"}, {"a", "2"}, {"b", "3"}},
				RequestHeadersToRemove:  []string{"cookie"},
				QueryParametersToSet:    []QueryParameter{{"a", "b"}, {"q", "1"}, {"q", "2"}},
				QueryParametersToRemove: []string{"token"},
			}},
		{name: "denied-all", doc: `{"allowed":false,"headers":[{"www-authenticate":"Bearer"}],"body":"no","http_status":401,
			"request_headers_to_remove":7,"response_headers_to_add":7,"query_parameters_to_set":7,"query_parameters_to_remove":7}`,
			want: Decision{Object: true, HTTPStatus: 401, Body: "no", Headers: []Header{{"www-authenticate", "Bearer"}}}},
		{name: "empty-lists", doc: `{"allowed":true,"request_headers_to_remove":[],"headers":{"x":[]},"query_parameters_to_set":{}}`,
			want: Decision{Allowed: true, Object: true, RequestHeadersToRemove: []string{}}},
		{name: "metadata", doc: `{"allowed":false,"http_status":500,"dynamic_metadata":{"n":1,"l":[true,null,"s"]}}`,
			want: Decision{Object: true, HTTPStatus: 500, DynamicMetadata: mustStruct(map[string]any{"n": 1, "l": []any{true, nil, "s"}})}},
		{name: "allow-alias-is-not-allowed", doc: `{"allow":true}`, wantErr: true},
		{name: "allowed-string", doc: `{"allowed":"true"}`, wantErr: true},
		{name: "string", doc: `"yes"`, wantErr: true},
		{name: "number", doc: `1`, wantErr: true},
		{name: "null", doc: `null`, wantErr: true},
		{name: "array", doc: `[true]`, wantErr: true},
		{name: "header-number", doc: `{"allowed":true,"headers":{"x":1}}`, wantErr: true},
		{name: "header-array-number", doc: `{"allowed":false,"headers":{"x":["a",1]}}`, wantErr: true},
		{name: "headers-array-of-strings", doc: `{"allowed":true,"headers":["x"]}`, wantErr: true},
		{name: "headers-null", doc: `{"allowed":true,"headers":null}`, wantErr: true},
		{name: "metadata-null", doc: `{"allowed":true,"dynamic_metadata":null}`, wantErr: true},
		{name: "metadata-array", doc: `{"allowed":false,"dynamic_metadata":[]}`, wantErr: true},
		{name: "remove-not-array", doc: `{"allowed":true,"request_headers_to_remove":"cookie"}`, wantErr: true},
		{name: "remove-number", doc: `{"allowed":true,"query_parameters_to_remove":[1]}`, wantErr: true},
		{name: "response-headers-bad", doc: `{"allowed":true,"response_headers_to_add":{"x":true}}`, wantErr: true},
		{name: "query-set-array", doc: `{"allowed":true,"query_parameters_to_set":[{"a":"b"}]}`, wantErr: true},
		{name: "query-set-number", doc: `{"allowed":true,"query_parameters_to_set":{"a":[1]}}`, wantErr: true},
		{name: "body-number", doc: `{"allowed":false,"body":1}`, wantErr: true},
		{name: "status-string", doc: `{"allowed":false,"http_status":"403"}`, wantErr: true},
		{name: "status-float", doc: `{"allowed":false,"http_status":403.5}`, wantErr: true},
		{name: "status-unknown-to-go", doc: `{"allowed":false,"http_status":299}`, wantErr: true},
		{name: "status-unknown-to-envoy", doc: `{"allowed":false,"http_status":418}`, wantErr: true},
		{name: "status-early-hints", doc: `{"allowed":false,"http_status":103}`, wantErr: true},
		{name: "status-null", doc: `{"allowed":false,"http_status":null}`, wantErr: true},
		{name: "garbage", doc: `{`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseEnvoy([]byte(tt.doc))
			if tt.wantErr {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseEnvoy: %v", err)
			}
			if !proto.Equal(got.DynamicMetadata, tt.want.DynamicMetadata) {
				t.Fatalf("dynamic metadata %v, want %v", got.DynamicMetadata, tt.want.DynamicMetadata)
			}
			got.DynamicMetadata, tt.want.DynamicMetadata = nil, nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseEnvoyBoolDoesNotAllocate(t *testing.T) {
	doc := []byte("false")
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseEnvoy(doc) }); n != 0 {
		t.Fatalf("ParseEnvoy(false) allocates %v times", n)
	}
}

func FuzzParseEnvoy(f *testing.F) {
	f.Add([]byte(`{"allowed":true,"headers":[{"a":["b"]}],"query_parameters_to_set":{"q":"1"}}`))
	f.Add([]byte(`{"allowed":false,"http_status":401,"body":"x","dynamic_metadata":{"a":1}}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		d, err := ParseEnvoy(doc)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not wrapped: %v", err)
			}
			return
		}
		if d.Object && !d.Allowed && (d.HTTPStatus < 100 || d.HTTPStatus > 599) {
			t.Fatalf("denied with status %d", d.HTTPStatus)
		}
	})
}
