package envoygrpc

import (
	"errors"
	"math"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nexuspdp/nexus/pdp"
)

// decision builds a pdp.Decision (its result type is internal to pdp).
func decision(allowed, object bool, set func(*pdp.Decision)) pdp.Decision {
	var d pdp.Decision
	d.Allowed, d.Object, d.ID = allowed, object, "3f2a9c1e-0000-4000-8000-00000000002a"
	if set != nil {
		set(&d)
	}
	return d
}

// dynamicMetadata is a Struct with every kind of value, zero values,
// empty keys and strings, nesting and a list.
func dynamicMetadata(tb testing.TB) *structpb.Struct {
	tb.Helper()
	s, err := structpb.NewStruct(map[string]any{
		"": "empty key", "empty": "", "zero": 0.0, "neg": -1.5, "big": math.MaxFloat64, "no": false, "yes": true, "nil": nil,
		"nested": map[string]any{"a": map[string]any{"b": []any{1.0, "x", nil, false, map[string]any{}, []any{}}}},
		"list":   []any{}, "obj": map[string]any{}, "utf8": "é∑😀",
	})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// encodedResponses are the CheckResponses nexus answers with: the
// decisions' (boolean and object results, allowed and denied, every
// field set or empty), a request that does not parse, a revision not
// reached.
func encodedResponses(tb testing.TB) map[string]*authv3.CheckResponse {
	tb.Helper()
	md := dynamicMetadata(tb)
	hs := []pdp.Header{{Key: "x-nexus-subject", Value: "alice"}, {Key: "x-nexus-decision", Value: "rbac"}, {Key: "", Value: ""}, {Key: "k", Value: strings.Repeat("v", 300)}}
	rs := map[string]*authv3.CheckResponse{
		"bool allow":   checkResponse(decision(true, false, nil)),
		"bool deny":    checkResponse(decision(false, false, nil)),
		"bool no id":   checkResponse(decision(true, false, func(d *pdp.Decision) { d.ID = "" })),
		"object allow": checkResponse(decision(true, true, func(d *pdp.Decision) { d.Headers = hs[:2] })),
		"object allow all": checkResponse(decision(true, true, func(d *pdp.Decision) {
			d.Headers, d.ResponseHeadersToAdd = hs, hs[1:]
			d.RequestHeadersToRemove = []string{"authorization", ""}
			d.QueryParametersToSet = []pdp.QueryParameter{{Key: "a", Value: "1"}, {Key: "", Value: ""}}
			d.QueryParametersToRemove = []string{"token", ""}
			d.DynamicMetadata = md
		})),
		"object allow empty": checkResponse(decision(true, true, nil)),
		"object deny":        checkResponse(decision(false, true, func(d *pdp.Decision) { d.HTTPStatus, d.Body, d.Headers = 403, "forbidden", hs[1:2] })),
		"object deny long body": checkResponse(decision(false, true, func(d *pdp.Decision) {
			d.HTTPStatus, d.Body, d.DynamicMetadata = 451, strings.Repeat("b", 70_000), md
		})),
		"object deny no status": checkResponse(decision(false, true, nil)),
		"request parse":         requestParseResponse(errors.New("bad path")),
		"negative status code":  {Status: &rpcstatus.Status{Code: -7, Message: "m"}},
		"empty":                 {},
	}
	// atRevision's shape: a status with a message, a denied response
	// with a status, one header and a body.
	rs["revision"] = &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: 7, Message: "revision_unavailable: not reached"},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
			Headers: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-nexus-reason", Value: "revision_unavailable"}}},
			Body:    "revision_unavailable: not reached",
		}},
	}
	return rs
}

