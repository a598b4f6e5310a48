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

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/nexuspdp/nexus/pdp/internal/prune"
)

// ErrInvalidUTF8 reports a string field that is not valid UTF-8.
var ErrInvalidUTF8 = errors.New("input: invalid UTF-8")

// ErrInvalidPath reports a request path that cannot be percent-decoded.
var ErrInvalidPath = errors.New("input: invalid request path")

// ErrInvalidQuery reports a query string that cannot be parsed (a ";"
// separator, a bad percent escape).
var ErrInvalidQuery = errors.New("input: invalid query")

// ErrInvalidBody reports a JSON or form body that cannot be parsed.
var ErrInvalidBody = errors.New("input: invalid request body")

// Options tune how a request becomes an input document.
type Options struct {
	// SkipBody leaves parsed_body null even for JSON and form bodies.
	SkipBody bool
	// Keep, if not nil, is the part of the document the policy reads: the
	// document is written already pruned, the same bytes as Keep.Append
	// of the whole document, without writing what would be dropped.
	// Validation (UTF-8, path, body) is the same either way.
	Keep *prune.Tree
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
	if opts.Keep != nil && rare(a) {
		// Fields spliced from protojson are pruned from the whole
		// document.
		whole, err := AppendEnvoy(nil, req, Options{SkipBody: opts.SkipBody})
		if err != nil {
			return dst, err
		}
		out, err := opts.Keep.Append(dst, whole)
		if err != nil {
			return dst, fmt.Errorf("input: %w", err)
		}
		return out, nil
	}
	o := obj{sel: opts.Keep}
	o.open(dst)
	if a != nil {
		if c, ok := o.member("attributes"); ok {
			var err error
			o.buf, err = appendAttributes(o.buf, c, a)
			if err != nil {
				return dst, err
			}
		} else if err := validAttributes(a); err != nil {
			return dst, err
		}
	}
	h := a.GetRequest().GetHttp()
	return appendParsed(&o, h.GetPath(), h.GetHeaders(), h.GetBody(), h.GetRawBody(), opts)
}

// rare reports whether a has fields that AppendEnvoy splices from
// protojson's encoding.
func rare(a *authv3.AttributeContext) bool {
	if a.GetMetadataContext() != nil || a.GetRouteMetadataContext() != nil || a.GetTlsSession() != nil {
		return true
	}
	h := a.GetRequest().GetHttp()
	if h.GetQuery() != "" || h.GetFragment() != "" || h.GetHeaderMap() != nil {
		return true
	}
	return !simpleAddress(a.GetSource().GetAddress()) || !simpleAddress(a.GetDestination().GetAddress())
}

// validAttributes validates what appendAttributes would write, without
// writing it: for attributes the policy does not read, so that a request
// is refused or accepted alike whatever the policy reads. AppendEnvoy
// only calls it for attributes without the rare fields it splices.
func validAttributes(a *authv3.AttributeContext) error {
	for _, p := range []*authv3.AttributeContext_Peer{a.Source, a.Destination} {
		if p != nil {
			if err := validPeer(p); err != nil {
				return err
			}
		}
	}
	if err := validRequest(a.Request); err != nil {
		return err
	}
	return validMap(a.ContextExtensions)
}

// validRequest validates the request attributes that appendAttributes
// writes itself.
func validRequest(r *authv3.AttributeContext_Request) error {
	if r == nil {
		return nil
	}
	if r.Time != nil {
		if err := r.Time.CheckValid(); err != nil {
			return fmt.Errorf("input: request time: %w", err)
		}
	}
	if h := r.Http; h != nil {
		if err := validStrings(h.Id, h.Method, h.Path, h.Host, h.Scheme, h.Query, h.Fragment, h.Protocol, h.Body); err != nil {
			return err
		}
		return validMap(h.Headers)
	}
	return nil
}

// validPeer validates the peer fields that appendPeer writes itself.
func validPeer(p *authv3.AttributeContext_Peer) error {
	if err := validStrings(p.Service, p.Principal, p.Certificate); err != nil {
		return err
	}
	if err := validMap(p.Labels); err != nil {
		return err
	}
	if ad := p.Address; ad != nil && simpleAddress(ad) {
		return validStrings(ad.GetSocketAddress().GetAddress())
	}
	return nil
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
	o := obj{sel: opts.Keep}
	o.open(dst)
	if ac, ok := o.member("attributes"); ok {
		a := obj{sel: ac}
		a.open(o.buf)
		if source != "" {
			if sc, ok := a.member("source"); ok {
				s := obj{sel: sc}
				s.open(a.buf)
				s.buf = appendSocketAddress(&s, source)
				a.buf = s.close()
			}
		}
		if rc, ok := a.member("request"); ok {
			r := obj{sel: rc}
			r.open(a.buf)
			if hc, ok := r.member("http"); ok {
				r.buf = appendHTTP(r.buf, hc, h.ID, h.Method, h.Headers, h.Path, h.Host, h.Scheme, h.Size, h.Protocol, h.Body, h.RawBody)
			}
			a.buf = r.close()
		}
		o.buf = a.close()
	}
	return appendParsed(&o, h.Path, h.Headers, h.Body, h.RawBody, opts)
}

