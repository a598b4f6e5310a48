// Package input builds the policy input documents that nexus evaluates:
// the opa-envoy-plugin input from an Envoy CheckRequest or a forward-auth
// HTTP request, so that existing OPA-Envoy policies run unchanged.
package input

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// ErrInvalidUTF8 reports a string field that is not valid UTF-8.
var ErrInvalidUTF8 = errors.New("input: invalid UTF-8")

// ErrInvalidPath reports a request path that cannot be parsed as a URL.
var ErrInvalidPath = errors.New("input: invalid request path")

// ErrInvalidBody reports a JSON or form body that cannot be parsed.
var ErrInvalidBody = errors.New("input: invalid request body")

// Options tune how a request becomes an input document.
type Options struct {
	// SkipBody leaves parsed_body null even for JSON and form bodies.
	SkipBody bool
}

// HTTP is the part of an HTTP request that becomes the input document.
// It mirrors Envoy's AttributeContext.HttpRequest.
type HTTP struct {
	ID       string
	Method   string
	Headers  map[string]string
	Path     string
	Host     string
	Scheme   string
	Size     int64
	Protocol string
	Body     string
	RawBody  []byte
}

var protoMarshal = protojson.MarshalOptions{}

// AppendEnvoy appends the opa-envoy-plugin input document for req to dst.
// The attributes are encoded as protojson would encode them (the field
// names, the omission of empty fields, int64 as strings), with map keys
// sorted so that equal requests give equal bytes.
func AppendEnvoy(dst []byte, req *authv3.CheckRequest, opts Options) ([]byte, error) {
	a := req.GetAttributes()
	var o obj
	o.open(dst)
	if a != nil {
		o.key("attributes")
		var err error
		o.buf, err = appendAttributes(o.buf, a)
		if err != nil {
			return dst, err
		}
	}
	h := a.GetRequest().GetHttp()
	return appendParsed(&o, h.GetPath(), h.GetHeaders(), h.GetBody(), h.GetRawBody(), opts)
}

// AppendHTTP appends the input document for a request that did not come
// as a CheckRequest (HTTP ext_authz and forward auth): the same shape, with
// attributes.request.http filled from h.
func AppendHTTP(dst []byte, h *HTTP, source string, opts Options) ([]byte, error) {
	if err := validStrings(h.ID, h.Method, h.Path, h.Host, h.Scheme, h.Protocol, h.Body, source); err != nil {
		return dst, err
	}
	if err := validMap(h.Headers); err != nil {
		return dst, err
	}
	var o obj
	o.open(dst)
	o.key("attributes")
	var a obj
	a.open(o.buf)
	if source != "" {
		a.key("source")
		var s obj
		s.open(a.buf)
		s.buf = appendSocketAddress(&s, source)
		a.buf = s.close()
	}
	a.key("request")
	var r obj
	r.open(a.buf)
	r.key("http")
	r.buf = appendHTTP(r.buf, h.ID, h.Method, h.Headers, h.Path, h.Host, h.Scheme, h.Size, h.Protocol, h.Body, h.RawBody)
	a.buf = r.close()
	o.buf = a.close()
	return appendParsed(&o, h.Path, h.Headers, h.Body, h.RawBody, opts)
}

func appendSocketAddress(o *obj, hostport string) []byte {
	host, port := hostport, uint64(0)
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 {
		if p, err := strconv.ParseUint(hostport[i+1:], 10, 32); err == nil {
			host, port = strings.Trim(hostport[:i], "[]"), p
		}
	}
	o.key("address")
	var ad obj
	ad.open(o.buf)
	ad.key("socketAddress")
	var sa obj
	sa.open(ad.buf)
	sa.str("address", host)
	sa.uint32("portValue", uint32(port))
	ad.buf = sa.close()
	return ad.close()
}

func appendParsed(o *obj, path string, headers map[string]string, body string, rawBody []byte, opts Options) ([]byte, error) {
	if err := validStrings(path, body); err != nil {
		return o.buf, err
	}
	u, err := url.Parse(path)
	if err != nil {
		return o.buf, fmt.Errorf("%w: %q: %w", ErrInvalidPath, truncate(path), err)
	}
	o.key("parsed_path")
	o.buf = append(o.buf, '[')
	for i, seg := range strings.Split(strings.TrimLeft(u.Path, "/"), "/") {
		if i > 0 {
			o.buf = append(o.buf, ',')
		}
		o.buf = appendString(o.buf, seg)
	}
	o.buf = append(o.buf, ']')
	o.key("parsed_query")
	o.buf = appendValues(o.buf, u.Query())

	parsed, truncated, err := parseBody(headers, body, rawBody, opts)
	if err != nil {
		return o.buf, err
	}
	o.key("parsed_body")
	if parsed == nil {
		o.buf = append(o.buf, "null"...)
	} else {
		o.buf = append(o.buf, parsed...)
	}
	o.key("truncated_body")
	o.buf = strconv.AppendBool(o.buf, truncated)
	o.raw("version", []byte(`{"encoding":"protojson","ext_authz":"v3"}`))
	return o.close(), nil
}

