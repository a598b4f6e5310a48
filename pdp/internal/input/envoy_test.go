package input

import (
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/nexuspdp/nexus/pdp/internal/prune"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// reference builds the input document the slow, obvious way: protojson for
// the attributes, then the parsed fields as opa-envoy-plugin defines them.
func reference(t *testing.T, req *authv3.CheckRequest) map[string]any {
	t.Helper()
	js, err := protojson.Marshal(req)
	if err != nil {
		t.Fatalf("protojson: %v", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatalf("unmarshal protojson: %v", err)
	}
	h := req.GetAttributes().GetRequest().GetHttp()
	rawPath, rawQuery, _ := strings.Cut(h.GetPath(), "?")
	decoded, err := url.PathUnescape(rawPath)
	if err != nil {
		t.Fatalf("path: %v", err)
	}
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	var pp []any
	for _, s := range strings.Split(strings.TrimLeft(decoded, "/"), "/") {
		pp = append(pp, s)
	}
	doc["parsed_path"] = pp
	pq := map[string]any{}
	for k, vs := range query {
		var l []any
		for _, v := range vs {
			l = append(l, v)
		}
		pq[k] = l
	}
	doc["parsed_query"] = pq
	doc["parsed_body"] = nil
	doc["truncated_body"] = false
	ct := h.GetHeaders()["content-type"]
	body := h.GetBody()
	switch {
	case body == "":
	case strings.Contains(ct, "application/json"):
		var v any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("body: %v", err)
		}
		doc["parsed_body"] = v
	case strings.Contains(ct, "application/x-www-form-urlencoded"):
		vals, _ := url.ParseQuery(body)
		m := map[string]any{}
		for k, vs := range vals {
			var l []any
			for _, v := range vs {
				l = append(l, v)
			}
			m[k] = l
		}
		doc["parsed_body"] = m
	}
	doc["version"] = map[string]any{"encoding": "protojson", "ext_authz": "v3"}
	return doc
}

func istioRequest() *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{
			Address:   &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "10.0.0.7", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 51234}}}},
			Principal: "spiffe://cluster.local/ns/default/sa/frontend",
			Labels:    map[string]string{"app": "frontend"},
		},
		Destination: &authv3.AttributeContext_Peer{
			Address:   &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "10.0.0.9", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080}}}},
			Principal: "spiffe://cluster.local/ns/default/sa/drive",
		},
		Request: &authv3.AttributeContext_Request{
			Time: &timestamppb.Timestamp{Seconds: 1764450000, Nanos: 123000000},
			Http: &authv3.AttributeContext_HttpRequest{
				Id:     "8a7f1c2e",
				Method: "POST",
				Headers: map[string]string{
					":authority":              "drive.example.com",
					":method":                 "POST",
					":path":                   "/folders/d1?x=1&x=2&y=%2F",
					"content-type":            "application/json",
					"x-forwarded-client-cert": `By=spiffe://cluster.local/ns/default/sa/drive;Hash=abc;Subject="";URI=spiffe://cluster.local/ns/default/sa/frontend`,
					"x-user":                  "alice <admin> & \"co\"\n",
				},
				Path:     "/folders/d1?x=1&x=2&y=%2F",
				Host:     "drive.example.com",
				Scheme:   "https",
				Size:     17,
				Protocol: "HTTP/2",
				Body:     `{"name": "q1",  "n": [1, 2.5]}`,
			},
		},
		ContextExtensions: map[string]string{"tenant": "acme"},
		MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"envoy.filters.http.jwt_authn": {Fields: map[string]*structpb.Value{"sub": structpb.NewStringValue("alice")}},
		}},
		TlsSession: &authv3.AttributeContext_TLSSession{Sni: "drive.example.com"},
	}}
}

func TestAppendEnvoyMatchesReference(t *testing.T) {
	tests := []struct {
		name string
		req  *authv3.CheckRequest
	}{
		{"empty", &authv3.CheckRequest{}},
		{"istio", istioRequest()},
		{"form", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: "POST", Path: "/login", Headers: map[string]string{"content-type": "application/x-www-form-urlencoded"}, Body: "user=bob&scope=a&scope=b",
		}}}}},
		{"pipe-and-query-fields", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: "/run/sock"}}}},
			Request: &authv3.AttributeContext_Request{Time: &timestamppb.Timestamp{Seconds: 5, Nanos: 1500}, Http: &authv3.AttributeContext_HttpRequest{
				Path: "/", Query: "legacy", RawBody: []byte{0, 1, 2}, Size: -1,
			}},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AppendEnvoy(nil, tt.req, Options{})
			if err != nil {
				t.Fatalf("AppendEnvoy: %v", err)
			}
			var doc map[string]any
			if err := json.Unmarshal(got, &doc); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, got)
			}
			if want := reference(t, tt.req); !reflect.DeepEqual(doc, want) {
				g, _ := json.MarshalIndent(doc, "", " ")
				w, _ := json.MarshalIndent(want, "", " ")
				t.Fatalf("input differs from reference\ngot:  %s\nwant: %s", g, w)
			}
			again, _ := AppendEnvoy(nil, tt.req, Options{})
			if string(again) != string(got) {
				t.Fatalf("encoding is not deterministic")
			}
		})
	}
}

