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
//
// WriteEnvoy and WriteHTTP write the document as values to a Writer (the
// engine's ValueWriter takes them straight into the policy's memory, with
// no JSON in between); AppendEnvoy and AppendHTTP write the same values as
// JSON text, for the decision cache's keys and the decision log. One
// builder writes both, so the two cannot differ.
package input

import (
	"errors"
	"fmt"
	"iter"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

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
	// gRPC server's requests). WriteEnvoy does not check the strings
	// again. AppendEnvoy's JSON stays valid whatever they hold (a byte
	// that is not UTF-8 is written as U+FFFD); another Writer is given
	// such a string as it is.
	UTF8Checked bool
	// AnyOrder says that the Writer's objects are the same whatever order
	// their members come in, as the engine's values are (hash tables):
	// WriteEnvoy and WriteHTTP then write the members of a map (headers,
	// query parameters, metadata, a JSON body's objects) in the map's own
	// order instead of sorting its keys. AppendEnvoy and AppendHTTP,
	// whose JSON bytes the order shapes, always sort.
	AnyOrder bool
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

// AppendEnvoy appends the opa-envoy-plugin input document for req to dst
// as JSON (WriteEnvoy's document). Map keys are sorted, so that equal
// requests give equal bytes. On error it returns dst.
func AppendEnvoy(dst []byte, req *authv3.CheckRequest, opts Options) ([]byte, error) {
	return appendJSON(dst, func(b *builder) error { return b.envoy(req, opts) })
}

// WriteEnvoy writes the opa-envoy-plugin input document for req to w, the
// values AppendEnvoy writes as JSON, in the same order (a map's members
// in any order with Options.AnyOrder). On error w may hold part of a
// document: the caller discards it.
func WriteEnvoy(w Writer, req *authv3.CheckRequest, opts Options) error {
	return build(w, !opts.AnyOrder, func(b *builder) error { return b.envoy(req, opts) })
}

func (b *builder) envoy(req *authv3.CheckRequest, opts Options) error {
	a := req.GetAttributes()
	o := b.object(opts.Keep)
	if a != nil {
		if c, ok := o.member("attributes"); ok {
			if err := b.attributes(c, a, opts.UTF8Checked); err != nil {
				return err
			}
		} else if !opts.UTF8Checked {
			if err := validAttributes(a); err != nil {
				return err
			}
		}
	}
	h := a.GetRequest().GetHttp()
	return writeParsed(&o, h.GetPath(), h.GetHeaders(), h.GetBody(), h.GetRawBody(), a.GetSource().GetPrincipal(), opts)
}

// AppendHTTP appends the input document for a request that did not come
// as a CheckRequest (HTTP ext_authz and forward auth) to dst as JSON
// (WriteHTTP's document). On error it returns dst.
func AppendHTTP(dst []byte, h *HTTP, source string, opts Options) ([]byte, error) {
	return appendJSON(dst, func(b *builder) error { return b.http(h, source, opts) })
}

// WriteHTTP writes the input document for a request that did not come as
// a CheckRequest (HTTP ext_authz and forward auth) to w: the same shape,
// with attributes.request.http filled from h and
// attributes.source.address from source (host:port). On error w may hold
// part of a document: the caller discards it.
func WriteHTTP(w Writer, h *HTTP, source string, opts Options) error {
	return build(w, !opts.AnyOrder, func(b *builder) error { return b.http(h, source, opts) })
}

func (b *builder) http(h *HTTP, source string, opts Options) error {
	hf := httpFields{id: h.ID, method: h.Method, headers: h.Headers, path: h.Path, host: h.Host, scheme: h.Scheme,
		size: h.Size, protocol: h.Protocol, body: h.Body, rawBody: h.RawBody}
	if err := hf.valid(); err != nil {
		return err
	}
	if err := validStrings(source); err != nil {
		return err
	}
	o := b.object(opts.Keep)
	if ac, ok := o.member("attributes"); ok {
		a := b.object(ac)
		if source != "" {
			if sc, ok := a.member("source"); ok {
				s := b.object(sc)
				writeHostPort(&s, source)
				s.close()
			}
		}
		if rc, ok := a.member("request"); ok {
			r := b.object(rc)
			if hc, ok := r.member("http"); ok {
				if err := hf.write(b, hc); err != nil {
					return err
				}
			}
			r.close()
		}
		a.close()
	}
	return writeParsed(&o, h.Path, h.Headers, h.Body, h.RawBody, "", opts)
}

// writeHostPort writes the address member of a peer from host:port.
func writeHostPort(o *obj, hostport string) {
	host, port := hostport, uint64(0)
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 {
		if p, err := strconv.ParseUint(hostport[i+1:], 10, 32); err == nil {
			host, port = strings.Trim(hostport[:i], "[]"), p
		}
	}
	writeAddress(o, host, uint32(port), port != 0)
}

// writeAddress writes the member "address" of a peer: a socket address
// with its port (when hasPort: a set port_value oneof, even 0).
func writeAddress(o *obj, host string, port uint32, hasPort bool) {
	writeSocket(o, &corev3.SocketAddress{Address: host}, port, hasPort)
}

// writeSocket writes the member "address" of a peer whose address is the
// socket address sa with its port (when hasPort) or its named port, as
// the plugin maps the message (every populated field under its JSON name,
// the protocol as its number, a set port oneof even if zero) without
// reflection. validSocket checks its strings.
func writeSocket(o *obj, sa *corev3.SocketAddress, port uint32, hasPort bool) {
	adc, ok := o.member("address")
	if !ok {
		return
	}
	b := o.b
	ad := b.object(adc)
	if sac, ok := ad.member("socketAddress"); ok {
		s := b.object(sac)
		s.int64("protocol", int64(sa.Protocol))
		s.str("address", sa.Address)
		if hasPort {
			if _, ok := s.member("portValue"); ok {
				b.uint(uint64(port))
			}
		} else if p, named := sa.PortSpecifier.(*corev3.SocketAddress_NamedPort); named {
			if _, ok := s.member("namedPort"); ok {
				b.w.String(p.NamedPort)
			}
		}
		s.str("resolverName", sa.ResolverName)
		if sa.Ipv4Compat {
			if _, ok := s.member("ipv4Compat"); ok {
				b.w.Bool(true)
			}
		}
		s.str("networkNamespaceFilepath", sa.NetworkNamespaceFilepath)
		s.close()
	}
	ad.close()
}

func validSocket(sa *corev3.SocketAddress) error {
	return validStrings(sa.Address, sa.GetNamedPort(), sa.ResolverName, sa.NetworkNamespaceFilepath)
}

// writeParsed writes the members the plugin computes from the request:
// parsed_path, parsed_query, parsed_body, truncated_body, version and
// source_principal, and closes the document.
func writeParsed(o *obj, path string, headers map[string]string, body string, rawBody []byte, principal string, opts Options) error {
	if !opts.UTF8Checked {
		if err := validStrings(path, body, principal); err != nil {
			return err
		}
	}
	_, readPath := o.sel.Child("parsed_path")
	_, readQuery := o.sel.Child("parsed_query")
	decoded, query, err := parsePath(path, readPath, readQuery)
	if err != nil {
		return err
	}
	b := o.b
	if _, ok := o.member("parsed_path"); ok {
		b.w.BeginArray()
		var segs [16]string
		for _, seg := range appendSegments(segs[:0], decoded) {
			b.text(seg)
		}
		b.w.End()
	}
	if _, ok := o.member("parsed_query"); ok {
		b.values(query)
	}
	if !opts.SkipBody {
		// A kept body is written in place, after its key. One the policy
		// does not read is never parsed, so it cannot be refused: only
		// truncated_body, if read, is worked out (from the headers).
		var truncated bool
		if _, ok := o.member("parsed_body"); ok {
			var wrote bool
			if wrote, truncated, err = b.body(headers, body, rawBody, true); err != nil {
				return err
			}
			if !wrote {
				b.w.Null()
			}
		} else if _, ok := o.sel.Child("truncated_body"); ok {
			if _, truncated, err = b.body(headers, body, rawBody, false); err != nil {
				return err
			}
		}
		if _, ok := o.member("truncated_body"); ok {
			b.w.Bool(truncated)
		}
	}
	if _, ok := o.member("version"); ok {
		b.w.BeginObject()
		b.w.String("encoding")
		b.w.String("protojson")
		b.w.String("ext_authz")
		b.w.String("v3")
		b.w.End()
	}
	o.str("source_principal", principal)
	o.close()
	return nil
}

// parsePath splits a request path (":path", never an authority: a
// leading "//" is part of the path) at its first "?", percent-decodes the
// path part and parses the query, as opa-envoy-plugin does. A path that
// does not decode or a query that does not parse (a ";" separator, a bad
// escape) is an error, never a silently different request, whether or not
// the policy reads them. Without decode, the path is only checked
// (decoded is "" if it holds an escape); without parse, a query is only
// checked (query is nil), without making its values when it holds
// nothing ParseQuery refuses.
func parsePath(path string, decode, parse bool) (decoded string, query url.Values, err error) {
	rawPath, rawQuery, _ := strings.Cut(path, "?")
	switch {
	case strings.IndexByte(rawPath, '%') < 0:
		decoded = rawPath // url.PathUnescape's result: nothing to decode
	case !decode && wellEscaped(rawPath):
	default:
		if decoded, err = url.PathUnescape(rawPath); err != nil {
			return "", nil, requestError(ErrInvalidPath, err, "%q", truncate(path))
		}
	}
	if rawQuery == "" || !parse && plainQuery(rawQuery) {
		return decoded, nil, nil // no parameters, as ParseQuery would find
	}
	query, err = url.ParseQuery(rawQuery)
	if err != nil {
		return "", nil, requestError(ErrInvalidQuery, err, "%q", truncate(rawQuery))
	}
	return decoded, query, nil
}

// wellEscaped reports whether every "%" in s starts an escape of two hex
// digits: whether url.PathUnescape accepts s.
func wellEscaped(s string) bool {
	for {
		i := strings.IndexByte(s, '%')
		if i < 0 {
			return true
		}
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			return false
		}
		s = s[i+3:]
	}
}

