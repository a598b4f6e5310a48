package input

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/nexuspdp/nexus/pdp/internal/prune"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

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

// rareRequest has every attribute nexus writes by reflection, and the
// rare fields of those it writes by hand: metadata with typed (Any)
// entries, route metadata, TLS, a header map with raw values, a pipe
// address and a socket address with every field, a zero time.
func rareRequest() *authv3.CheckRequest {
	anyMD, err := anypb.New(&timestamppb.Timestamp{Seconds: 1})
	if err != nil {
		panic(err)
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: "/run/sock", Mode: 0o600}}}},
		Destination: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Protocol: corev3.SocketAddress_UDP, Address: "::1", PortSpecifier: &corev3.SocketAddress_NamedPort{NamedPort: "https"}, Ipv4Compat: true,
			ResolverName: "envoy.resolvers.custom", NetworkNamespaceFilepath: "/var/run/netns/blue",
		}}}},
		Request: &authv3.AttributeContext_Request{Time: &timestamppb.Timestamp{}, Http: &authv3.AttributeContext_HttpRequest{
			Path: "/", Query: "legacy", Fragment: "f", RawBody: []byte{0, 1, 2, 0xff}, Size: -1,
			HeaderMap: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/")}, {Key: "x", Value: "y"}}},
		}},
		MetadataContext: &corev3.Metadata{
			FilterMetadata: map[string]*structpb.Struct{"f": {Fields: map[string]*structpb.Value{
				"n": structpb.NewNumberValue(1234567), "small": structpb.NewNumberValue(0.000001), "neg": structpb.NewNumberValue(-2.5),
				"nan": structpb.NewNumberValue(math.NaN()), "inf": structpb.NewNumberValue(math.Inf(-1)), "null": structpb.NewNullValue(), "unset": {},
				"l":     structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewBoolValue(true), structpb.NewStringValue("s"), {}}}),
				"empty": structpb.NewStructValue(nil), "emptyList": {Kind: &structpb.Value_ListValue{}},
			}}},
			TypedFilterMetadata: map[string]*anypb.Any{"t": anyMD, "empty": {}, "raw": {TypeUrl: "example.com/raw", Value: []byte{0xff, 0}}},
		},
		RouteMetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"r": {}}, TypedFilterMetadata: map[string]*anypb.Any{"raw": {TypeUrl: "example.com/raw", Value: []byte("v")}}},
		TlsSession:           &authv3.AttributeContext_TLSSession{Sni: "a.example.com"},
	}}
}

func withHTTP(h *authv3.AttributeContext_HttpRequest) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: h}}}
}

const multipartBody = "--b\r\nContent-Disposition: form-data; name=\"meta\"\r\nContent-Type: application/json\r\n\r\n{\"a\": [1, 2.50]}\r\n" +
	"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\nhello\r\n" +
	"--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nagain\r\n" +
	"--b\r\nContent-Disposition: attachment\r\n\r\nno name\r\n--b--\r\n"

func bodyRequests() map[string]*authv3.CheckRequest {
	js := map[string]string{"content-type": "application/json"}
	with := func(h map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range h {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	return map[string]*authv3.CheckRequest{
		"form":                withHTTP(&authv3.AttributeContext_HttpRequest{Method: "POST", Path: "/login", Headers: map[string]string{"content-type": "application/x-www-form-urlencoded"}, Body: "user=bob&scope=a&scope=b"}),
		"form-raw":            withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "application/x-www-form-urlencoded; charset=utf-8"}, RawBody: []byte("a=%FF&b=\xfe")}),
		"json-raw":            withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: js, RawBody: []byte(` {"a" : [1, 2.50e3, "x"]} `)}),
		"json-raw-bad-utf8":   withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: js, RawBody: []byte("{\"a\":\"\xff\xed\xa0\x80\",\"b\":1,\"b\":2}")}),
		"json-surrogates":     withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: js, Body: `{"lone":"x\ud800y","pair":"\uD83D\uDE00","esc":"\\ud800"}`}),
		"json-body-wins":      withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: js, Body: `{"from":"body"}`, RawBody: []byte(`{"from":"raw"}`)}),
		"json-patch-type":     withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "application/json-patch+json"}, Body: `[{"op":"add"}]`}),
		"json-scalar":         withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: js, Body: "\t12345678901234567890\n"}),
		"truncated-by-length": withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: with(js, "content-length", "100"), Body: `{"a":`}),
		"length-minus-one":    withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: with(js, "content-length", "-1"), Body: `{"a":1}`}),
		"length-shorter":      withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: with(js, "content-length", "3"), Body: `{"a":1}`}),
		"partial-body":        withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: with(js, "x-envoy-auth-partial-body", "true"), Body: `{"a":`}),
		"partial-any-type":    withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"x-envoy-auth-partial-body": "true"}, Body: "\x00"}),
		"partial-false":       withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: with(js, "x-envoy-auth-partial-body", "false"), Body: `{"a":1}`}),
		"no-content-type":     withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Body: `{"a":1}`}),
		"binary":              withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "image/png"}, RawBody: []byte{0x89, 'P', 'N', 'G', 0xff}}),
		"grpc":                withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/pkg.Svc/Do", Headers: map[string]string{"content-type": "application/grpc"}, RawBody: []byte{0, 0, 0, 0, 1, 8}}),
		"empty-json":          withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: with(js, "content-length", "x")}),
		"multipart":           withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/upload", Headers: map[string]string{"content-type": `multipart/form-data; boundary="b"`}, Body: multipartBody}),
		"multipart-raw":       withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/upload", Headers: map[string]string{"content-type": "multipart/form-data; boundary=b", "content-length": "-1"}, RawBody: []byte(multipartBody)}),
		"multipart-no-parts":  withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/upload", Headers: map[string]string{"content-type": "multipart/form-data; boundary=b"}, Body: "--b--\r\n"}),
		"multipart-no-bound":  withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/upload", Headers: map[string]string{"content-type": "multipart/form-data"}, Body: "whatever"}),
	}
}

