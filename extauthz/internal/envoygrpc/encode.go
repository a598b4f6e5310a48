package envoygrpc

import (
	"math"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"
)

// The CheckResponse encoder. protobuf-go marshals a message by reflection,
// in two passes (its size, then its bytes) over every field of every
// message; a CheckResponse that allows with two headers and a decision ID
// took about 2.4 µs of a gRPC check's server CPU that way. These
// functions write the fields nexus' answers set (the status, the OK or
// denied HTTP response, the dynamic metadata) directly, in one pass and in
// field-number order as protobuf-go does: a nested message's length is
// set once its fields are written (begin, end). A response that sets
// anything else (status details, an error response, a header's append
// options or raw value, the OK response's deprecated dynamic metadata, a
// nil element, a Struct nested deeper than maxStructDepth) is not theirs,
// nor is a string that is not UTF-8 (protobuf-go refuses to encode it):
// appendCheckResponse says so and Codec.Marshal hands it to gRPC's codec.

// Field numbers of the messages written here.
const (
	respStatus          = 1 // CheckResponse.status
	respDenied          = 2 // CheckResponse.denied_response
	respOK              = 3 // CheckResponse.ok_response
	respDynamicMetadata = 4 // CheckResponse.dynamic_metadata

	statusCode    = 1 // google.rpc.Status.code
	statusMessage = 2 // google.rpc.Status.message

	deniedHTTPStatus = 1 // DeniedHttpResponse.status
	deniedHeaders    = 2
	deniedBody       = 3

	okHeaders                 = 2
	okHeadersToRemove         = 5
	okResponseHeadersToAdd    = 6
	okQueryParametersToSet    = 7
	okQueryParametersToRemove = 8

	httpStatusCode = 1 // HttpStatus.code

	hvoHeader = 1 // HeaderValueOption.header
	kvKey     = 1 // HeaderValue.key, QueryParameter.key, a map entry's key
	kvValue   = 2 // HeaderValue.value, QueryParameter.value, a map entry's value

	structFields = 1 // Struct.fields
	listValues   = 1 // ListValue.values

	valueNull   = 1
	valueNumber = 2
	valueString = 3
	valueBool   = 4
	valueStruct = 5
	valueList   = 6
)

// maxStructDepth bounds the nesting of dynamic metadata the encoder
// writes.
const maxStructDepth = 8

// begin appends a length-delimited field's tag and a one-byte length, to
// be set by end with at, the index its content starts at.
func begin(b []byte, num protowire.Number) (_ []byte, at int) {
	b = append(protowire.AppendTag(b, num, protowire.BytesType), 0)
	return b, len(b)
}

// end sets the length of the field whose content starts at at: the
// content moves when its length needs more than one byte.
func end(b []byte, at int) []byte {
	n := len(b) - at
	if n < 0x80 {
		b[at-1] = byte(n)
		return b
	}
	w := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, w-1)...)
	copy(b[at-1+w:], b[at:at+n])
	protowire.AppendVarint(b[:at-1], uint64(n))
	return b
}

// appendString appends a string field (nothing for ""); ok is false if s
// is not UTF-8.
func appendString(b []byte, num protowire.Number, s string) (_ []byte, ok bool) {
	if s == "" {
		return b, true
	}
	return appendBytes(b, num, s), utf8.ValidString(s)
}

// appendBytes appends a length-delimited field holding s, even "".
func appendBytes(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendVarint(protowire.AppendTag(b, num, protowire.BytesType), uint64(len(s)))
	return append(b, s...)
}

// appendPair appends a message of two string fields (a key and a value).
func appendPair(b []byte, num protowire.Number, k, v string) (_ []byte, ok bool) {
	b, at := begin(b, num)
	b, ok = appendString(b, kvKey, k)
	b, ok2 := appendString(b, kvValue, v)
	return end(b, at), ok && ok2
}

// appendInt32 appends an int32 or enum field (nothing for 0; a negative
// value takes ten bytes, sign-extended).
func appendInt32(b []byte, num protowire.Number, v int32) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), uint64(int64(v)))
}

// appendCheckResponse appends r; ok is false if r is not a response the
// encoder writes whole (b then holds part of it).
func appendCheckResponse(b []byte, r *authv3.CheckResponse) (_ []byte, ok bool) {
	var at int
	if s := r.Status; s != nil {
		if len(s.Details) > 0 {
			return b, false
		}
		b, at = begin(b, respStatus)
		b = appendInt32(b, statusCode, s.Code)
		if b, ok = appendString(b, statusMessage, s.Message); !ok {
			return b, false
		}
		b = end(b, at)
	}
	switch h := r.HttpResponse.(type) {
	case nil:
	case *authv3.CheckResponse_DeniedResponse:
		if b, ok = appendDenied(b, h.DeniedResponse); !ok {
			return b, false
		}
	case *authv3.CheckResponse_OkResponse:
		if b, ok = appendOK(b, h.OkResponse); !ok {
			return b, false
		}
	default:
		return b, false
	}
	if md := r.DynamicMetadata; md != nil {
		b, at = begin(b, respDynamicMetadata)
		if b, ok = appendStruct(b, md, 0); !ok {
			return b, false
		}
		b = end(b, at)
	}
	return b, true
}