func appendSocketAddress(o *obj, hostport string) []byte {
	host, port := hostport, uint64(0)
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 {
		if p, err := strconv.ParseUint(hostport[i+1:], 10, 32); err == nil {
			host, port = strings.Trim(hostport[:i], "[]"), p
		}
	}
	return appendAddress(o, host, uint32(port))
}

// appendAddress writes the member "address" of a peer.
func appendAddress(o *obj, host string, port uint32) []byte {
	adc, ok := o.member("address")
	if !ok {
		return o.buf
	}
	ad := obj{sel: adc}
	ad.open(o.buf)
	if sac, ok := ad.member("socketAddress"); ok {
		sa := obj{sel: sac}
		sa.open(ad.buf)
		sa.str("address", host)
		sa.uint32("portValue", port)
		ad.buf = sa.close()
	}
	return ad.close()
}

func appendParsed(o *obj, path string, headers map[string]string, body string, rawBody []byte, opts Options) ([]byte, error) {
	if err := validStrings(path, body); err != nil {
		return o.buf, err
	}
	decoded, query, err := parsePath(path)
	if err != nil {
		return o.buf, err
	}
	if _, ok := o.member("parsed_path"); ok {
		o.buf = append(o.buf, '[')
		p := strings.TrimLeft(decoded, "/")
		for i := 0; ; i++ {
			if i > 0 {
				o.buf = append(o.buf, ',')
			}
			seg, rest, more := strings.Cut(p, "/")
			o.buf = appendString(o.buf, seg)
			if !more {
				break
			}
			p = rest
		}
		o.buf = append(o.buf, ']')
	}
	if _, ok := o.member("parsed_query"); ok {
		o.buf = appendValues(o.buf, query)
	}
	_, wantBody := o.sel.Child("parsed_body")
	parsed, truncated, err := parseBody(headers, body, rawBody, opts, wantBody)
	if err != nil {
		return o.buf, err
	}
	if _, ok := o.member("parsed_body"); ok {
		if parsed == nil {
			o.buf = append(o.buf, "null"...)
		} else {
			o.buf = append(o.buf, parsed...)
		}
	}
	if _, ok := o.member("truncated_body"); ok {
		o.buf = strconv.AppendBool(o.buf, truncated)
	}
	if _, ok := o.member("version"); ok {
		o.buf = append(o.buf, `{"encoding":"protojson","ext_authz":"v3"}`...)
	}
	return o.close(), nil
}

// parsePath splits a request path (":path", never an authority: a
// leading "//" is part of the path) at its first "?", percent-decodes the
// path part and parses the query, as opa-envoy-plugin does. A path that
// does not decode or a query that does not parse (a ";" separator, a bad
// escape) is an error, never a silently different request.
func parsePath(path string) (decoded string, query url.Values, err error) {
	rawPath, rawQuery, _ := strings.Cut(path, "?")
	decoded, err = url.PathUnescape(rawPath)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %q: %w", ErrInvalidPath, truncate(path), err)
	}
	if rawQuery == "" {
		return decoded, nil, nil
	}
	query, err = url.ParseQuery(rawQuery)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %q: %w", ErrInvalidQuery, truncate(rawQuery), err)
	}
	return decoded, query, nil
}