func TestAppendEnvoyMatchesReference(t *testing.T) {
	tests := map[string]*authv3.CheckRequest{
		"empty":      {},
		"empty-attr": {Attributes: &authv3.AttributeContext{}},
		"istio":      istioRequest(),
		"jwt":        jwtRequest(),
		"rare":       rareRequest(),
		"zero-port": {Attributes: &authv3.AttributeContext{Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			PortSpecifier: &corev3.SocketAddress_PortValue{},
		}}}}}},
		"empty-address": {Attributes: &authv3.AttributeContext{Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{}}}},
		"time":          {Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Time: &timestamppb.Timestamp{Seconds: -5, Nanos: 1500}}}},
		"nanos-only":    {Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Time: &timestamppb.Timestamp{Nanos: 7}}}},
		"internal-addr": {Attributes: &authv3.AttributeContext{Destination: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_EnvoyInternalAddress{
			EnvoyInternalAddress: &corev3.EnvoyInternalAddress{AddressNameSpecifier: &corev3.EnvoyInternalAddress_ServerListenerName{ServerListenerName: "l"}, EndpointId: "e"},
		}}}}},
	}
	for name, req := range bodyRequests() {
		tests[name] = req
	}
	for name, req := range tests {
		t.Run(name, func(t *testing.T) {
			got := assertReference(t, req, Options{})
			again, _ := AppendEnvoy(nil, req, Options{})
			if string(again) != string(got) {
				t.Fatalf("encoding is not deterministic")
			}
			if !utf8.Valid(got) || !json.Valid(got) {
				t.Fatalf("not UTF-8 JSON: %q", got)
			}
			assertReference(t, req, Options{SkipBody: true})
		})
	}
}

