package envoygrpc_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nexuspdp/nexus/extauthz/internal/envoygrpc"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// istioRequest is a CheckRequest as an Istio sidecar sends it: a dozen
// headers, peers with SPIFFE principals, a context extension and JWT
// metadata.
func istioRequest(tb testing.TB) *authv3.CheckRequest {
	tb.Helper()
	sock := func(ip string, port uint32) *corev3.Address {
		return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
	}
	md, err := structpb.NewStruct(map[string]any{"jwt_payload": map[string]any{"sub": "alice", "exp": 4102444800}})
	if err != nil {
		tb.Fatal(err)
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Address: sock("10.244.0.12", 45678), Principal: "spiffe://cluster.local/ns/default/sa/web"},
		Destination: &authv3.AttributeContext_Peer{Address: sock("10.244.0.19", 8080), Principal: "spiffe://cluster.local/ns/default/sa/drive"},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "8421379", Method: "GET", Path: "/files/report.pdf?x=1", Host: "drive.default.svc.cluster.local:8080",
			Scheme: "http", Protocol: "HTTP/1.1", Headers: map[string]string{
				":authority": "drive.default.svc.cluster.local:8080", ":method": "GET", ":path": "/files/report.pdf?x=1", ":scheme": "http",
				"x-forwarded-proto": "http", "x-request-id": "0d6f6c5e-1d5b-4b0e-8f7a-6b3c2f1e0a9d",
				"x-forwarded-client-cert": "By=spiffe://cluster.local/ns/default/sa/drive;Hash=4b1c;URI=spiffe://cluster.local/ns/default/sa/web",
				"x-envoy-attempt-count":   "1", "user-agent": "Go-http-client/1.1", "x-user": "bob", "": "empty key",
			},
			Body: `{"a":1}`,
		}},
		ContextExtensions: map[string]string{"virtual_host": "inbound|http|8080", "k": ""},
		MetadataContext:   &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.filters.http.jwt_authn": md}},
	}}
}

// checkRequestSeeds are wire forms the decoder must agree with
// proto.Unmarshal on: requests as proxies send them and shapes it leaves
// to proto.Unmarshal.
func checkRequestSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	marshal := func(m proto.Message) []byte {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	istio := marshal(istioRequest(tb))
	entry := func(k, v string) []byte { // a headers entry, wrapped up to a CheckRequest
		e := protowire.AppendTag(nil, 1, protowire.BytesType)
		e = protowire.AppendString(e, k)
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendString(e, v)
		return wrap(1, wrap(4, wrap(2, wrap(3, e))))
	}
	return [][]byte{
		istio,
		marshal(fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob"})),
		marshal(&authv3.CheckRequest{}),
		marshal(&authv3.CheckRequest{Attributes: &authv3.AttributeContext{}}),
		marshal(&authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{}}}),
		append(append([]byte{}, istio...), istio...), // every field twice: merged
		entry("x-user", "bob"),
		append(entry("x-user", "bob"), entry("x-user", "mallory")...), // the request twice
		entry("x-user", "\xff"),              // invalid UTF-8
		append(entry("a", "b"), 0x08, 0x01),  // an unknown varint field
		entry("x-user", "bob")[:10],          // truncated
		{0x0a, 0x02, 0x22, 0x00, 0x0a, 0x00}, // attributes twice
		{0x08, 0x01},                         // attributes as a varint
		// Every field the decoder reads itself, and shapes next to them
		// it leaves to proto.Unmarshal.
		marshal(&authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "10.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 0}}}},
				Service: "web", Labels: map[string]string{"app": "web", "": ""}, Principal: "p", Certificate: "c"},
			Destination: &authv3.AttributeContext_Peer{},
			Request: &authv3.AttributeContext_Request{Time: timestamppb.New(time.Unix(1700000000, 123)), Http: &authv3.AttributeContext_HttpRequest{
				Id: "1", Method: "POST", Path: "/p", Host: "h", Scheme: "https", Query: "q=1", Fragment: "f", Size: -1, Protocol: "HTTP/2", Body: "b", RawBody: []byte{0, 0xff},
				HeaderMap: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "k", Value: "v"}}}}},
		}}),
		marshal(&authv3.CheckRequest{Attributes: &authv3.AttributeContext{ // a pipe, a named port: left to proto
			Source:      &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: "/run/s"}}}},
			Destination: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "::1", PortSpecifier: &corev3.SocketAddress_NamedPort{NamedPort: "http"}}}}},
		}}),
		wrap(1, wrap(4, wrap(2, slices.Concat( // strings set twice, a method as a varint, a size as bytes
			[]byte{0x12, 0x03}, []byte("GET"), []byte{0x12, 0x03}, []byte("PUT"), []byte{0x10, 0x05}, []byte{0x4a, 0x01, 0x07})))),
		wrap(1, wrap(1, []byte{0x0a, 0x00, 0x0a, 0x00})),                      // a peer's address twice
		wrap(1, wrap(4, wrap(1, []byte{0x08, 0x01, 0x10, 0x02, 0x18, 0x03}))), // a timestamp with an unknown field
		wrap(1, wrap(2, wrap(2, []byte{0x0a, 0x01, 0xff}))),                   // a peer's service not UTF-8
	}
}

