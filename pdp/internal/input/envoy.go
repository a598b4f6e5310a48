// Package input builds the policy input documents that nexus evaluates:
// the opa-envoy-plugin input from an Envoy CheckRequest or a forward-auth
// HTTP request, so that existing OPA-Envoy policies run unchanged.
//
// The document is the one opa-envoy-plugin builds:
//
//	attributes        the CheckRequest's attributes, mapped field by field
//	                  as the plugin maps them (see proto.go): JSON names,
//	                  int64 as numbers, a Timestamp as {"seconds","nanos"}
//	parsed_path       the percent-decoded path split at "/"
//	parsed_query      the query, each key to its list of values
//	parsed_body       a JSON, form or multipart body, parsed (else null)
//	truncated_body    whether Envoy sent only part of the body
//	version           {"encoding": "protojson", "ext_authz": "v3"}
//	source_principal  attributes.source.principal, when there is one
//
// With Options.SkipBody (the plugin's skip-request-body-parse) the body is
// not read at all, and parsed_body and truncated_body are absent. With
// Options.Keep the body is parsed only when the policy reads parsed_body.
package input

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/nexuspdp/nexus/internal/jsonw"
	"github.com/nexuspdp/nexus/pdp/internal/prune"
)

// ErrInvalidUTF8 reports a string field that is not valid UTF-8.
var ErrInvalidUTF8 = errors.New("input: invalid UTF-8")

// ErrInvalidPath reports a request path that cannot be percent-decoded.
var ErrInvalidPath = errors.New("input: invalid request path")

// ErrInvalidQuery reports a query string that cannot be parsed (a ";"
// separator, a bad percent escape).
var ErrInvalidQuery = errors.New("input: invalid query")

// ErrInvalidBody reports a JSON, form or multipart body that cannot be
// parsed, or a content-length that is not a number.
var ErrInvalidBody = errors.New("input: invalid request body")

// RequestError is a request that cannot become an input document because
// a part of it does not parse: Kind is ErrInvalidPath, ErrInvalidQuery or
// ErrInvalidBody, Cause the parser's own error (the text opa-envoy-plugin
// answers after "request_parse_error: ", as its parsers are the same).
type RequestError struct {
	Kind  error
	What  string // what did not parse, for the message
	Cause error
}

func (e *RequestError) Error() string {
	return e.Kind.Error() + ": " + e.What + ": " + e.Cause.Error()
}

// Unwrap returns Kind and Cause.
func (e *RequestError) Unwrap() []error { return []error{e.Kind, e.Cause} }

func requestError(kind error, cause error, format string, args ...any) error {
	return &RequestError{Kind: kind, What: fmt.Sprintf(format, args...), Cause: cause}
}

// Options tune how a request becomes an input document.
type Options struct {
	// SkipBody does not read the body (opa-envoy-plugin's
	// skip-request-body-parse): parsed_body and truncated_body are left
	// out of the document, and a body that does not parse is no error.
	SkipBody bool
	// Keep, if not nil, is the part of the document the policy reads: the
	// document is written already pruned, the same bytes as Keep.Append
	// of the whole document, without writing what would be dropped.
	// Validation (UTF-8, path, query) is the same either way, but for the
	// body: one the policy does not read (parsed_body) is not parsed, so
	// a malformed one is no error; the content-length is still checked
	// when it reads truncated_body.
	Keep *prune.Tree
	// UTF8Checked says that every string of the CheckRequest is known to
	// be UTF-8: it was decoded from protobuf's wire format, whose proto3
	// decoding refuses any string field that is not (the ext_authz
	// gRPC server's requests). AppendEnvoy does not check the strings
	// again. Strings it writes stay valid JSON whatever they hold.
	UTF8Checked bool
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

// AppendEnvoy appends the opa-envoy-plugin input document for req to dst.
// Map keys are sorted, so that equal requests give equal bytes.
func AppendEnvoy(dst []byte, req *authv3.CheckRequest, opts Options) ([]byte, error) {
	a := req.GetAttributes()
	o := obj{sel: opts.Keep}
	o.open(dst)
	if a != nil {
		if c, ok := o.member("attributes"); ok {
			var err error
			if o.buf, err = appendAttributes(o.buf, c, a, opts.UTF8Checked); err != nil {
				return dst, err
			}
		} else if !opts.UTF8Checked {
			if err := validAttributes(a); err != nil {
				return dst, err
			}
		}
	}
	h := a.GetRequest().GetHttp()
	out, err := appendParsed(&o, h.GetPath(), h.GetHeaders(), h.GetBody(), h.GetRawBody(), a.GetSource().GetPrincipal(), opts)
	if err != nil {
		return dst, err
	}
	return out, nil
}

// AppendHTTP appends the input document for a request that did not come
// as a CheckRequest (HTTP ext_authz and forward auth): the same shape, with
// attributes.request.http filled from h and attributes.source.address from
// source (host:port).
func AppendHTTP(dst []byte, h *HTTP, source string, opts Options) ([]byte, error) {
	hf := httpFields{id: h.ID, method: h.Method, headers: h.Headers, path: h.Path, host: h.Host, scheme: h.Scheme,
		size: h.Size, protocol: h.Protocol, body: h.Body, rawBody: h.RawBody}
	if err := hf.valid(); err != nil {
		return dst, err
	}
	if err := validStrings(source); err != nil {
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
				appendHostPort(&s, source)
				a.buf = s.close()
			}
		}
		if rc, ok := a.member("request"); ok {
			r := obj{sel: rc}
			r.open(a.buf)
			if hc, ok := r.member("http"); ok {
				var err error
				if r.buf, err = hf.append(r.buf, hc); err != nil {
					return dst, err
				}
			}
			a.buf = r.close()
		}
		o.buf = a.close()
	}
	out, err := appendParsed(&o, h.Path, h.Headers, h.Body, h.RawBody, "", opts)
	if err != nil {
		return dst, err
	}
	return out, nil
}

