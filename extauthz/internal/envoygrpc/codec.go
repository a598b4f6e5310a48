package envoygrpc

import (
	"strings"
	"unicode/utf8"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Codec is gRPC's protobuf codec, with go-control-plane's generated
// encoder for CheckResponses when built with the vtprotobuf tag
// (marshal_vtproto.go), and a faster decoder for Envoy's CheckRequest:
// protobuf-go decodes map fields through reflection (a CheckRequest's
// request headers took 44% of its decoding). Codec reads the request
// headers and the context extensions itself, each map's keys and values
// copied into one string, and leaves every other field to
// proto.Unmarshal, with the same result; anything it does not expect (a
// message on its path repeated, a map entry with other fields, invalid
// UTF-8, a truncated message) is decoded by proto.Unmarshal alone. Every
// other message goes to gRPC's codec.
type Codec struct{ base encoding.CodecV2 }

// NewCodec returns the codec, for grpc.ForceServerCodecV2.
func NewCodec() *Codec { return &Codec{base: encoding.GetCodecV2(protocodec.Name)} }

// Name is the protobuf codec's name: clients see no difference.
func (c *Codec) Name() string { return c.base.Name() }

// Marshal writes a CheckResponse with marshalCheckResponse, and any
// message that leaves to gRPC's codec with it.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*authv3.CheckResponse); ok {
		if bs, ok, err := marshalCheckResponse(r); ok {
			return bs, err
		}
	}
	return c.base.Marshal(v)
}

// Unmarshal decodes a CheckRequest with UnmarshalCheckRequest and any
// other message with gRPC's codec.
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*authv3.CheckRequest)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return UnmarshalCheckRequest(buf.ReadOnlyData(), m)
}

// UnmarshalCheckRequest is proto.Unmarshal(b, m), faster on the requests
// Envoy sends.
func UnmarshalCheckRequest(b []byte, m *authv3.CheckRequest) error {
	if done, err := unmarshalCheck(b, m); done {
		return err
	}
	return proto.Unmarshal(b, m)
}

// Field numbers on the path to the maps the codec reads itself
// (envoy.service.auth.v3).
const (
	fieldAttributes        = 1  // CheckRequest.attributes
	fieldRequest           = 4  // AttributeContext.request
	fieldContextExtensions = 10 // AttributeContext.context_extensions
	fieldHTTP              = 2  // AttributeContext.Request.http
	fieldHeaders           = 3  // AttributeContext.HttpRequest.headers
)

// unmarshalCheck decodes b into m unless b is not a message it decodes
// (done false: m is untouched).
func unmarshalCheck(b []byte, m *authv3.CheckRequest) (done bool, err error) {
	attrs, ok, topRest := split(b, fieldAttributes, 0, nil)
	if !ok || attrs == nil {
		return false, nil
	}
	var ext map[string]string
	req, ok, attrRest := split(attrs, fieldRequest, fieldContextExtensions, &ext)
	if !ok {
		return false, nil
	}
	var httpb []byte
	var reqRest [][]byte
	if req != nil {
		if httpb, ok, reqRest = split(req, fieldHTTP, 0, nil); !ok {
			return false, nil
		}
	}
	var headers map[string]string
	var httpRest [][]byte
	if httpb != nil {
		if _, ok, httpRest = split(httpb, 0, fieldHeaders, &headers); !ok {
			return false, nil
		}
	}
	// What is left of each message has no field decoded above, so
	// decoding it gives the message less those fields.
	proto.Reset(m)
	a := &authv3.AttributeContext{}
	if err := merge(topRest, m); err != nil {
		return true, err
	}
	if err := merge(attrRest, a); err != nil {
		return true, err
	}
	a.ContextExtensions = ext
	if req != nil {
		r := &authv3.AttributeContext_Request{}
		if err := merge(reqRest, r); err != nil {
			return true, err
		}
		if httpb != nil {
			h := &authv3.AttributeContext_HttpRequest{}
			if err := merge(httpRest, h); err != nil {
				return true, err
			}
			h.Headers = headers
			r.Http = h
		}
		a.Request = r
	}
	m.Attributes = a
	return true, nil
}

