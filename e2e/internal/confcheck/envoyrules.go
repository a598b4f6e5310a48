package confcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	jwtauthnv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	earlyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// JWTNamespace is the dynamic metadata namespace of Envoy's jwt_authn
// filter: where it puts a verified token's payload (payload_in_metadata),
// and what an ext_authz filter lists in metadata_context_namespaces to send
// it to the authorization service.
const JWTNamespace = "envoy.filters.http.jwt_authn"

// alwaysSentToHTTPAuthz are the request headers Envoy sends an HTTP
// authorization service whatever allowed_headers says.
var alwaysSentToHTTPAuthz = []string{"host", ":authority", ":method", ":path", "content-length", "authorization"}

// httpFilter is one HTTP filter of a connection manager, decoded.
type httpFilter struct {
	name string
	cfg  proto.Message // nil when the filter has no typed_config
}

// connectionManagers returns every HTTP connection manager of b's static
// listeners with its HTTP filters decoded, in order.
func connectionManagers(b *bootstrapv3.Bootstrap) (map[*hcmv3.HttpConnectionManager][]httpFilter, []*hcmv3.HttpConnectionManager, error) {
	out := map[*hcmv3.HttpConnectionManager][]httpFilter{}
	var order []*hcmv3.HttpConnectionManager
	for _, m := range EnvoyAnys(b) {
		hcm, ok := m.(*hcmv3.HttpConnectionManager)
		if !ok {
			continue
		}
		var fs []httpFilter
		for _, f := range hcm.GetHttpFilters() {
			hf := httpFilter{name: f.GetName()}
			if a := f.GetTypedConfig(); a != nil {
				msg, err := a.UnmarshalNew()
				if err != nil {
					return nil, nil, fmt.Errorf("%w: http filter %q: %w", ErrInvalid, f.GetName(), err)
				}
				hf.cfg = msg
			}
			fs = append(fs, hf)
		}
		out[hcm] = fs
		order = append(order, hcm)
	}
	return out, order, nil
}

// matchString reports whether s matches m as Envoy's StringMatcher does.
func matchString(m *matcherv3.StringMatcher, s string) bool {
	v := s
	cmp := func(a string) string { return a }
	if m.GetIgnoreCase() {
		v = strings.ToLower(s)
		cmp = strings.ToLower
	}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return v == cmp(p.Exact)
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(v, cmp(p.Prefix))
	case *matcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(v, cmp(p.Suffix))
	case *matcherv3.StringMatcher_Contains:
		return strings.Contains(v, cmp(p.Contains))
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := regexp.Compile("^(?:" + p.SafeRegex.GetRegex() + ")$")
		return err == nil && re.MatchString(s)
	}
	return false
}

func matchList(l *matcherv3.ListStringMatcher, s string) bool {
	for _, m := range l.GetPatterns() {
		if matchString(m, s) {
			return true
		}
	}
	return false
}

// authzSends reports whether the ext_authz filter a sends the client request
// header h (lower case) to its authorization service.
func authzSends(a *extauthzv3.ExtAuthz, h string) bool {
	if matchList(a.GetDisallowedHeaders(), h) {
		return false
	}
	// (http_service.authorization_request.allowed_headers, deprecated, is
	// rejected by EnvoyBootstrap before this runs.)
	allowed := a.GetAllowedHeaders()
	if a.GetHttpService() != nil {
		return slices.Contains(alwaysSentToHTTPAuthz, h) || matchList(allowed, h)
	}
	// A gRPC service gets every header unless allowed_headers narrows them.
	return allowed == nil || matchList(allowed, h)
}

// AuthzHeaders checks that every ext_authz filter of b sends its
// authorization service each of headers (lower-case request headers the
// policy reads). Envoy sends an HTTP authorization service only the headers
// allowed_headers matches, besides Host, Method, Path, Content-Length and
// Authorization; a gRPC service gets every header unless allowed_headers
// narrows them.
func AuthzHeaders(b *bootstrapv3.Bootstrap, headers []string) error {
	var errs []error
	for _, m := range EnvoyAnys(b) {
		a, ok := m.(*extauthzv3.ExtAuthz)
		if !ok {
			continue
		}
		for _, h := range headers {
			if !authzSends(a, h) {
				errs = append(errs, fmt.Errorf("%w: ext_authz (%s) does not send the %s header, which the policy reads: every such request is decided without it", ErrUnsafe, authzKind(a), h))
			}
		}
	}
	return errors.Join(errs...)
}

