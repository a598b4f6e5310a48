package envoygrpc

import (
	"slices"
	"strings"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Codec is gRPC's protobuf codec, with a faster encoder for the
// CheckResponses nexus answers with (encode.go) and a faster decoder for
// Envoy's CheckRequest: protobuf-go decodes map fields through reflection
// (a CheckRequest's request headers took 44% of its decoding) and every
// message through its generic table-driven decoder. Codec reads itself
// the fields Envoy sends on every request (the request headers and the
// context extensions, the HTTP request's scalar fields, its time, and the
// peers as TCP addresses with their principals and labels), the strings
// of each message copied into one string, and leaves every other field to
// proto.Unmarshal, with the same result; anything it does not expect (a
// message field repeated, a peer that is not a TCP address, a map entry
// with other fields, invalid UTF-8, a truncated message) is decoded by
// proto.Unmarshal alone. Every other message goes to gRPC's codec.
type Codec struct{ base encoding.CodecV2 }

// NewCodec returns the codec, for grpc.ForceServerCodecV2.
func NewCodec() *Codec { return &Codec{base: encoding.GetCodecV2(protocodec.Name)} }

// Name is the protobuf codec's name: clients see no difference.
func (c *Codec) Name() string { return c.base.Name() }

// Marshal writes a CheckResponse nexus answers with itself
// (appendCheckResponse) and hands any other message to gRPC's codec.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*authv3.CheckResponse); ok {
		if b, ok := appendCheckResponse(make([]byte, 0, 256), r); ok {
			return mem.BufferSlice{mem.SliceBuffer(b)}, nil
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

// Field numbers of the messages the codec reads itself
// (envoy.service.auth.v3, envoy.config.core.v3, google.protobuf).
const (
	fieldAttributes        = 1  // CheckRequest.attributes
	fieldSource            = 1  // AttributeContext.source
	fieldDestination       = 2  // AttributeContext.destination
	fieldRequest           = 4  // AttributeContext.request
	fieldContextExtensions = 10 // AttributeContext.context_extensions
	fieldTime              = 1  // AttributeContext.Request.time
	fieldHTTP              = 2  // AttributeContext.Request.http
	fieldHeaders           = 3  // AttributeContext.HttpRequest.headers
)

// unmarshalCheck decodes b into m unless b is not a message it decodes
// (done false: m is untouched).
func unmarshalCheck(b []byte, m *authv3.CheckRequest) (done bool, err error) {
	top, ok, topRest := split(b, [3]protowire.Number{fieldAttributes}, 0, nil, nil)
	attrs := top[0]
	if !ok || attrs == nil {
		return false, nil
	}
	var ext map[string]string
	as, ok, attrRest := split(attrs, [3]protowire.Number{fieldRequest, fieldSource, fieldDestination}, fieldContextExtensions, &ext, nil)
	if !ok {
		return false, nil
	}
	req := as[0]
	var rs [3][]byte
	var reqRest [][]byte
	if req != nil {
		if rs, ok, reqRest = split(req, [3]protowire.Number{fieldHTTP, fieldTime}, 0, nil, nil); !ok {
			return false, nil
		}
	}
	httpb := rs[0]
	var headers map[string]string
	var httpRest [][]byte
	var st strs
	var h *authv3.AttributeContext_HttpRequest
	if httpb != nil {
		h = &authv3.AttributeContext_HttpRequest{}
		if httpRest, ok = decodeHTTP(httpb, h, &headers, &st); !ok {
			return false, nil
		}
	}
	a := &authv3.AttributeContext{}
	if a.Source, ok = decodePeer(as[1], &st); !ok {
		return false, nil
	}
	if a.Destination, ok = decodePeer(as[2], &st); !ok {
		return false, nil
	}
	var r *authv3.AttributeContext_Request
	if req != nil {
		r = &authv3.AttributeContext_Request{}
		if rs[1] != nil {
			if r.Time, ok = decodeTimestamp(rs[1]); !ok {
				return false, nil
			}
		}
	}
	st.done()
	// What is left of each message has no field decoded above, so
	// decoding it gives the message less those fields.
	proto.Reset(m)
	if err := merge(topRest, m); err != nil {
		return true, err
	}
	if err := merge(attrRest, a); err != nil {
		return true, err
	}
	a.ContextExtensions = ext
	if r != nil {
		if err := merge(reqRest, r); err != nil {
			return true, err
		}
		if h != nil {
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

// strs gives the strings a decoding reads their bytes: all of them copied
// into one string at the end (done), one allocation for them all.
type strs struct {
	ents []strEnt
	size int
}

type strEnt struct {
	dst *string
	v   []byte
}

// set has done store v's bytes in *dst; ok is false when v is not UTF-8
// (proto3 refuses such a string).
func (s *strs) set(dst *string, v []byte) bool {
	if !utf8.Valid(v) {
		return false
	}
	if s.ents == nil {
		s.ents = make([]strEnt, 0, 16)
	}
	s.ents = append(s.ents, strEnt{dst, v})
	s.size += len(v)
	return true
}

// done stores every string set asked for, in the order asked: a field
// set twice keeps the last.
func (s *strs) done() {
	var sb strings.Builder
	sb.Grow(s.size)
	for _, e := range s.ents {
		sb.Write(e.v)
	}
	all := sb.String()
	at := 0
	for _, e := range s.ents {
		*e.dst = all[at : at+len(e.v)]
		at += len(e.v)
	}
}

// decodeHTTP decodes an HttpRequest's scalar fields into h (their strings
// through st) and its headers map into *headers, and returns its other
// fields (the header_map, unknown fields, a field of an unexpected wire
// type) for proto to merge. ok is false when b does not parse, or a map
// entry or a string does not read as split and strs.set require.
func decodeHTTP(b []byte, h *authv3.AttributeContext_HttpRequest, headers *map[string]string, st *strs) (rest [][]byte, ok bool) {
	_, ok, rest = split(b, [3]protowire.Number{}, fieldHeaders, headers, func(num protowire.Number, typ protowire.Type, v []byte) (taken, ok bool) {
		switch {
		case typ == protowire.VarintType && num == 9: // size
			x, _ := protowire.ConsumeVarint(v)
			h.Size = int64(x)
		case typ == protowire.BytesType && num == 12: // raw_body
			x, _ := protowire.ConsumeBytes(v)
			h.RawBody = append([]byte{}, x...)
		case typ == protowire.BytesType:
			dst := httpString(h, num)
			if dst == nil {
				return false, true
			}
			x, _ := protowire.ConsumeBytes(v)
			return true, st.set(dst, x)
		default:
			return false, true
		}
		return true, true
	})
	return rest, ok
}

// httpString is the string field num of h, nil for a field that is not
// one of its strings.
func httpString(h *authv3.AttributeContext_HttpRequest, num protowire.Number) *string {
	switch num {
	case 1:
		return &h.Id
	case 2:
		return &h.Method
	case 4:
		return &h.Path
	case 5:
		return &h.Host
	case 6:
		return &h.Scheme
	case 7:
		return &h.Query
	case 8:
		return &h.Fragment
	case 10:
		return &h.Protocol
	case 11:
		return &h.Body
	}
	return nil
}

// decodePeer decodes a Peer (nil for b nil) whose address, if any, is a
// socket address with an IP address and a port number (as Envoy
// describes a TCP peer): its strings through st, its labels map at once.
// ok is false for anything else (a field it does not read, a field of
// another wire type, the address twice): the caller leaves the request
// to proto.
func decodePeer(b []byte, st *strs) (_ *authv3.AttributeContext_Peer, ok bool) {
	if b == nil {
		return nil, true
	}
	p := &authv3.AttributeContext_Peer{}
	// The callback takes every field or refuses it: nothing is left
	// for proto.
	sub, ok, _ := split(b, [3]protowire.Number{1}, 3, &p.Labels, func(num protowire.Number, typ protowire.Type, v []byte) (taken, ok bool) {
		var dst *string
		switch {
		case typ != protowire.BytesType:
			return false, false
		case num == 2:
			dst = &p.Service
		case num == 4:
			dst = &p.Principal
		case num == 5:
			dst = &p.Certificate
		default:
			return false, false
		}
		x, _ := protowire.ConsumeBytes(v)
		return true, st.set(dst, x)
	})
	if !ok {
		return nil, false
	}
	if sub[0] != nil {
		if p.Address, ok = decodeAddress(sub[0], st); !ok {
			return nil, false
		}
	}
	return p, true
}

// decodeAddress decodes an Address holding a socket address once, whose
// fields are its IP address and port number alone.
func decodeAddress(b []byte, st *strs) (*corev3.Address, bool) {
	sub, ok, _ := split(b, [3]protowire.Number{1}, 0, nil, refuse)
	if !ok || sub[0] == nil {
		return nil, false
	}
	sa := &corev3.SocketAddress{}
	if _, ok, _ = split(sub[0], [3]protowire.Number{}, 0, nil, func(num protowire.Number, typ protowire.Type, v []byte) (taken, ok bool) {
		switch {
		case num == 2 && typ == protowire.BytesType: // address
			x, _ := protowire.ConsumeBytes(v)
			return true, st.set(&sa.Address, x)
		case num == 3 && typ == protowire.VarintType: // port_value
			x, _ := protowire.ConsumeVarint(v)
			sa.PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: uint32(x)}
			return true, true
		}
		return false, false
	}); !ok {
		return nil, false
	}
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: sa}}, true
}

// decodeTimestamp decodes a Timestamp of seconds and nanoseconds.
func decodeTimestamp(b []byte) (*timestamppb.Timestamp, bool) {
	t := &timestamppb.Timestamp{}
	_, ok, _ := split(b, [3]protowire.Number{}, 0, nil, func(num protowire.Number, typ protowire.Type, v []byte) (taken, ok bool) {
		if typ != protowire.VarintType || (num != 1 && num != 2) {
			return false, false
		}
		x, _ := protowire.ConsumeVarint(v)
		if num == 1 {
			t.Seconds = int64(x)
		} else {
			t.Nanos = int32(x)
		}
		return true, true
	})
	if !ok {
		return nil, false
	}
	return t, true
}

// refuse is a split callback that takes no field and refuses the message.
func refuse(protowire.Number, protowire.Type, []byte) (taken, ok bool) { return false, false }

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

// split walks the fields of message b. Each length-delimited field of
// subs (0: none) comes back as its bytes in subb, at its index in subs
// (an empty, non-nil slice when present and empty; nil when absent); the
// entries of the map<string, string> field mapField (0: none) go into
// *into; field (nil: none) is offered every other field, with its value's
// bytes, and takes it or not; the runs of fields not taken come back in
// rest, in order, as parts of b. ok is false when b does not parse, a
// field of subs appears twice or with another wire type, a map entry is
// anything but a string key and a string value, each at most once and
// valid UTF-8, or field says so.
func split(b []byte, subs [3]protowire.Number, mapField protowire.Number, into *map[string]string, field func(num protowire.Number, typ protowire.Type, v []byte) (taken, ok bool)) (subb [3][]byte, ok bool, rest [][]byte) {
	var ents []entry
	size, at, from := 0, 0, 0 // from: the start of the current run of other fields
	for at < len(b) {
		num, typ, n := protowire.ConsumeTag(b[at:])
		if n < 0 {
			return subb, false, nil
		}
		m := protowire.ConsumeFieldValue(num, typ, b[at+n:])
		if m < 0 {
			return subb, false, nil
		}
		si := slices.Index(subs[:], num)
		switch {
		case num != 0 && si >= 0:
			if typ != protowire.BytesType || subb[si] != nil {
				return subb, false, nil
			}
			v, _ := protowire.ConsumeBytes(b[at+n:])
			subb[si] = v[:len(v):len(v)]
		case num == mapField && mapField != 0:
			if typ != protowire.BytesType {
				return subb, false, nil
			}
			e, _ := protowire.ConsumeBytes(b[at+n:])
			k, v, eok := mapEntry(e)
			if !eok {
				return subb, false, nil
			}
			if ents == nil {
				ents = make([]entry, 0, 16)
			}
			ents = append(ents, entry{k, v})
			size += len(k) + len(v)
		default:
			taken, fok := false, true
			if field != nil {
				taken, fok = field(num, typ, b[at+n:at+n+m])
			}
			if !fok {
				return subb, false, nil
			}
			if !taken {
				at += n + m
				continue
			}
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