// TestEncodeCheckResponse: every response nexus answers with is encoded
// by the generated encoder when built with the vtprotobuf tag (by
// protobuf-go without it), to exactly proto.Size's length, and decodes to
// a message equal to the one encoded.
func TestEncodeCheckResponse(t *testing.T) {
	for name, r := range encodedResponses(t) {
		bs, ok, err := marshalCheckResponse(r)
		if ok != generatedEncoder {
			t.Errorf("%s: marshalCheckResponse took it: %v, want %v", name, ok, generatedEncoder)
		}
		if ok {
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			n := bs.Len()
			bs.Free()
			if want := proto.Size(r); n != want {
				t.Errorf("%s: size %d, proto.Size %d", name, n, want)
			}
		}
		assertEncodes(t, name, r)
	}
}

// TestEncodeCheckResponseFallback: a response with fields nexus never
// sets, or a string that is not UTF-8 (which protobuf-go refuses and the
// generated encoder does not check), encodes as protobuf-go encodes it,
// or is refused as protobuf-go refuses it.
func TestEncodeCheckResponseFallback(t *testing.T) {
	detail, err := anypb.New(&rpcstatus.Status{Code: 1})
	if err != nil {
		t.Fatal(err)
	}
	const depth = 20
	deep := structpb.NewStringValue("leaf")
	for range depth {
		deep = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"d": deep}})
	}
	deepList := structpb.NewStringValue("leaf")
	for range depth {
		deepList = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{deepList}})
	}
	hv := &corev3.HeaderValue{Key: "k", Value: "v"}
	ok := func(o *authv3.OkHttpResponse) *authv3.CheckResponse {
		return &authv3.CheckResponse{HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: o}}
	}
	for name, r := range map[string]*authv3.CheckResponse{
		"status details": {Status: &rpcstatus.Status{Code: 7, Details: []*anypb.Any{detail}}},
		"error response": {HttpResponse: &authv3.CheckResponse_ErrorResponse{ErrorResponse: &authv3.DeniedHttpResponse{Body: "x"}}},
		"append":         ok(&authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{{Header: hv, Append: wrapperspb.Bool(true)}}}),
		"append action":  ok(&authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{{Header: hv, AppendAction: corev3.HeaderValueOption_ADD_IF_ABSENT}}}),
		"keep empty":     ok(&authv3.OkHttpResponse{ResponseHeadersToAdd: []*corev3.HeaderValueOption{{Header: hv, KeepEmptyValue: true}}}),
		"raw value":      ok(&authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "k", RawValue: []byte("v")}}}}),
		//lint:ignore SA1019 the deprecated field must encode too
		"ok metadata":       ok(&authv3.OkHttpResponse{DynamicMetadata: &structpb.Struct{}}),
		"deep struct":       {DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{"d": deep}}},
		"deep list":         {DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{"d": deepList}}},
		"not utf-8 body":    {HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{Body: "\xff"}}},
		"not utf-8 key":     {DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{"\xc3": structpb.NewNullValue()}}},
		"not utf-8 header":  ok(&authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "k", Value: "\xe2\x82"}}}}),
		"not utf-8 removed": ok(&authv3.OkHttpResponse{QueryParametersToRemove: []string{"\x80"}}),
		"not utf-8 status":  {Status: &rpcstatus.Status{Code: 7, Message: "\xff"}},
		"not utf-8 deep": {DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{"l": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{
			structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"s": structpb.NewStringValue("\xfe")}})}})}}},
		"not utf-8 error response": {HttpResponse: &authv3.CheckResponse_ErrorResponse{ErrorResponse: &authv3.DeniedHttpResponse{Body: "\xff"}}},
		"not utf-8 query set":      ok(&authv3.OkHttpResponse{QueryParametersToSet: []*corev3.QueryParameter{{Key: "\xff"}}}),
	} {
		assertEncodes(t, name, r)
	}
}