func wrap(num protowire.Number, b []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
}

// TestUnmarshalCheckRequest holds the decoder to proto.Unmarshal on the
// seeds.
func TestUnmarshalCheckRequest(t *testing.T) {
	for i, b := range checkRequestSeeds(t) {
		agree(t, i, b)
	}
}

// FuzzUnmarshalCheckRequest holds the decoder to proto.Unmarshal on any
// bytes: both fail, or both give equal messages.
func FuzzUnmarshalCheckRequest(f *testing.F) {
	for _, b := range checkRequestSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { agree(t, 0, b) })
}

func agree(t *testing.T, i int, b []byte) {
	t.Helper()
	var want, got authv3.CheckRequest
	werr := proto.Unmarshal(b, &want)
	gerr := envoygrpc.UnmarshalCheckRequest(b, &got)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("seed %d %x: proto.Unmarshal: %v; UnmarshalCheckRequest: %v", i, b, werr, gerr)
	}
	if werr == nil && !proto.Equal(&want, &got) {
		t.Fatalf("seed %d %x: proto.Unmarshal gives\n%v\nUnmarshalCheckRequest gives\n%v", i, b, &want, &got)
	}
}

// TestCodec decodes a CheckRequest, and any other message, as gRPC's
// protobuf codec does, from a payload in several buffers.
func TestCodec(t *testing.T) {
	c := envoygrpc.NewCodec()
	if c.Name() != "proto" {
		t.Fatalf("codec name %q, want proto", c.Name())
	}
	in := istioRequest(t)
	data, err := c.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	raw := data.Materialize()
	split := mem.BufferSlice{mem.SliceBuffer(raw[:7]), mem.SliceBuffer(raw[7:])}
	var out authv3.CheckRequest
	if err := c.Unmarshal(split, &out); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, &out) {
		t.Fatalf("round trip changed the request:\n%v\n%v", in, &out)
	}
	if got := out.GetAttributes().GetRequest().GetHttp().GetHeaders()["x-user"]; got != "bob" {
		t.Fatalf("x-user header %q, want bob", got)
	}
	resp := &authv3.CheckResponse{DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{"decision_id": structpb.NewStringValue("x")}}}
	data, err = c.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var back authv3.CheckResponse
	if err := c.Unmarshal(data, &back); err != nil || !proto.Equal(resp, &back) {
		t.Fatalf("a CheckResponse through the codec: %v, %v", &back, err)
	}
}