// parseBody returns the body as compact JSON when it is a JSON or form
// body, nil when it is neither, and truncated when Envoy sent less of the
// body than its Content-Length announced.
func parseBody(headers map[string]string, body string, rawBody []byte, opts Options) (js []byte, truncated bool, err error) {
	if opts.SkipBody {
		return nil, false, nil
	}
	if body == "" && len(rawBody) > 0 {
		body = string(rawBody)
	}
	ct := headers["content-type"]
	isJSON := strings.Contains(ct, "application/json")
	isForm := strings.Contains(ct, "application/x-www-form-urlencoded")
	if body == "" || (!isJSON && !isForm) {
		return nil, false, nil
	}
	if cl, ok := headers["content-length"]; ok {
		n, err := strconv.ParseInt(cl, 10, 64)
		if err != nil {
			return nil, false, fmt.Errorf("%w: content-length %q is not a number", ErrInvalidBody, truncate(cl))
		}
		if n > int64(len(body)) {
			return nil, true, nil
		}
	}
	if isJSON {
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(body)); err != nil {
			return nil, false, fmt.Errorf("%w: JSON: %w", ErrInvalidBody, err)
		}
		return buf.Bytes(), false, nil
	}
	vals, err := url.ParseQuery(body)
	if err != nil {
		return nil, false, fmt.Errorf("%w: form: %w", ErrInvalidBody, err)
	}
	return appendValues(nil, vals), false, nil
}

func appendValues(dst []byte, v url.Values) []byte {
	return appendSorted(dst, v, func(dst []byte, vs []string) []byte {
		dst = append(dst, '[')
		for j, s := range vs {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, s)
		}
		return append(dst, ']')
	})
}

func appendMap(dst []byte, m map[string]string) []byte {
	return appendSorted(dst, m, appendString)
}

// appendSorted appends m as a JSON object with its keys sorted, each value
// written by val.
func appendSorted[V any](dst []byte, m map[string]V, val func([]byte, V) []byte) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, k)
		dst = append(dst, ':')
		dst = val(dst, m[k])
	}
	return append(dst, '}')
}

func appendAttributes(dst []byte, a *authv3.AttributeContext) ([]byte, error) {
	var o obj
	o.open(dst)
	var err error
	if a.Source != nil {
		o.key("source")
		if o.buf, err = appendPeer(o.buf, a.Source); err != nil {
			return dst, err
		}
	}
	if a.Destination != nil {
		o.key("destination")
		if o.buf, err = appendPeer(o.buf, a.Destination); err != nil {
			return dst, err
		}
	}
	if r := a.Request; r != nil {
		o.key("request")
		var ro obj
		ro.open(o.buf)
		if r.Time != nil {
			if err := r.Time.CheckValid(); err != nil {
				return dst, fmt.Errorf("input: request time: %w", err)
			}
			ro.key("time")
			ro.buf = appendTimestamp(ro.buf, r.Time.Seconds, r.Time.Nanos)
		}
		if h := r.Http; h != nil {
			if err := validStrings(h.Id, h.Method, h.Path, h.Host, h.Scheme, h.Query, h.Fragment, h.Protocol, h.Body); err != nil {
				return dst, err
			}
			if err := validMap(h.Headers); err != nil {
				return dst, err
			}
			ro.key("http")
			ro.buf = appendHTTP(ro.buf, h.Id, h.Method, h.Headers, h.Path, h.Host, h.Scheme, h.Size, h.Protocol, h.Body, h.RawBody)
			if h.Query != "" || h.Fragment != "" || h.HeaderMap != nil {
				// Rare fields: splice protojson's own encoding of them.
				ro.buf = ro.buf[:len(ro.buf)-1]
				extra := &authv3.AttributeContext_HttpRequest{Query: h.Query, Fragment: h.Fragment, HeaderMap: h.HeaderMap}
				if ro.buf, err = spliceMembers(ro.buf, extra); err != nil {
					return dst, err
				}
				ro.buf = append(ro.buf, '}')
			}
		}
		o.buf = ro.close()
	}
	if len(a.ContextExtensions) > 0 {
		if err := validMap(a.ContextExtensions); err != nil {
			return dst, err
		}
		o.key("contextExtensions")
		o.buf = appendMap(o.buf, a.ContextExtensions)
	}
	if a.MetadataContext != nil || a.RouteMetadataContext != nil || a.TlsSession != nil {
		extra := &authv3.AttributeContext{MetadataContext: a.MetadataContext, RouteMetadataContext: a.RouteMetadataContext, TlsSession: a.TlsSession}
		if o.buf, err = spliceMembersInto(&o, extra); err != nil {
			return dst, err
		}
	}
	return o.close(), nil
}