// appendHostPort writes the address member of a peer from host:port.
func appendHostPort(o *obj, hostport string) {
	host, port := hostport, uint64(0)
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 {
		if p, err := strconv.ParseUint(hostport[i+1:], 10, 32); err == nil {
			host, port = strings.Trim(hostport[:i], "[]"), p
		}
	}
	appendAddress(o, host, uint32(port), port != 0)
}

// appendAddress writes the member "address" of a peer: a socket address
// with its port (when hasPort: a set port_value oneof, even 0).
func appendAddress(o *obj, host string, port uint32, hasPort bool) {
	adc, ok := o.member("address")
	if !ok {
		return
	}
	ad := obj{sel: adc}
	ad.open(o.buf)
	if sac, ok := ad.member("socketAddress"); ok {
		sa := obj{sel: sac}
		sa.open(ad.buf)
		sa.str("address", host)
		if hasPort {
			if _, ok := sa.member("portValue"); ok {
				sa.buf = strconv.AppendUint(sa.buf, uint64(port), 10)
			}
		}
		ad.buf = sa.close()
	}
	o.buf = ad.close()
}

// appendParsed writes the members the plugin computes from the request:
// parsed_path, parsed_query, parsed_body, truncated_body, version and
// source_principal, and closes the document.
func appendParsed(o *obj, path string, headers map[string]string, body string, rawBody []byte, principal string, opts Options) ([]byte, error) {
	if !opts.UTF8Checked {
		if err := validStrings(path, body, principal); err != nil {
			return o.buf, err
		}
	}
	decoded, query, err := parsePath(path)
	if err != nil {
		return o.buf, err
	}
	if _, ok := o.member("parsed_path"); ok {
		o.buf = append(o.buf, '[')
		var segs [16]string
		for i, seg := range appendSegments(segs[:0], decoded) {
			if i > 0 {
				o.buf = append(o.buf, ',')
			}
			o.buf = appendString(o.buf, seg)
		}
		o.buf = append(o.buf, ']')
	}
	if _, ok := o.member("parsed_query"); ok {
		o.buf = appendValues(o.buf, query)
	}
	if !opts.SkipBody {
		// A kept body is written in place, after its key. One the policy
		// does not read is never parsed, so it cannot be refused: only
		// truncated_body, if read, is worked out (from the headers).
		var truncated bool
		if _, ok := o.member("parsed_body"); ok {
			mark := len(o.buf)
			if o.buf, truncated, err = appendBody(o.buf, headers, body, rawBody, true); err != nil {
				return o.buf, err
			}
			if len(o.buf) == mark {
				o.buf = append(o.buf, "null"...)
			}
		} else if _, ok := o.sel.Child("truncated_body"); ok {
			if _, truncated, err = appendBody(nil, headers, body, rawBody, false); err != nil {
				return o.buf, err
			}
		}
		if _, ok := o.member("truncated_body"); ok {
			o.buf = strconv.AppendBool(o.buf, truncated)
		}
	}
	if _, ok := o.member("version"); ok {
		o.buf = append(o.buf, `{"encoding":"protojson","ext_authz":"v3"}`...)
	}
	o.str("source_principal", principal)
	return o.close(), nil
}