// BenchmarkUnmarshalCheckRequest decodes an Istio-shaped CheckRequest,
// without and with JWT metadata, with proto.Unmarshal and with
// UnmarshalCheckRequest.
func BenchmarkUnmarshalCheckRequest(b *testing.B) {
	plain := istioRequest(b)
	plain.Attributes.MetadataContext = nil
	for _, req := range []struct {
		name string
		msg  *authv3.CheckRequest
	}{{"istio", plain}, {"istio+jwt-metadata", istioRequest(b)}} {
		raw, err := proto.Marshal(req.msg)
		if err != nil {
			b.Fatal(err)
		}
		for _, bc := range []struct {
			name string
			fn   func([]byte, *authv3.CheckRequest) error
		}{
			{"proto.Unmarshal", func(b []byte, m *authv3.CheckRequest) error { return proto.Unmarshal(b, m) }},
			{"UnmarshalCheckRequest", envoygrpc.UnmarshalCheckRequest},
		} {
			b.Run(req.name+"/"+bc.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					var m authv3.CheckRequest
					if err := bc.fn(raw, &m); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestCodecRefusesInvalidUTF8: the server hands the core its requests as
// already checked for UTF-8 (pdp.PDP.EnvoyDecoded), so the codec must
// refuse a request with a string that is not UTF-8 in any field the core
// would otherwise check: every string of the peers, the HTTP request, its
// headers, the context extensions, the metadata and the TLS session.
func TestCodecRefusesInvalidUTF8(t *testing.T) {
	const mark = "Zq7MARKq7Z" // replaced, in the wire form, by bad of the same length
	const bad = "Zq7\xffARKq7Z"
	sock := func(ip string) *corev3.Address {
		return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: ip}}}
	}
	for _, tc := range []struct {
		name string
		set  func(a *authv3.AttributeContext)
	}{
		{"http.id", func(a *authv3.AttributeContext) { a.Request.Http.Id = mark }},
		{"http.method", func(a *authv3.AttributeContext) { a.Request.Http.Method = mark }},
		{"http.path", func(a *authv3.AttributeContext) { a.Request.Http.Path = "/" + mark }},
		{"http.host", func(a *authv3.AttributeContext) { a.Request.Http.Host = mark }},
		{"http.scheme", func(a *authv3.AttributeContext) { a.Request.Http.Scheme = mark }},
		{"http.query", func(a *authv3.AttributeContext) { a.Request.Http.Query = mark }},
		{"http.fragment", func(a *authv3.AttributeContext) { a.Request.Http.Fragment = mark }},
		{"http.protocol", func(a *authv3.AttributeContext) { a.Request.Http.Protocol = mark }},
		{"http.body", func(a *authv3.AttributeContext) { a.Request.Http.Body = mark }},
		{"header value", func(a *authv3.AttributeContext) { a.Request.Http.Headers["x-user"] = mark }},
		{"header name", func(a *authv3.AttributeContext) { a.Request.Http.Headers[mark] = "v" }},
		{"header map", func(a *authv3.AttributeContext) {
			a.Request.Http.HeaderMap = &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "x-user", Value: mark}}}
		}},
		{"context extension value", func(a *authv3.AttributeContext) { a.ContextExtensions["k"] = mark }},
		{"context extension name", func(a *authv3.AttributeContext) { a.ContextExtensions[mark] = "v" }},
		{"source.principal", func(a *authv3.AttributeContext) { a.Source.Principal = mark }},
		{"source.service", func(a *authv3.AttributeContext) { a.Source.Service = mark }},
		{"source.certificate", func(a *authv3.AttributeContext) { a.Source.Certificate = mark }},
		{"source.labels", func(a *authv3.AttributeContext) { a.Source.Labels = map[string]string{"app": mark} }},
		{"source.address", func(a *authv3.AttributeContext) { a.Source.Address = sock(mark) }},
		{"destination.principal", func(a *authv3.AttributeContext) { a.Destination.Principal = mark }},
		{"destination.address", func(a *authv3.AttributeContext) { a.Destination.Address = sock(mark) }},
		{"metadata", func(a *authv3.AttributeContext) {
			a.MetadataContext.FilterMetadata["envoy.filters.http.jwt_authn"].Fields["sub"] = structpb.NewStringValue(mark)
		}},
		{"tls session", func(a *authv3.AttributeContext) { a.TlsSession = &authv3.AttributeContext_TLSSession{Sni: mark} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := istioRequest(t)
			tc.set(req.Attributes)
			good, err := proto.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			c := envoygrpc.NewCodec()
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(good)}, &authv3.CheckRequest{}); err != nil {
				t.Fatalf("the request with valid UTF-8: %v", err)
			}
			i := bytes.Index(good, []byte(mark))
			if i < 0 || bytes.LastIndex(good, []byte(mark)) != i {
				t.Fatalf("the mark is not in the wire form exactly once")
			}
			wire := slices.Concat(good[:i], []byte(bad), good[i+len(mark):])
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &authv3.CheckRequest{}); err == nil {
				t.Fatalf("the codec accepted invalid UTF-8 in %s", tc.name)
			}
		})
	}
}