// spliceMembersInto adds the members of protojson's encoding of m to the
// object being written by o.
func spliceMembersInto(o *obj, m proto.Message) ([]byte, error) {
	js, err := marshalCompact(m)
	if err != nil {
		return o.buf, err
	}
	if len(js) <= 2 {
		return o.buf, nil
	}
	if !o.first {
		o.buf = append(o.buf, ',')
	}
	o.first = false
	return append(o.buf, js[1:len(js)-1]...), nil
}

// spliceMembers appends the members of protojson's encoding of m to an
// object whose closing brace has been removed from dst.
func spliceMembers(dst []byte, m proto.Message) ([]byte, error) {
	js, err := marshalCompact(m)
	if err != nil {
		return dst, err
	}
	if len(js) <= 2 {
		return dst, nil
	}
	if dst[len(dst)-1] != '{' {
		dst = append(dst, ',')
	}
	return append(dst, js[1:len(js)-1]...), nil
}

func marshalCompact(m proto.Message) ([]byte, error) {
	js, err := protoMarshal.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, js); err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	return buf.Bytes(), nil
}

func appendPeer(dst []byte, p *authv3.AttributeContext_Peer) ([]byte, error) {
	if err := validStrings(p.Service, p.Principal, p.Certificate); err != nil {
		return dst, err
	}
	if err := validMap(p.Labels); err != nil {
		return dst, err
	}
	var o obj
	o.open(dst)
	if ad := p.Address; ad != nil {
		if sa := ad.GetSocketAddress(); sa != nil && sa.GetNamedPort() == "" && sa.GetResolverName() == "" && !sa.GetIpv4Compat() && sa.GetNetworkNamespaceFilepath() == "" && sa.Protocol == 0 {
			if err := validStrings(sa.Address); err != nil {
				return dst, err
			}
			o.key("address")
			var a obj
			a.open(o.buf)
			a.key("socketAddress")
			var s obj
			s.open(a.buf)
			s.str("address", sa.Address)
			s.uint32("portValue", sa.GetPortValue())
			a.buf = s.close()
			o.buf = a.close()
		} else {
			js, err := marshalCompact(ad)
			if err != nil {
				return dst, err
			}
			o.raw("address", js)
		}
	}
	o.str("service", p.Service)
	if len(p.Labels) > 0 {
		o.key("labels")
		o.buf = appendMap(o.buf, p.Labels)
	}
	o.str("principal", p.Principal)
	o.str("certificate", p.Certificate)
	return o.close(), nil
}

func appendHTTP(dst []byte, id, method string, headers map[string]string, path, host, scheme string, size int64, protocol, body string, rawBody []byte) []byte {
	var o obj
	o.open(dst)
	o.str("id", id)
	o.str("method", method)
	if len(headers) > 0 {
		o.key("headers")
		o.buf = appendMap(o.buf, headers)
	}
	o.str("path", path)
	o.str("host", host)
	o.str("scheme", scheme)
	o.int64str("size", size)
	o.str("protocol", protocol)
	o.str("body", body)
	o.bytes("rawBody", rawBody)
	return o.close()
}

// appendTimestamp encodes a timestamp as protojson does: RFC 3339 in UTC
// with 0, 3, 6 or 9 fractional digits.
func appendTimestamp(dst []byte, secs int64, nanos int32) []byte {
	t := time.Unix(secs, int64(nanos)).UTC()
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, "2006-01-02T15:04:05")
	if nanos != 0 {
		frac := fmt.Appendf(nil, "%09d", nanos)
		switch {
		case nanos%1e6 == 0:
			frac = frac[:3]
		case nanos%1e3 == 0:
			frac = frac[:6]
		}
		dst = append(dst, '.')
		dst = append(dst, frac...)
	}
	return append(dst, 'Z', '"')
}

func validStrings(ss ...string) error {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%w in %q", ErrInvalidUTF8, truncate(strings.ToValidUTF8(s, "\uFFFD")))
		}
	}
	return nil
}

func validMap(m map[string]string) error {
	for k, v := range m {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("%w in the value of %q", ErrInvalidUTF8, truncate(strings.ToValidUTF8(k, "\uFFFD")))
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