// parsePath splits a request path (":path", never an authority: a
// leading "//" is part of the path) at its first "?", percent-decodes the
// path part and parses the query, as opa-envoy-plugin does. A path that
// does not decode or a query that does not parse (a ";" separator, a bad
// escape) is an error, never a silently different request.
func parsePath(path string) (decoded string, query url.Values, err error) {
	decoded, err = decodePath(path)
	if err != nil {
		return "", nil, err
	}
	_, rawQuery, _ := strings.Cut(path, "?")
	if rawQuery == "" {
		return decoded, nil, nil // no parameters, as ParseQuery would find
	}
	query, err = url.ParseQuery(rawQuery)
	if err != nil {
		return "", nil, requestError(ErrInvalidQuery, err, "%q", truncate(rawQuery))
	}
	return decoded, query, nil
}

// decodePath is parsePath's decoded path alone: the query is not parsed.
func decodePath(path string) (string, error) {
	rawPath, _, _ := strings.Cut(path, "?")
	decoded, err := url.PathUnescape(rawPath)
	if err != nil {
		return "", requestError(ErrInvalidPath, err, "%q", truncate(path))
	}
	return decoded, nil
}

func appendValues(dst []byte, v url.Values) []byte {
	return jsonw.Object(dst, v, func(dst []byte, vs []string) []byte {
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
		return jsonw.Object(dst, m, appendString)
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

// appendAttributes writes the attributes: the fields every request has
// by hand, the rest (metadata, TLS, header maps, other addresses) by
// reflection, to the same mapping. With checked (Options.UTF8Checked)
// the strings of the peers, the HTTP request and the context extensions
// are not checked again.
func appendAttributes(dst []byte, sel *prune.Tree, a *authv3.AttributeContext, checked bool) ([]byte, error) {
	o := obj{sel: sel}
	o.open(dst)
	if a.Source != nil {
		if err := appendPeer(&o, "source", a.Source, checked); err != nil {
			return dst, err
		}
	}
	if a.Destination != nil {
		if err := appendPeer(&o, "destination", a.Destination, checked); err != nil {
			return dst, err
		}
	}
	if r := a.Request; r != nil {
		if err := appendRequest(&o, r, checked); err != nil {
			return dst, err
		}
	}
	if len(a.ContextExtensions) > 0 {
		if !checked {
			if err := validMap(a.ContextExtensions); err != nil {
				return dst, err
			}
		}
		if c, ok := o.member("contextExtensions"); ok {
			o.buf = appendMap(o.buf, c, a.ContextExtensions)
		}
	}
	if a.MetadataContext != nil {
		if err := appendMetadata(&o, "metadataContext", a.MetadataContext); err != nil {
			return dst, err
		}
	}
	if a.RouteMetadataContext != nil {
		if err := appendMetadata(&o, "routeMetadataContext", a.RouteMetadataContext); err != nil {
			return dst, err
		}
	}
	if a.TlsSession != nil {
		if err := appendGeneric(&o, "tlsSession", a.TlsSession.ProtoReflect()); err != nil {
			return dst, err
		}
	}
	return o.close(), nil
}

func appendRequest(parent *obj, r *authv3.AttributeContext_Request, checked bool) error {
	var hf httpFields
	if h := r.Http; h != nil {
		hf = httpFields{id: h.Id, method: h.Method, headers: h.Headers, headerMap: h.HeaderMap, path: h.Path, host: h.Host,
			scheme: h.Scheme, query: h.Query, fragment: h.Fragment, size: h.Size, protocol: h.Protocol, body: h.Body, rawBody: h.RawBody}
		if !checked {
			if err := hf.valid(); err != nil {
				return err
			}
		}
	}
	sel, ok := parent.member("request")
	if !ok {
		return nil
	}
	o := obj{sel: sel}
	o.open(parent.buf)
	if t := r.Time; t != nil {
		if c, ok := o.member("time"); ok {
			ts := obj{sel: c}
			ts.open(o.buf)
			ts.int64("seconds", t.Seconds)
			ts.int64("nanos", int64(t.Nanos))
			o.buf = ts.close()
		}
	}
	if r.Http != nil {
		if c, ok := o.member("http"); ok {
			var err error
			if o.buf, err = hf.append(o.buf, c); err != nil {
				return err
			}
		}
	}
	parent.buf = o.close()
	return nil
}

// simpleSocket returns ad's socket address if appendPeer writes it by hand:
// an address and a port value, nothing else.
func simpleSocket(ad *corev3.Address) (*corev3.SocketAddress, bool) {
	sa := ad.GetSocketAddress()
	if sa == nil || sa.Protocol != 0 || sa.GetNamedPort() != "" || sa.ResolverName != "" || sa.Ipv4Compat || sa.NetworkNamespaceFilepath != "" {
		return nil, false
	}
	return sa, true
}

// validAttributes checks what appendAttributes would refuse, without
// writing anything.
func validAttributes(a *authv3.AttributeContext) error {
	for _, p := range []*authv3.AttributeContext_Peer{a.Source, a.Destination} {
		if p != nil {
			if err := validPeer(p); err != nil {
				return err
			}
		}
	}
	if h := a.GetRequest().GetHttp(); h != nil {
		hf := httpFields{id: h.Id, method: h.Method, headers: h.Headers, headerMap: h.HeaderMap, path: h.Path, host: h.Host,
			scheme: h.Scheme, query: h.Query, fragment: h.Fragment, protocol: h.Protocol, body: h.Body}
		if err := hf.valid(); err != nil {
			return err
		}
	}
	if err := validMap(a.ContextExtensions); err != nil {
		return err
	}
	for _, m := range []*corev3.Metadata{a.MetadataContext, a.RouteMetadataContext} {
		if m != nil {
			if err := validMetadata(m); err != nil {
				return err
			}
		}
	}
	if a.TlsSession != nil {
		return validMessage(a.TlsSession.ProtoReflect())
	}
	return nil
}

// validPeer checks what appendPeer would refuse.
func validPeer(p *authv3.AttributeContext_Peer) error {
	if err := validStrings(p.Service, p.Principal, p.Certificate); err != nil {
		return err
	}
	if err := validMap(p.Labels); err != nil {
		return err
	}
	if ad := p.Address; ad != nil {
		if sa, ok := simpleSocket(ad); ok {
			return validStrings(sa.Address)
		}
		return validMessage(ad.ProtoReflect())
	}
	return nil
}

// appendPeer validates p (unless checked) and writes it as member name
// of parent.
func appendPeer(parent *obj, name string, p *authv3.AttributeContext_Peer, checked bool) error {
	if !checked {
		if err := validPeer(p); err != nil {
			return err
		}
	}
	sel, ok := parent.member(name)
	if !ok {
		return nil
	}
	o := obj{sel: sel}
	o.open(parent.buf)
	if ad := p.Address; ad != nil {
		if sa, ok := simpleSocket(ad); ok {
			_, hasPort := sa.PortSpecifier.(*corev3.SocketAddress_PortValue)
			appendAddress(&o, sa.Address, sa.GetPortValue(), hasPort)
		} else if c, ok := o.member("address"); ok {
			var err error
			if o.buf, err = appendMessage(o.buf, c, ad.ProtoReflect()); err != nil {
				return err
			}
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
	parent.buf = o.close()
	return nil
}

// httpFields are the fields of AttributeContext.HttpRequest.
type httpFields struct {
	id, method         string
	headers            map[string]string
	headerMap          *corev3.HeaderMap
	path, host, scheme string
	query, fragment    string
	size               int64
	protocol, body     string
	rawBody            []byte
}

// valid checks what append writes, kept or not.
func (h *httpFields) valid() error {
	if err := validStrings(h.id, h.method, h.path, h.host, h.scheme, h.query, h.fragment, h.protocol, h.body); err != nil {
		return err
	}
	if err := validMap(h.headers); err != nil {
		return err
	}
	if h.headerMap != nil {
		return validMessage(h.headerMap.ProtoReflect())
	}
	return nil
}

func (h *httpFields) append(dst []byte, sel *prune.Tree) ([]byte, error) {
	o := obj{sel: sel}
	o.open(dst)
	o.str("id", h.id)
	o.str("method", h.method)
	if len(h.headers) > 0 {
		if c, ok := o.member("headers"); ok {
			o.buf = appendMap(o.buf, c, h.headers)
		}
	}
	o.str("path", h.path)
	o.str("host", h.host)
	o.str("scheme", h.scheme)
	o.str("query", h.query)
	o.str("fragment", h.fragment)
	o.int64("size", h.size)
	o.str("protocol", h.protocol)
	o.str("body", h.body)
	o.bytes("rawBody", h.rawBody)
	if h.headerMap != nil {
		if c, ok := o.member("headerMap"); ok {
			var err error
			if o.buf, err = appendMessage(o.buf, c, h.headerMap.ProtoReflect()); err != nil {
				return dst, err
			}
		}
	}
	return o.close(), nil
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
