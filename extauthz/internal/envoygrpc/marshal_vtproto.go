//go:build vtprotobuf

package envoygrpc

import (
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/types/known/structpb"
)

// marshalCheckResponse writes r with go-control-plane's generated
// vtprotobuf encoder (built with the vtprotobuf tag): one pass for its
// size, one for its bytes, no reflection. The generated code does not
// check that strings are UTF-8, which protobuf-go refuses to encode: a
// response with a string that is not, or with a part nexus never sets (a
// nil element, status details), goes to gRPC's codec, which answers as
// protobuf-go does (ok false).
func marshalCheckResponse(r *authv3.CheckResponse) (_ mem.BufferSlice, ok bool, err error) {
	if !plainUTF8(r) {
		return nil, false, nil
	}
	b, err := r.MarshalVTStrict()
	if err != nil {
		return nil, true, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, true, nil
}

// plainUTF8 reports whether every string of r is UTF-8 and r has no
// part the generated encoder may write otherwise than protobuf-go (a nil
// element of a list or map, a nil member of a oneof, status details).
func plainUTF8(r *authv3.CheckResponse) bool {
	if s := r.Status; s != nil && (len(s.Details) > 0 || !utf8.ValidString(s.Message)) {
		return false
	}
	switch h := r.HttpResponse.(type) {
	case nil:
	case *authv3.CheckResponse_DeniedResponse:
		if !deniedUTF8(h.DeniedResponse) {
			return false
		}
	case *authv3.CheckResponse_ErrorResponse:
		if !deniedUTF8(h.ErrorResponse) {
			return false
		}
	case *authv3.CheckResponse_OkResponse:
		o := h.OkResponse
		if o == nil || !headersUTF8(o.Headers) || !stringsUTF8(o.HeadersToRemove) || !headersUTF8(o.ResponseHeadersToAdd) ||
			!stringsUTF8(o.QueryParametersToRemove) {
			return false
		}
		//lint:ignore SA1019 the deprecated field is checked as the others
		if md := o.DynamicMetadata; md != nil && !structUTF8(md) {
			return false
		}
		for _, q := range o.QueryParametersToSet {
			if q == nil || !utf8.ValidString(q.Key) || !utf8.ValidString(q.Value) {
				return false
			}
		}
	default:
		return false
	}
	return r.DynamicMetadata == nil || structUTF8(r.DynamicMetadata)
}

func deniedUTF8(d *authv3.DeniedHttpResponse) bool {
	return d != nil && headersUTF8(d.Headers) && utf8.ValidString(d.Body)
}

func stringsUTF8(ss []string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

func headersUTF8(hs []*corev3.HeaderValueOption) bool {
	for _, h := range hs {
		if h == nil {
			return false
		}
		if hv := h.Header; hv != nil && (!utf8.ValidString(hv.Key) || !utf8.ValidString(hv.Value)) {
			return false
		}
	}
	return true
}

func structUTF8(s *structpb.Struct) bool {
	for k, v := range s.Fields {
		if !utf8.ValidString(k) || !valueUTF8(v) {
			return false
		}
	}
	return true
}

func valueUTF8(v *structpb.Value) bool {
	if v == nil {
		return false
	}
	switch k := v.Kind.(type) {
	case *structpb.Value_StringValue:
		return utf8.ValidString(k.StringValue)
	case *structpb.Value_StructValue:
		return k.StructValue != nil && structUTF8(k.StructValue)
	case *structpb.Value_ListValue:
		if k.ListValue == nil {
			return false
		}
		for _, e := range k.ListValue.Values {
			if !valueUTF8(e) {
				return false
			}
		}
	}
	return true
}

// generatedEncoder: marshalCheckResponse writes every CheckResponse
// nexus answers with.
const generatedEncoder = true