// parseBody returns the body as compact JSON when it is a JSON or form
// body, nil when it is neither, and truncated when Envoy sent less of the
// body than its Content-Length announced.
// With !want a valid body is only checked, not compacted.
func parseBody(headers map[string]string, body string, rawBody []byte, opts Options, want bool) (js []byte, truncated bool, err error) {
	if opts.SkipBody {
		return nil, false, nil
	}
	if body == "" && len(rawBody) > 0 {
		body = string(rawBody)
		if err := validStrings(body); err != nil {
			return nil, false, fmt.Errorf("%w: raw body: %w", ErrInvalidBody, err)
		}
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
		if !want {
			if !json.Valid([]byte(body)) {
				var v any
				err := json.Unmarshal([]byte(body), &v)
				return nil, false, fmt.Errorf("%w: JSON: %w", ErrInvalidBody, err)
			}
			return nil, false, nil
		}
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

// appendMap appends m as a JSON object with its keys sorted, only the keys
// of sel if it is not nil.
func appendMap(dst []byte, sel *prune.Tree, m map[string]string) []byte {
	if sel == nil {
		return appendSorted(dst, m, appendString)
	}
	dst = append(dst, '{')
	first := true
	for _, k := range sel.Keys() {
		v, ok := m[k]
		if !ok {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendString(dst, k)
		dst = append(dst, ':')
		dst = appendString(dst, v)
	}
	return append(dst, '}')
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

func appendAttributes(dst []byte, sel *prune.Tree, a *authv3.AttributeContext) ([]byte, error) {
	o := obj{sel: sel}
	o.open(dst)
	var err error
	if a.Source != nil {
		if o.buf, err = appendPeer(&o, "source", a.Source); err != nil {
			return dst, err
		}
	}
	if a.Destination != nil {
		if o.buf, err = appendPeer(&o, "destination", a.Destination); err != nil {
			return dst, err
		}
	}
	if r := a.Request; r != nil {
		if err := validRequest(r); err != nil {
			return dst, err
		}
		h := r.Http
		if rc, ok := o.member("request"); ok {
			ro := obj{sel: rc}
			ro.open(o.buf)
			if r.Time != nil {
				if _, ok := ro.member("time"); ok {
					ro.buf = appendTimestamp(ro.buf, r.Time.Seconds, r.Time.Nanos)
				}
			}
			if h != nil {
				if hc, ok := ro.member("http"); ok {
					ro.buf = appendHTTP(ro.buf, hc, h.Id, h.Method, h.Headers, h.Path, h.Host, h.Scheme, h.Size, h.Protocol, h.Body, h.RawBody)
					if h.Query != "" || h.Fragment != "" || h.HeaderMap != nil {
						// Rare fields: splice protojson's own encoding
						// of them (AppendEnvoy prunes such documents
						// whole).
						ro.buf = ro.buf[:len(ro.buf)-1]
						extra := &authv3.AttributeContext_HttpRequest{Query: h.Query, Fragment: h.Fragment, HeaderMap: h.HeaderMap}
						if ro.buf, err = spliceMembers(ro.buf, extra); err != nil {
							return dst, err
						}
						ro.buf = append(ro.buf, '}')
					}
				}
			}
			o.buf = ro.close()
		}
	}
	if len(a.ContextExtensions) > 0 {
		if err := validMap(a.ContextExtensions); err != nil {
			return dst, err
		}
		if c, ok := o.member("contextExtensions"); ok {
			o.buf = appendMap(o.buf, c, a.ContextExtensions)
		}
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

// simpleAddress reports whether ad is nil or a socket address that
// appendPeer writes itself.
func simpleAddress(ad *corev3.Address) bool {
	if ad == nil {
		return true
	}
	sa := ad.GetSocketAddress()
	return sa != nil && sa.GetNamedPort() == "" && sa.GetResolverName() == "" && !sa.GetIpv4Compat() && sa.GetNetworkNamespaceFilepath() == "" && sa.Protocol == 0
}

// appendPeer validates p and writes it as member name of parent.
func appendPeer(parent *obj, name string, p *authv3.AttributeContext_Peer) ([]byte, error) {
	if err := validPeer(p); err != nil {
		return parent.buf, err
	}
	sel, ok := parent.member(name)
	if !ok {
		return parent.buf, nil
	}
	o := obj{sel: sel}
	o.open(parent.buf)
	if ad := p.Address; ad != nil {
		if simpleAddress(ad) {
			sa := ad.GetSocketAddress()
			o.buf = appendAddress(&o, sa.Address, sa.GetPortValue())
		} else if _, ok := o.member("address"); ok {
			js, err := marshalCompact(ad)
			if err != nil {
				return parent.buf, err
			}
			o.buf = append(o.buf, js...)
		}
	}
	o.str("service", p.Service)
	if len(p.Labels) > 0 {
		if c, ok := o.member("labels"); ok {
			o.buf = appendMap(o.buf, c, p.Labels)
		}
	}
	o.str("principal", p.Principal)
	o.str("certificate", p.Certificate)
	return o.close(), nil
}

func appendHTTP(dst []byte, sel *prune.Tree, id, method string, headers map[string]string, path, host, scheme string, size int64, protocol, body string, rawBody []byte) []byte {
	o := obj{sel: sel}
	o.open(dst)
	o.str("id", id)
	o.str("method", method)
	if len(headers) > 0 {
		if c, ok := o.member("headers"); ok {
			o.buf = appendMap(o.buf, c, headers)
		}
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