// plainQuery reports whether url.ParseQuery accepts q for certain: no ";"
// (which it refuses as a separator), every "%" followed by two hex
// digits, and far fewer parameters than its limit (unless GODEBUG sets
// another). false sends q to ParseQuery for its verdict.
func plainQuery(q string) bool {
	return len(q) <= 4096 && !queryLimitSet && strings.IndexByte(q, ';') < 0 && wellEscaped(q)
}

// queryLimitSet: GODEBUG sets url.ParseQuery's limit on parameters.
var queryLimitSet = strings.Contains(os.Getenv("GODEBUG"), "urlmaxqueryparams")

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// values writes a query or form as an object, each key (sorted) to its
// list of values.
func (b *builder) values(v url.Values) { writeLists(b, v, b.text) }

// writeLists writes m as an object, each key (sorted when b.ordered) to
// the list of its values, each written by value.
func writeLists[V any](b *builder, m map[string][]V, value func(V)) {
	b.w.BeginObject()
	var kb [8]string
	for k, vs := range entries(b, m, kb[:0]) {
		b.text(k)
		b.w.BeginArray()
		for _, v := range vs {
			value(v)
		}
		b.w.End()
	}
	b.w.End()
}

// appendSegments appends the segments of parsed_path for the decoded
// path p.
func appendSegments(dst []string, p string) []string {
	p = strings.TrimLeft(p, "/")
	for {
		seg, rest, more := strings.Cut(p, "/")
		dst = append(dst, seg)
		if !more {
			return dst
		}
		p = rest
	}
}