func appendDenied(b []byte, d *authv3.DeniedHttpResponse) (_ []byte, ok bool) {
	if d == nil {
		return b, false
	}
	b, at := begin(b, respDenied)
	if d.Status != nil {
		var st int
		b, st = begin(b, deniedHTTPStatus)
		b = end(appendInt32(b, httpStatusCode, int32(d.Status.Code)), st)
	}
	if b, ok = appendHeaders(b, deniedHeaders, d.Headers); !ok {
		return b, false
	}
	if b, ok = appendString(b, deniedBody, d.Body); !ok {
		return b, false
	}
	return end(b, at), true
}

func appendOK(b []byte, o *authv3.OkHttpResponse) (_ []byte, ok bool) {
	//lint:ignore SA1019 a response that sets the deprecated field is left to gRPC's codec
	if o == nil || o.DynamicMetadata != nil {
		return b, false
	}
	b, at := begin(b, respOK)
	b, ok = appendHeaders(b, okHeaders, o.Headers)
	b, ok2 := appendStrings(b, okHeadersToRemove, o.HeadersToRemove)
	b, ok3 := appendHeaders(b, okResponseHeadersToAdd, o.ResponseHeadersToAdd)
	if !ok || !ok2 || !ok3 {
		return b, false
	}
	for _, q := range o.QueryParametersToSet {
		if q == nil {
			return b, false
		}
		if b, ok = appendPair(b, okQueryParametersToSet, q.Key, q.Value); !ok {
			return b, false
		}
	}
	if b, ok = appendStrings(b, okQueryParametersToRemove, o.QueryParametersToRemove); !ok {
		return b, false
	}
	return end(b, at), true
}

// appendStrings appends a repeated string field: every element, an empty
// one too.
func appendStrings(b []byte, num protowire.Number, ss []string) (_ []byte, ok bool) {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return b, false
		}
		b = appendBytes(b, num, s)
	}
	return b, true
}

// appendHeaders appends HeaderValueOptions as nexus writes them: each
// header's key and value alone.
func appendHeaders(b []byte, num protowire.Number, hs []*corev3.HeaderValueOption) (_ []byte, ok bool) {
	var at int
	for _, h := range hs {
		//lint:ignore SA1019 a header that sets the deprecated append is left to gRPC's codec
		if h == nil || h.Append != nil || h.AppendAction != 0 || h.KeepEmptyValue {
			return b, false
		}
		b, at = begin(b, num)
		if hv := h.Header; hv != nil {
			if len(hv.RawValue) > 0 {
				return b, false
			}
			if b, ok = appendPair(b, hvoHeader, hv.Key, hv.Value); !ok {
				return b, false
			}
		}
		b = end(b, at)
	}
	return b, true
}

// appendStruct appends a Struct's fields at nesting depth, each map entry
// with its key and its value, as protobuf-go writes them.
func appendStruct(b []byte, s *structpb.Struct, depth int) (_ []byte, ok bool) {
	if depth > maxStructDepth {
		return b, false
	}
	var at, vat int
	for k, v := range s.Fields {
		if !utf8.ValidString(k) {
			return b, false
		}
		b, at = begin(b, structFields)
		b = appendBytes(b, kvKey, k)
		b, vat = begin(b, kvValue)
		if b, ok = appendValue(b, v, depth); !ok {
			return b, false
		}
		b = end(end(b, vat), at)
	}
	return b, true
}

// appendValue appends a Value's kind, even when it holds its type's zero
// value (a member of a oneof).
func appendValue(b []byte, v *structpb.Value, depth int) (_ []byte, ok bool) {
	if v == nil {
		return b, false
	}
	var at, eat int
	switch k := v.Kind.(type) {
	case nil:
	case *structpb.Value_NullValue:
		b = protowire.AppendVarint(protowire.AppendTag(b, valueNull, protowire.VarintType), uint64(int64(k.NullValue)))
	case *structpb.Value_NumberValue:
		b = protowire.AppendFixed64(protowire.AppendTag(b, valueNumber, protowire.Fixed64Type), math.Float64bits(k.NumberValue))
	case *structpb.Value_StringValue:
		if !utf8.ValidString(k.StringValue) {
			return b, false
		}
		b = appendBytes(b, valueString, k.StringValue)
	case *structpb.Value_BoolValue:
		b = protowire.AppendVarint(protowire.AppendTag(b, valueBool, protowire.VarintType), protowire.EncodeBool(k.BoolValue))
	case *structpb.Value_StructValue:
		if k.StructValue == nil {
			return b, false
		}
		b, at = begin(b, valueStruct)
		if b, ok = appendStruct(b, k.StructValue, depth+1); !ok {
			return b, false
		}
		b = end(b, at)
	case *structpb.Value_ListValue:
		if k.ListValue == nil || depth > maxStructDepth {
			return b, false
		}
		b, at = begin(b, valueList)
		for _, e := range k.ListValue.Values {
			b, eat = begin(b, listValues)
			if b, ok = appendValue(b, e, depth+1); !ok {
				return b, false
			}
			b = end(b, eat)
		}
		b = end(b, at)
	default:
		return b, false
	}
	return b, true
}