func authzKind(a *extauthzv3.ExtAuthz) string {
	if a.GetHttpService() != nil {
		return "HTTP service"
	}
	return "gRPC service"
}

// jwtWrites returns the request headers the providers of j write from a
// verified token (claim_to_headers, forward_payload_header), and the
// headers that carry its sub claim.
func jwtWrites(j *jwtauthnv3.JwtAuthentication) (all, sub []string) {
	for _, p := range j.GetProviders() {
		if h := p.GetForwardPayloadHeader(); h != "" {
			all = append(all, strings.ToLower(h))
		}
		for _, c := range p.GetClaimToHeaders() {
			h := strings.ToLower(c.GetHeaderName())
			all = append(all, h)
			if c.GetClaimName() == "sub" {
				sub = append(sub, h)
			}
		}
	}
	return all, sub
}

// JWTToAuthz checks that wherever Envoy's jwt_authn filter verifies tokens,
// what it verified reaches every ext_authz filter after it: a gRPC
// authorization service gets the payload as metadata (every provider sets
// payload_in_metadata and the ext_authz filter lists JWTNamespace in
// metadata_context_namespaces); an HTTP authorization service, to which
// Envoy sends no metadata, gets the sub claim in subjectHeader, which a
// provider writes with claim_to_headers and the filter sends. An ext_authz
// filter before jwt_authn decides on identities nothing verified yet.
func JWTToAuthz(b *bootstrapv3.Bootstrap, subjectHeader string) error {
	hcms, order, err := connectionManagers(b)
	if err != nil {
		return err
	}
	subjectHeader = strings.ToLower(subjectHeader)
	var errs []error
	for _, hcm := range order {
		var jwt *jwtauthnv3.JwtAuthentication
		var authzBefore []string
		for _, f := range hcms[hcm] {
			switch c := f.cfg.(type) {
			case *jwtauthnv3.JwtAuthentication:
				jwt = c
				if len(authzBefore) > 0 {
					errs = append(errs, fmt.Errorf("%w: %s: ext_authz %v runs before jwt_authn verified the token", ErrUnsafe, hcm.GetStatPrefix(), authzBefore))
				}
			case *extauthzv3.ExtAuthz:
				if jwt == nil {
					authzBefore = append(authzBefore, f.name)
					continue
				}
				if c.GetHttpService() != nil {
					_, sub := jwtWrites(jwt)
					if !slices.Contains(sub, subjectHeader) {
						errs = append(errs, fmt.Errorf("%w: %s: ext_authz (HTTP service) gets no metadata, and no jwt_authn provider copies the sub claim into %s (claim_to_headers)", ErrUnsafe, hcm.GetStatPrefix(), subjectHeader))
					} else if !authzSends(c, subjectHeader) {
						errs = append(errs, fmt.Errorf("%w: %s: ext_authz (HTTP service) does not send %s, the verified subject", ErrUnsafe, hcm.GetStatPrefix(), subjectHeader))
					}
					continue
				}
				if !slices.Contains(c.GetMetadataContextNamespaces(), JWTNamespace) {
					errs = append(errs, fmt.Errorf("%w: %s: jwt_authn runs but ext_authz does not list %s in metadata_context_namespaces: the verified payload never reaches nexus", ErrUnsafe, hcm.GetStatPrefix(), JWTNamespace))
				}
				for name, p := range jwt.GetProviders() {
					if p.GetPayloadInMetadata() == "" {
						errs = append(errs, fmt.Errorf("%w: %s: jwt_authn provider %q does not set payload_in_metadata: its verified subject never reaches ext_authz", ErrUnsafe, hcm.GetStatPrefix(), name))
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

// EdgeSubject returns the request header a Wasm filter's configuration (the
// nexus edge filter's JSON) reads the subject from: subject.header or
// subject.jwt_header; "" when it names none.
func EdgeSubject(config []byte) string {
	var c struct {
		Subject struct {
			Header    string `json:"header"`
			JWTHeader string `json:"jwt_header"`
		} `json:"subject"`
	}
	if json.Unmarshal(config, &c) != nil {
		return ""
	}
	if c.Subject.Header != "" {
		return strings.ToLower(c.Subject.Header)
	}
	return strings.ToLower(c.Subject.JWTHeader)
}

// IdentityHeadersStripped checks that a client cannot choose its identity:
// each of headers (the subject header nexus trusts), every header a
// jwt_authn provider writes from a verified token, and the subject header of
// a Wasm edge filter are removed from the client's request before any HTTP
// filter runs, by the connection manager's early_header_mutation_extensions
// or by a header_mutation filter ahead of jwt_authn, Wasm and ext_authz. A
// Wasm filter that reads a subject header must also come after the jwt_authn
// filter that writes it: before it, the header holds nothing verified.
func IdentityHeadersStripped(b *bootstrapv3.Bootstrap, headers []string) error {
	hcms, order, err := connectionManagers(b)
	if err != nil {
		return err
	}
	var errs []error
	for _, hcm := range order {
		removed := map[string]bool{}
		for _, ext := range hcm.GetEarlyHeaderMutationExtensions() {
			hm := &earlyv3.HeaderMutation{}
			if ext.GetTypedConfig().UnmarshalTo(hm) != nil {
				continue
			}
			for _, mu := range hm.GetMutations() {
				if r := mu.GetRemove(); r != "" {
					removed[strings.ToLower(r)] = true
				}
			}
		}
		identity := map[string]bool{}
		for _, h := range headers {
			identity[strings.ToLower(h)] = true
		}
		fs := hcms[hcm]
		for _, f := range fs {
			switch c := f.cfg.(type) {
			case *jwtauthnv3.JwtAuthentication:
				all, _ := jwtWrites(c)
				for _, h := range all {
					identity[h] = true
				}
			case *wasmv3.Wasm:
				if h := wasmSubject(c); h != "" {
					identity[h] = true
				}
			}
		}
		// Removal by a header_mutation filter counts until the first filter
		// that reads or writes identity.
	filters:
		for _, f := range fs {
			switch c := f.cfg.(type) {
			case *headermutationv3.HeaderMutation:
				for _, mu := range c.GetMutations().GetRequestMutations() {
					if r := mu.GetRemove(); r != "" {
						removed[strings.ToLower(r)] = true
					}
				}
			case *jwtauthnv3.JwtAuthentication, *wasmv3.Wasm, *extauthzv3.ExtAuthz:
				break filters
			}
		}
		for h := range identity {
			if !removed[h] {
				errs = append(errs, fmt.Errorf("%w: %s: a client's own %s header is not removed before the filters (early_header_mutation or header_mutation): it can name any user", ErrUnsafe, hcm.GetStatPrefix(), h))
			}
		}
		// A Wasm filter reading a header that jwt_authn writes comes after it.
		writes := map[string]bool{}
		for _, f := range fs {
			switch c := f.cfg.(type) {
			case *jwtauthnv3.JwtAuthentication:
				all, _ := jwtWrites(c)
				for _, h := range all {
					writes[h] = true
				}
			case *wasmv3.Wasm:
				h := wasmSubject(c)
				if h != "" && !writes[h] {
					errs = append(errs, fmt.Errorf("%w: %s: Wasm filter %q reads the subject from %s, which no jwt_authn filter before it writes from a verified token", ErrUnsafe, hcm.GetStatPrefix(), f.name, h))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// wasmSubject returns the subject header of a Wasm filter whose
// configuration is a JSON string (the nexus edge filter's).
func wasmSubject(w *wasmv3.Wasm) string {
	sv := &wrapperspb.StringValue{}
	if w.GetConfig().GetConfiguration().UnmarshalTo(sv) != nil {
		return ""
	}
	return EdgeSubject([]byte(sv.GetValue()))
}

// RequireJWT checks that every HTTP connection manager of b verifies JWTs
// with jwt_authn before its ext_authz filters.
func RequireJWT(b *bootstrapv3.Bootstrap) error {
	hcms, order, err := connectionManagers(b)
	if err != nil {
		return err
	}
	var errs []error
	for _, hcm := range order {
		found := false
		for _, f := range hcms[hcm] {
			if _, ok := f.cfg.(*jwtauthnv3.JwtAuthentication); ok {
				found = true
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("%w: %s: no jwt_authn filter: nothing verifies who the user is", ErrUnsafe, hcm.GetStatPrefix()))
		}
	}
	return errors.Join(errs...)
}