// entries yields m's keys and values: in key order when b.ordered, the
// keys sorted in scratch (which may grow), else in the map's own order.
func entries[V any](b *builder, m map[string]V, scratch []string) iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		if !b.ordered {
			for k, v := range m {
				if !yield(k, v) {
					return
				}
			}
			return
		}
		keys := scratch
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !yield(k, m[k]) {
				return
			}
		}
	}
}

// stringMap writes m as an object (its keys sorted when b.ordered), only
// the keys of sel if it is not nil.
func (b *builder) stringMap(sel *prune.Tree, m map[string]string) {
	b.w.BeginObject()
	if sel == nil {
		var kb [8]string
		for k, v := range entries(b, m, kb[:0]) {
			b.w.String(k)
			b.w.String(v)
		}
	} else {
		for _, k := range sel.Keys() {
			if v, ok := m[k]; ok {
				b.w.String(k)
				b.w.String(v)
			}
		}
	}
	b.w.End()
}

// attributes writes the attributes: the peers (socket addresses), the
// request, the context extensions and the metadata (structs and Any) by
// hand, the rest (TLS, header maps, pipe and internal addresses) by
// reflection, to the same mapping. With checked (Options.UTF8Checked) the
// strings of the peers, the HTTP request and the context extensions are
// not checked again.
func (b *builder) attributes(sel *prune.Tree, a *authv3.AttributeContext, checked bool) error {
	o := b.object(sel)
	if a.Source != nil {
		if err := writePeer(&o, "source", a.Source, checked); err != nil {
			return err
		}
	}
	if a.Destination != nil {
		if err := writePeer(&o, "destination", a.Destination, checked); err != nil {
			return err
		}
	}
	if r := a.Request; r != nil {
		if err := writeRequest(&o, r, checked); err != nil {
			return err
		}
	}
	if len(a.ContextExtensions) > 0 {
		if !checked {
			if err := validMap(a.ContextExtensions); err != nil {
				return err
			}
		}
		if c, ok := o.member("contextExtensions"); ok {
			b.stringMap(c, a.ContextExtensions)
		}
	}
	if a.MetadataContext != nil {
		if err := writeMetadata(&o, "metadataContext", a.MetadataContext); err != nil {
			return err
		}
	}
	if a.RouteMetadataContext != nil {
		if err := writeMetadata(&o, "routeMetadataContext", a.RouteMetadataContext); err != nil {
			return err
		}
	}
	if a.TlsSession != nil {
		if err := writeGeneric(&o, "tlsSession", a.TlsSession.ProtoReflect()); err != nil {
			return err
		}
	}
	o.close()
	return nil
}