// assertEncodes: the codec's bytes for r decode to r, or, for a response
// protobuf-go refuses to encode (a string that is not UTF-8), the codec
// refuses too.
func assertEncodes(t *testing.T, name string, r *authv3.CheckResponse) {
	t.Helper()
	bs, err := NewCodec().Marshal(r)
	if _, werr := proto.Marshal(r); werr != nil {
		if err == nil {
			bs.Free()
			t.Errorf("%s: encoded what protobuf-go refuses (%v)", name, werr)
		}
		return
	}
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	b := bs.Materialize()
	bs.Free()
	var got authv3.CheckResponse
	if err := proto.Unmarshal(b, &got); err != nil {
		t.Errorf("%s: the encoding does not decode: %v", name, err)
		return
	}
	if !proto.Equal(&got, r) {
		t.Errorf("%s: decoded\n%v\nwant\n%v", name, &got, r)
	}
}

// FuzzEncodeCheckResponse: a decision with any headers, body, status and
// metadata strings is answered with bytes that decode to its response.
func FuzzEncodeCheckResponse(f *testing.F) {
	f.Add(true, true, "x-nexus-subject", "alice", "", 403, "k", 1.5)
	f.Add(false, true, "", "", "denied\x00", -1, "", 0.0)
	f.Add(false, false, "k", strings.Repeat("v", 200), "b", 0, "é", math.Inf(1))
	f.Fuzz(func(t *testing.T, allowed, object bool, key, value, body string, status int, mdKey string, num float64) {
		md := &structpb.Struct{Fields: map[string]*structpb.Value{
			mdKey: structpb.NewStringValue(value), "n": structpb.NewNumberValue(num),
			"s": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{key: structpb.NewBoolValue(allowed)}}),
			"l": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue(body), structpb.NewNullValue()}}),
		}}
		r := checkResponse(decision(allowed, object, func(d *pdp.Decision) {
			d.Headers = []pdp.Header{{Key: key, Value: value}, {Key: value, Value: key}}
			d.ResponseHeadersToAdd = d.Headers[:1]
			d.RequestHeadersToRemove = []string{key, body}
			d.QueryParametersToSet = []pdp.QueryParameter{{Key: key, Value: body}}
			d.QueryParametersToRemove = []string{value}
			d.HTTPStatus, d.Body, d.DynamicMetadata = status, body, md
		}))
		if _, err := proto.Marshal(r); err != nil {
			assertEncodes(t, "fuzzed, not UTF-8", r)
			return
		}
		bs, err := NewCodec().Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		n := bs.Len()
		bs.Free()
		if want := proto.Size(r); n != want {
			t.Fatalf("size %d, proto.Size %d", n, want)
		}
		// proto.Equal compares NaNs as unequal; the bytes are what is
		// compared then.
		if math.IsNaN(num) {
			md.Fields["n"] = structpb.NewNumberValue(0)
		}
		assertEncodes(t, "fuzzed", r)
	})
}

// BenchmarkMarshalCheckResponse compares the codec's encoding of the
// answers nexus sends most (an allow with the subject and reason headers,
// a denial with a status and reason, each with a decision ID) with
// protobuf-go's, which Codec used before.
func BenchmarkMarshalCheckResponse(b *testing.B) {
	hs := []pdp.Header{{Key: "x-nexus-subject", Value: "alice"}, {Key: "x-nexus-decision", Value: "rbac"}}
	for _, rc := range []struct {
		name string
		r    *authv3.CheckResponse
	}{
		{"allow", checkResponse(decision(true, true, func(d *pdp.Decision) { d.Headers = hs }))},
		{"deny", checkResponse(decision(false, true, func(d *pdp.Decision) { d.HTTPStatus, d.Body, d.Headers = 403, "not_allowed", hs[1:] }))},
	} {
		b.Run(rc.name+"/codec", func(b *testing.B) {
			c := NewCodec()
			b.ReportAllocs()
			for b.Loop() {
				bs, err := c.Marshal(rc.r)
				if err != nil {
					b.Fatal(err)
				}
				bs.Free()
			}
		})
		b.Run(rc.name+"/protobuf-go", func(b *testing.B) {
			c := NewCodec()
			b.ReportAllocs()
			for b.Loop() {
				bs, err := c.base.Marshal(rc.r)
				if err != nil {
					b.Fatal(err)
				}
				bs.Free()
			}
		})
	}
}