// TestAttributesAsThePluginMapsThem spells out, by hand, the mapping
// decisions the reference makes: what differs from protojson.
func TestAttributesAsThePluginMapsThem(t *testing.T) {
	req := rareRequest()
	req.Attributes.Request.Time = &timestamppb.Timestamp{Seconds: 1764450000, Nanos: 5}
	req.Attributes.Request.Http.Size = 1 << 40
	got, err := AppendEnvoy(nil, req, Options{Keep: prune.New([][]string{{"attributes"}})})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"time":{"seconds":1764450000,"nanos":5}`, // not RFC 3339
		`"size":1099511627776`,                    // int64 as a number
		`"protocol":1`,                            // an enum as its number
		`"namedPort":"https"`,                     // JSON names
		`"rawBody":"AAEC/w=="`,                    // bytes in standard base64
		`"rawValue":"Lw=="`,                       // in a header map too
		`"typeUrl":"type.googleapis.com/google.protobuf.Timestamp","value":"CAE="`, // Any as its fields
		`"n":1.234567e+06`,                 // a Struct's number as OPA holds a float64
		`"nan":"NaN"`, `"inf":"-Infinity"`, // as structpb gives them
		`"unset":null`, `"empty":{}`, `"emptyList":[]`,
		`"filterMetadata":{"r":{}}`,
		`"tlsSession":{"sni":"a.example.com"}`,
		`"mode":384`,
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("document lacks %s\n%s", want, got)
		}
	}
}

func TestAppendEnvoyErrors(t *testing.T) {
	tests := []struct {
		name string
		req  *authv3.CheckRequest
		want error
	}{
		{"bad-utf8-header", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"x": "\xff"}}), ErrInvalidUTF8},
		{"bad-utf8-path", withHTTP(&authv3.AttributeContext_HttpRequest{Path: "/\xfe"}), ErrInvalidUTF8},
		{"bad-utf8-any-type", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{MetadataContext: &corev3.Metadata{
			TypedFilterMetadata: map[string]*anypb.Any{"a": {TypeUrl: "x/\xff"}}}}}, ErrInvalidUTF8},
		{"bad-utf8-any-key", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{RouteMetadataContext: &corev3.Metadata{
			TypedFilterMetadata: map[string]*anypb.Any{"\xfe": {}}}}}, ErrInvalidUTF8},
		{"bad-utf8-named-port", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{
			Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{PortSpecifier: &corev3.SocketAddress_NamedPort{NamedPort: "\xff"}}}}}}}, ErrInvalidUTF8},
		{"bad-utf8-resolver", &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Destination: &authv3.AttributeContext_Peer{Address: &corev3.Address{
			Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "a", ResolverName: "\xff"}}}}}}, ErrInvalidUTF8},
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

// TestRequestErrorCause: a request that does not parse is a RequestError
// whose cause reads as the plugin's parsers (Go's url, strconv and mime,
// OPA's JSON decoding) word it.
func TestRequestErrorCause(t *testing.T) {
	js := map[string]string{"content-type": "application/json"}
	tests := []struct {
		name string
		h    *authv3.AttributeContext_HttpRequest
		kind error
		want string
	}{
		{"path", &authv3.AttributeContext_HttpRequest{Path: "/a%zz"}, ErrInvalidPath, `invalid URL escape "%zz"`},
		{"semicolon", &authv3.AttributeContext_HttpRequest{Path: "/a?x=1;y=2"}, ErrInvalidQuery, "invalid semicolon separator in query"},
		{"query-escape", &authv3.AttributeContext_HttpRequest{Path: "/a?x=%g"}, ErrInvalidQuery, `invalid URL escape "%g"`},
		{"json-eof", &authv3.AttributeContext_HttpRequest{Path: "/", Headers: js, Body: "{"}, ErrInvalidBody, "unexpected EOF"},
		{"json-syntax", &authv3.AttributeContext_HttpRequest{Path: "/", Headers: js, Body: "{nope}"}, ErrInvalidBody, "invalid character 'n' looking for beginning of object key string"},
		{"json-after", &authv3.AttributeContext_HttpRequest{Path: "/", Headers: js, Body: "{} 1"}, ErrInvalidBody, "error: invalid character '1' after top-level value"},
		{"content-length", &authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "application/json", "content-length": "ten"}, Body: "{}"}, ErrInvalidBody, `strconv.ParseInt: parsing "ten": invalid syntax`},
		{"form", &authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "application/x-www-form-urlencoded"}, Body: "a=1;b"}, ErrInvalidBody, "invalid semicolon separator in query"},
		{"multipart-type", &authv3.AttributeContext_HttpRequest{Path: "/", Headers: map[string]string{"content-type": "multipart/form-data; boundary"}, Body: "x"}, ErrInvalidBody, "mime: invalid media parameter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := AppendEnvoy(nil, withHTTP(tt.h), Options{})
			var re *RequestError
			if !errors.As(err, &re) || !errors.Is(err, tt.kind) {
				t.Fatalf("err = %v, want a RequestError of %v", err, tt.kind)
			}
			if got := re.Cause.Error(); got != tt.want {
				t.Fatalf("cause %q, want %q", got, tt.want)
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

// FuzzAppendEnvoy: for any request the document is the plugin's, and
// nexus refuses exactly the requests the plugin refuses (besides strings
// that are not UTF-8, which a CheckRequest over gRPC cannot hold).
func FuzzAppendEnvoy(f *testing.F) {
	f.Add("/folders/d1?x=1", "GET", "application/json", "content-length", "7", `{"a":1}`, "alice", int64(3), int32(0), []byte(nil))
	f.Add("/", "POST", "application/x-www-form-urlencoded", "x", "", "a=b&c", "", int64(-1), int32(999), []byte(nil))
	f.Add("/", "POST", "application/json", "x-envoy-auth-partial-body", "true", "", "", int64(0), int32(0), []byte("{\"a\":\"\xff\"}"))
	f.Add("/up", "POST", "multipart/form-data; boundary=b", "content-length", "-1", multipartBody, "", int64(0), int32(0), []byte(nil))
	f.Add("/%2e?a=%ff", "PUT", "application/json; charset=utf-8", "x", "", ` [1, "\ud800", {"a":{"a":2e5}}]`, "p", int64(0), int32(0), []byte(nil))
	f.Fuzz(func(t *testing.T, path, method, ct, hk, hv, body, principal string, secs int64, nanos int32, rawBody []byte) {
		req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Source: &authv3.AttributeContext_Peer{Principal: principal},
			Request: &authv3.AttributeContext_Request{
				Time: &timestamppb.Timestamp{Seconds: secs, Nanos: nanos},
				Http: &authv3.AttributeContext_HttpRequest{Path: path, Method: method, Headers: map[string]string{"content-type": ct, hk: hv}, Body: body, RawBody: rawBody},
			},
		}}
		got, err := AppendEnvoy(nil, req, Options{})
		for _, s := range []string{path, method, ct, hk, hv, body, principal} {
			if !utf8.ValidString(s) {
				if !errors.Is(err, ErrInvalidUTF8) {
					t.Fatalf("a string that is not UTF-8: err = %v", err)
				}
				return
			}
		}
		if _, refErr := refDoc(req, false); (err == nil) != (refErr == nil) {
			t.Fatalf("nexus err = %v, the plugin's = %v", err, refErr)
		}
		if err != nil {
			return
		}
		// The engine takes this document as trusted (no JSON scan).
		assertEngineReads(t, got)
		assertReference(t, req, Options{})
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