func writeRequest(parent *obj, r *authv3.AttributeContext_Request, checked bool) error {
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
	b := parent.b
	o := b.object(sel)
	if t := r.Time; t != nil {
		if c, ok := o.member("time"); ok {
			ts := b.object(c)
			ts.int64("seconds", t.Seconds)
			ts.int64("nanos", int64(t.Nanos))
			ts.close()
		}
	}
	if r.Http != nil {
		if c, ok := o.member("http"); ok {
			if err := hf.write(b, c); err != nil {
				return err
			}
		}
	}
	o.close()
	return nil
}

// validAttributes checks what attributes would refuse, without
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

// validPeer checks what writePeer would refuse.
func validPeer(p *authv3.AttributeContext_Peer) error {
	if err := validStrings(p.Service, p.Principal, p.Certificate); err != nil {
		return err
	}
	if err := validMap(p.Labels); err != nil {
		return err
	}
	if ad := p.Address; ad != nil {
		if sa := ad.GetSocketAddress(); sa != nil {
			return validSocket(sa)
		}
		return validMessage(ad.ProtoReflect())
	}
	return nil
}

// writePeer validates p (unless checked) and writes it as member name of
// parent.
func writePeer(parent *obj, name string, p *authv3.AttributeContext_Peer, checked bool) error {
	if !checked {
		if err := validPeer(p); err != nil {
			return err
		}
	}
	sel, ok := parent.member(name)
	if !ok {
		return nil
	}
	b := parent.b
	o := b.object(sel)
	if ad := p.Address; ad != nil {
		if sa := ad.GetSocketAddress(); sa != nil {
			_, hasPort := sa.PortSpecifier.(*corev3.SocketAddress_PortValue)
			writeSocket(&o, sa, sa.GetPortValue(), hasPort)
		} else if c, ok := o.member("address"); ok {
			if err := b.message(c, ad.ProtoReflect()); err != nil {
				return err
			}
		}
	}
	o.str("service", p.Service)
	if len(p.Labels) > 0 {
		if c, ok := o.member("labels"); ok {
			b.stringMap(c, p.Labels)
		}
	}
	o.str("principal", p.Principal)
	o.str("certificate", p.Certificate)
	o.close()
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

// valid checks what write writes, kept or not.
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

func (h *httpFields) write(b *builder, sel *prune.Tree) error {
	o := b.object(sel)
	o.str("id", h.id)
	o.str("method", h.method)
	if len(h.headers) > 0 {
		if c, ok := o.member("headers"); ok {
			b.stringMap(c, h.headers)
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
			if err := b.message(c, h.headerMap.ProtoReflect()); err != nil {
				return err
			}
		}
	}
	o.close()
	return nil
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