func TestAppendEnvoyErrors(t *testing.T) {
	withHTTP := func(h *authv3.AttributeContext_HttpRequest) *authv3.CheckRequest {
		return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: h}}}
	}
	tests := []struct {
		name string
		req  *authv3.CheckRequest
		want error
	}{
		{"bad-utf8-header", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"x": "\xff"}}), ErrInvalidUTF8},
		{"bad-utf8-path", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/\xfe"}), ErrInvalidUTF8},
		{"bad-path", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/a%zz"}), ErrInvalidPath},
		{"bad-json-body", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "application/json"}, Body: "{"}), ErrInvalidBody},
		{"bad-content-length", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "application/json", "content-length": "x"}, Body: "{}"}), ErrInvalidBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := AppendEnvoy(nil, tt.req, Options{})
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestTruncatedBody(t *testing.T) {
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
		Path: "/", Headers: map[string]string{"content-type": "application/json", "content-length": "100"}, Body: `{"a":`,
	}}}}
	got, err := AppendEnvoy(nil, req, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Truncated bool `json:"truncated_body"`
		Body      any  `json:"parsed_body"`
	}
	if err := json.Unmarshal(got, &doc); err != nil {
		t.Fatal(err)
	}
	if !doc.Truncated || doc.Body != nil {
		t.Fatalf("truncated=%v body=%v, want true and null", doc.Truncated, doc.Body)
	}
}

func FuzzAppendEnvoy(f *testing.F) {
	f.Add("/folders/d1?x=1", "GET", "content-type", "application/json", `{"a":1}`, "alice", int64(3), int32(0), []byte(nil))
	f.Add("/", "POST", "content-type", "application/x-www-form-urlencoded", "a=b&c", "", int64(-1), int32(999), []byte(nil))
	f.Add("/", "POST", "content-type", "application/json", "", "", int64(0), int32(0), []byte("{\"a\":\"\xff\"}"))
	f.Fuzz(func(t *testing.T, path, method, hk, hv, body, principal string, secs int64, nanos int32, rawBody []byte) {
		req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Source: &authv3.AttributeContext_Peer{Principal: principal},
			Request: &authv3.AttributeContext_Request{
				Time: &timestamppb.Timestamp{Seconds: secs % 1e10, Nanos: (nanos%1e9 + 1e9) % 1e9},
				Http: &authv3.AttributeContext_HttpRequest{Path: path, Method: method, Headers: map[string]string{hk: hv}, Body: body, RawBody: rawBody},
			},
		}}
		got, err := AppendEnvoy(nil, req, Options{})
		if err != nil {
			return // a precise error is an acceptable answer to bad input
		}
		// The engine takes this document as trusted (no JSON scan): it
		// must be JSON and UTF-8 whatever the request held.
		if !json.Valid(got) || !utf8.Valid(got) {
			t.Fatalf("output is not valid UTF-8 JSON: %q", got)
		}
		if len(rawBody) > 0 {
			return // the reference reads the body field only
		}
		var doc map[string]any
		if err := json.Unmarshal(got, &doc); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, got)
		}
		if want := reference(t, req); !reflect.DeepEqual(doc, want) {
			t.Fatalf("input differs from reference\ngot:  %v\nwant: %v", doc, want)
		}
	})
}

func BenchmarkAppendEnvoy(b *testing.B) {
	req := istioRequest()
	req.Attributes.MetadataContext = nil
	req.Attributes.TlsSession = nil
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = AppendEnvoy(buf[:0], req, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkProtojsonReference(b *testing.B) {
	req := istioRequest()
	req.Attributes.MetadataContext = nil
	req.Attributes.TlsSession = nil
	b.ReportAllocs()
	for b.Loop() {
		js, _ := protojson.Marshal(req)
		var m map[string]any
		_ = json.Unmarshal(js, &m)
	}
}

// FuzzAppendHTTP: the forward-auth document is always UTF-8 JSON, or a
// precise error.
func FuzzAppendHTTP(f *testing.F) {
	f.Add("/folders/d1?x=1", "GET", "x-user", "alice", `{"a":1}`, "application/json", "10.0.0.1:5")
	f.Add("//a;b?c=%zz", "POST", "x", "\xff", "a=b", "application/x-www-form-urlencoded", "")
	f.Fuzz(func(t *testing.T, path, method, hk, hv, body, ct, source string) {
		h := &HTTP{Method: method, Path: path, Headers: map[string]string{hk: hv, "content-type": ct}, Body: body}
		for _, keep := range []*prune.Tree{nil, prune.New([][]string{{"parsed_path"}, {"attributes", "request", "http", "headers", hk}})} {
			got, err := AppendHTTP(nil, h, source, Options{Keep: keep})
			if err != nil {
				continue
			}
			if !json.Valid(got) || !utf8.Valid(got) {
				t.Fatalf("output is not valid UTF-8 JSON: %q", got)
			}
		}
	})
}

// jwtRequest is istioRequest as it reaches nexus behind Envoy's jwt_authn
// filter: the verified token's payload in the metadata context.
func jwtRequest() *authv3.CheckRequest {
	req := istioRequest()
	req.Attributes.TlsSession = nil
	payload, err := structpb.NewStruct(map[string]any{
		"iss": "https://issuer.example.com", "sub": "alice", "aud": []any{"drive"},
		"exp": 1764453600.0, "iat": 1764450000.0, "groups": []any{"eng", "admins"},
		"tenant": map[string]any{"id": "acme", "plan": "pro"},
	})
	if err != nil {
		panic(err)
	}
	req.Attributes.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"envoy.filters.http.jwt_authn": {Fields: map[string]*structpb.Value{"payload": structpb.NewStructValue(payload)}},
	}}
	return req
}

// BenchmarkAppendEnvoyJWT: the whole document and the default policy's
// part of it for a request with a verified JWT.
func BenchmarkAppendEnvoyJWT(b *testing.B) {
	req := jwtRequest()
	buf := make([]byte, 0, 4096)
	for _, bc := range []struct {
		name string
		keep *prune.Tree
	}{{"whole", nil}, {"keep", prune.New(keepTrees["default-policy"])}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if buf, err = AppendEnvoy(buf[:0], req, Options{Keep: bc.keep}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