// merge decodes the parts of a message into m, each merged into what the
// ones before it decoded: as decoding them one after the other in a
// single buffer does.
func merge(parts [][]byte, m proto.Message) error {
	for _, p := range parts {
		if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(p, m); err != nil {
			return err
		}
	}
	return nil
}

// split walks the fields of message b. The length-delimited field sub
// (0: none) comes back as its bytes in subb (an empty, non-nil slice when
// present and empty; nil when absent); the entries of the
// map<string, string> field mapField (0: none) go into *into; the runs
// of other fields come back in rest, in order, as parts of b. ok is
// false when b does not parse, sub appears twice or with another wire
// type, or a map entry is anything but a string key and a string value,
// each at most once and valid UTF-8.
func split(b []byte, sub, mapField protowire.Number, into *map[string]string) (subb []byte, ok bool, rest [][]byte) {
	var ents []entry
	size, at, from := 0, 0, 0 // from: the start of the current run of other fields
	for at < len(b) {
		num, typ, n := protowire.ConsumeTag(b[at:])
		if n < 0 {
			return nil, false, nil
		}
		m := protowire.ConsumeFieldValue(num, typ, b[at+n:])
		if m < 0 {
			return nil, false, nil
		}
		switch {
		case num == sub && sub != 0:
			if typ != protowire.BytesType || subb != nil {
				return nil, false, nil
			}
			v, _ := protowire.ConsumeBytes(b[at+n:])
			subb = v[:len(v):len(v)]
		case num == mapField && mapField != 0:
			if typ != protowire.BytesType {
				return nil, false, nil
			}
			e, _ := protowire.ConsumeBytes(b[at+n:])
			k, v, eok := mapEntry(e)
			if !eok {
				return nil, false, nil
			}
			if ents == nil {
				ents = make([]entry, 0, 16)
			}
			ents = append(ents, entry{k, v})
			size += len(k) + len(v)
		default:
			at += n + m
			continue
		}
		if from < at {
			rest = append(rest, b[from:at])
		}
		at += n + m
		from = at
	}
	if from < len(b) {
		rest = append(rest, b[from:])
	}
	if ents != nil {
		*into = stringMap(ents, size)
	}
	return subb, true, rest
}

// entry is a map entry's key and value, in the message's bytes.
type entry struct{ k, v []byte }

// stringMap makes the map of ents, later entries winning, with every key and
// value a part of one string of size bytes: one allocation for them all.
func stringMap(ents []entry, size int) map[string]string {
	var sb strings.Builder
	sb.Grow(size)
	for _, e := range ents {
		sb.Write(e.k)
		sb.Write(e.v)
	}
	all := sb.String()
	out := make(map[string]string, len(ents))
	at := 0
	for _, e := range ents {
		k := all[at : at+len(e.k)]
		at += len(e.k)
		out[k] = all[at : at+len(e.v)]
		at += len(e.v)
	}
	return out
}

// mapEntry reads a map<string, string> entry: field 1 the key, field 2
// the value, each at most once, absent ones empty.
func mapEntry(e []byte) (k, v []byte, ok bool) {
	var seenK, seenV bool
	for len(e) > 0 {
		num, typ, n := protowire.ConsumeTag(e)
		if n < 0 || typ != protowire.BytesType || (num != 1 && num != 2) {
			return nil, nil, false
		}
		s, m := protowire.ConsumeBytes(e[n:])
		if m < 0 || !utf8.Valid(s) {
			return nil, nil, false
		}
		switch {
		case num == 1 && !seenK:
			k, seenK = s, true
		case num == 2 && !seenV:
			v, seenV = s, true
		default:
			return nil, nil, false
		}
		e = e[n+m:]
	}
	return k, v, true
}
