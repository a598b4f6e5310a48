package input

import (
	"strings"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/nexuspdp/nexus/pdp/internal/prune"
)

// JWTFilter is the filter_metadata key under which Envoy's jwt_authn
// filter writes the payloads it verified.
const JWTFilter = "envoy.filters.http.jwt_authn"

// Fields are the parts of a CheckRequest's input document that nexus'
// default policy reads, taken from the request without writing the
// document: attributes.request.http.method and headers, parsed_path, and
// attributes.metadataContext.filterMetadata[JWTFilter].
type Fields struct {
	Method string
	// Path is parsed_path: the percent-decoded path, without its query,
	// split at "/" after its leading slashes.
	Path []string
	// Headers are the request's headers (not copied).
	Headers map[string]string
	// JWT is the JSON the document holds for the jwt_authn filter's
	// metadata, nil when the request has none.
	JWT []byte
}

// keepNothing is a selection that keeps no member: AppendEnvoy with it
// only checks the request.
var keepNothing = prune.New(nil)

// EnvoyFields checks req as AppendEnvoy(dst, req, opts) does, with the
// same errors (opts.Keep is not used), and sets f from it; f.Path is
// appended to f.Path[:0]. It returns dst with whatever it wrote there
// while checking, for reuse.
func EnvoyFields(dst []byte, req *authv3.CheckRequest, opts Options, f *Fields) ([]byte, error) {
	opts.Keep = keepNothing
	dst, err := AppendEnvoy(dst[:0], req, opts)
	if err != nil {
		return dst, err
	}
	a := req.GetAttributes()
	h := a.GetRequest().GetHttp()
	if err := f.set(h.GetMethod(), h.GetPath(), h.GetHeaders()); err != nil {
		return dst, err
	}
	if s, ok := a.GetMetadataContext().GetFilterMetadata()[JWTFilter]; ok {
		if f.JWT, err = appendJSON(nil, func(b *builder) error { return b.structValue(nil, s) }); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// HTTPFields checks h as AppendHTTP(dst, h, source, opts) does, with the
// same errors (opts.Keep is not used), and sets f from it, as EnvoyFields
// does. A forward-auth request has no metadata: f.JWT is nil.
func HTTPFields(dst []byte, h *HTTP, source string, opts Options, f *Fields) ([]byte, error) {
	opts.Keep = keepNothing
	dst, err := AppendHTTP(dst[:0], h, source, opts)
	if err != nil {
		return dst, err
	}
	return dst, f.set(h.Method, h.Path, h.Headers)
}

// set sets f's method, headers and path (parsed_path of the request path)
// and clears its JWT.
func (f *Fields) set(method, path string, headers map[string]string) error {
	decoded, err := decodePath(path)
	if err != nil {
		return err
	}
	f.Method, f.Headers, f.JWT = method, headers, nil
	f.Path = appendSegments(f.Path[:0], decoded)
	return nil
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
