// Package forwardauth is the HTTP authorization transport: Envoy's HTTP
// ext_authz (http_service), nginx auth_request, Caddy forward_auth and
// Traefik ForwardAuth. It maps the proxied request to the decision core's
// HTTP request and the decision back to a status, headers and a body.
package forwardauth

import (
	"io"
	"net/http"
	"strings"

	"github.com/nexuspdp/nexus/extauthz/internal/wire"
	"github.com/nexuspdp/nexus/pdp"
)

// Prefix is where HTTP ext_authz and forward-auth requests arrive; the
// rest of the path is the proxied request's path unless a forwarding
// header names it.
const Prefix = "/ext_authz"

// Handler answers forward-auth requests: 200 with the policy's headers on
// allow, the policy's status (default 403, and 403 for a status below 300)
// and body on deny.
type Handler struct {
	PDP *pdp.PDP
	// MaxBodyBytes bounds the request body.
	MaxBodyBytes int64
}

// Register adds the handler under Prefix to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.Handle(Prefix+"/", h)
	mux.Handle(Prefix, h)
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	method, uri, err := proxiedRequest(r)
	if err != nil {
		deny(w, err)
		return
	}
	host := r.Host
	if fh := r.Header.Get("X-Forwarded-Host"); fh != "" {
		host = fh
	}
	body, err := wire.ReadBody(w, r, h.MaxBodyBytes)
	if err != nil {
		deny(w, err)
		return
	}
	if err := h.atRevision(r); err != nil {
		deny(w, err)
		return
	}
	hdrs := make(map[string]string, len(r.Header)+1)
	for k, vs := range r.Header {
		hdrs[strings.ToLower(k)] = strings.Join(vs, ",")
	}
	if _, ok := hdrs["host"]; !ok && host != "" {
		hdrs["host"] = host
	}
	scheme := "http"
	if p := r.Header.Get("X-Forwarded-Proto"); p != "" {
		scheme = p
	} else if r.TLS != nil {
		scheme = "https"
	}
	req := pdp.HTTPRequest{
		ID: r.Header.Get("X-Request-Id"), Method: method, Headers: hdrs, Path: uri, Host: host,
		Scheme: scheme, Size: r.ContentLength, Protocol: r.Proto, Body: string(body),
	}
	d, err := h.PDP.HTTP(r.Context(), pdp.IfaceHTTP, &req, r.RemoteAddr)
	if err != nil {
		deny(w, err)
		return
	}
	for _, hd := range d.Headers {
		w.Header().Add(hd.Key, hd.Value)
	}
	if d.Allowed {
		w.WriteHeader(http.StatusOK)
		return
	}
	// A proxy reads any 2xx as an allow, and an informational status is
	// not an answer: a denial in one of those is answered 403.
	status := d.HTTPStatus
	if status < 300 {
		status = http.StatusForbidden
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, d.Body)
}

// proxiedRequest returns the method and URI of the request a proxy asks
// about. Envoy's http_service appends the path to Prefix; nginx sets
// X-Original-Method/X-Original-URI and Caddy and Traefik
// X-Forwarded-Method/X-Forwarded-Uri. A proxy sets its own family and
// replaces a client's copy of it, but passes the other family on as the
// client sent it: so when the sources disagree, the request is refused
// (400) instead of nexus choosing the one a client may have forged.
//
// When the path is appended and the check itself is not a GET, the check
// is the proxied request as Envoy's http_service sends it: its own method
// is the request's, and a method header that names another is refused
// (400) like a URI header that names another path. A GET with the path
// appended may still carry its method in a header: nginx's and HAProxy's
// subrequests are GETs whatever the request was.
func proxiedRequest(r *http.Request) (method, uri string, err error) {
	method, uri = r.Method, strings.TrimPrefix(r.URL.RequestURI(), Prefix)
	fromPath := uri != "" && uri != "/"
	if uri == "" {
		uri = "/"
	}
	// A header family names the method too; the path does not (nginx's
	// and HAProxy's subrequests are GETs whatever the request was).
	var methods, uris []string
	for _, fh := range [][2]string{{"X-Forwarded-Method", "X-Forwarded-Uri"}, {"X-Original-Method", "X-Original-URI"}} {
		if u := r.Header.Get(fh[1]); u != "" {
			uris = append(uris, u)
			if m := r.Header.Get(fh[0]); m != "" {
				methods = append(methods, m)
			}
		}
	}
	if fromPath {
		uris = append(uris, uri)
		if r.Method != http.MethodGet {
			// The check's own method first: it is what a header must match.
			methods = append([]string{r.Method}, methods...)
		}
	}
	for _, vs := range [][]string{uris, methods} {
		for _, v := range vs[min(1, len(vs)):] {
			if v != vs[0] {
				return "", "", pdp.Errorf(pdp.ErrBadRequest, "the proxied request is named twice, differently (%q and %q): send one of the path after %s, X-Forwarded-Method/-Uri or X-Original-Method/-URI", vs[0], v, Prefix)
			}
		}
	}
	if len(uris) > 0 {
		uri = uris[0]
	}
	if len(methods) > 0 {
		method = methods[0]
	}
	return method, uri, nil
}

// atRevision waits until the data reaches the request's consistency token
// (the X-Nexus-Revision header), if it carries one: a malformed or
// repeated token is a bad request (400), a revision not reached in time
// revision_unavailable (503).
func (h *Handler) atRevision(r *http.Request) error {
	vs := r.Header.Values(pdp.RevisionHeader)
	if len(vs) == 0 {
		return nil
	}
	var err error
	var rev pdp.Revision
	if len(vs) > 1 {
		err = pdp.Errorf(pdp.ErrBadRequest, "%s given %d times", pdp.RevisionHeader, len(vs))
	} else {
		rev, err = pdp.ParseRevision(vs[0])
	}
	if err != nil {
		h.PDP.CountError(pdp.IfaceHTTP, err)
		return err
	}
	return h.PDP.WaitRevision(r.Context(), pdp.IfaceHTTP, rev)
}

func deny(w http.ResponseWriter, err error) {
	w.Header().Set("X-Nexus-Reason", pdp.Code(err))
	wire.WriteError(nil, w, err) // the core logged a failed decision
}
