// Package appapi is the transport of the application APIs: the AuthZEN
// Authorization API 1.0 (evaluation, evaluations, the subject, resource
// and action searches, and the metadata document) and the
// Permit-compatible PDP API (/allowed, /allowed/bulk,
// /allowed/all-tenants, /allowed_url, /nginx_allowed, /kong,
// /user-permissions, /user-tenants, /authorized_users). It maps their JSON bodies to the
// decision core's checks and the decisions back; the listings and
// searches read the relationship store for candidates and confirm each
// one through the policy.
package appapi

import (
	"bytes"
	"context"
	"crypto/subtle"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/extauthz/internal/wire"
	"github.com/nexuspdp/nexus/pdp"
)

// Store is what the listings read of the relationship store.
type Store interface {
	Schema(ctx context.Context) (*schema.Schema, error)
	Read(ctx context.Context, f datastore.Filter) ([]api.Tuple, error)
	AppendRoles(ctx context.Context, dst []string, subject api.Subject, tenant string) ([]string, error)
	LookupResources(ctx context.Context, subject api.Subject, permission, resourceType string) ([]string, error)
	LookupSubjects(ctx context.Context, object api.Object, permission, subjectType string) ([]string, error)
}

var _ Store = (*datastore.BoltStore)(nil)

// API serves the application endpoints.
type API struct {
	PDP   *pdp.PDP
	Store Store
	// MaxBodyBytes bounds request bodies; MaxBatch the checks of one
	// request and the results of one search page. A request over either
	// is refused with 413, naming the limit.
	MaxBodyBytes int64
	MaxBatch     int
	// APIKey is the bearer token every endpoint but the metadata document
	// requires; "" leaves them open.
	APIKey string
	// PublicURL is the base URL applications reach this listener at,
	// for the AuthZEN metadata document; "" means the scheme and Host of
	// each metadata request.
	PublicURL string
	// Log receives the details of server-side failures.
	Log *slog.Logger
}

// Register adds the endpoints to mux.
func (s *API) Register(mux *http.ServeMux) {
	mux.Handle("GET /.well-known/authzen-configuration", requestID(http.HandlerFunc(s.handleMetadata)))
	for path, h := range map[string]http.HandlerFunc{
		"/access/v1/evaluation":      s.handleAuthZEN,
		"/access/v1/evaluations":     s.handleAuthZENBatch,
		"/access/v1/search/subject":  s.handleSearch(searchSubject),
		"/access/v1/search/resource": s.handleSearch(searchResource),
		"/access/v1/search/action":   s.handleSearch(searchAction),
	} {
		mux.Handle("POST "+path, requestID(s.auth(s.jsonOnly(h))))
	}
	for path, h := range map[string]http.HandlerFunc{
		"/allowed":             s.handleAllowed,
		"/allowed/bulk":        s.handleAllowedBulk,
		"/allowed/all-tenants": s.handleAllowedAllTenants,
		"/allowed_url":         s.handleAllowedURL,
		"/user-permissions":    s.handleUserPermissions,
		"/user-tenants":        s.handleUserTenants,
		"/authorized_users":    s.handleAuthorizedUsers,
	} {
		mux.Handle("POST "+path, requestID(s.auth(h)))
	}
	// nginx's auth_request sends the original request's method.
	mux.Handle("/nginx_allowed", requestID(s.auth(http.HandlerFunc(s.handleNginxAllowed))))
	// Kong's OPA plugin sends no credentials (see handleKong).
	mux.Handle("POST /kong", requestID(http.HandlerFunc(s.handleKong)))
}

// auth requires the API key when one is configured: "Authorization:
// Bearer KEY", the scheme in any case, as Permit's SDKs send it.
func (s *API) auth(h http.Handler) http.Handler {
	if s.APIKey == "" {
		return h
	}
	want := []byte(s.APIKey)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, key, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(key)), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="nexus"`)
			wire.WriteJSON(w, http.StatusUnauthorized, map[string]string{"error": "a valid API key is required (Authorization: Bearer KEY)", "reason": "unauthorized"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// requestIDKey is X-Request-ID as net/http stores it (canonical): looked
// up and set as it is, it is not spelt anew for each request.
const requestIDKey = "X-Request-Id"

// requestID echoes the request's X-Request-ID on the answer, as AuthZEN
// requires (and whatever the answer is), and refuses a request whose path
// or query is not valid UTF-8 (wire.CheckURL).
func requestID(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ids := r.Header[requestIDKey]; len(ids) > 0 && ids[0] != "" {
			// The request's own slice, its first value alone: net/http
			// copies the answer's headers before it writes them, and
			// appending to it copies too.
			w.Header()[requestIDKey] = ids[:1:1]
		}
		if err := wire.CheckURL(r); err != nil {
			wire.WriteError(nil, w, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// jsonOnly refuses a body that is not application/json, as AuthZEN's
// HTTPS binding requires.
func (s *API) jsonOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if ct == "application/json" { // what ParseMediaType would accept, without its map
			h(w, r)
			return
		}
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			err := pdp.Errorf(pdp.ErrBadRequest, "the Content-Type must be application/json, not %q", ct)
			s.PDP.CountError(pdp.IfaceAuthZEN, err)
			wire.WriteError(s.Log, w, err)
			return
		}
		h(w, r)
	}
}

// decodeBody reads the request body and decodes it with read. A body that
// cannot be read or decoded is answered (and a decoding failure counted)
// here, and ok is false.
func decodeBody[T any](s *API, w http.ResponseWriter, r *http.Request, iface string, read func(io.Reader) (T, error)) (v T, ok bool) {
	body, err := wire.ReadJSON(w, r, s.MaxBodyBytes)
	if err != nil {
		s.PDP.CountError(iface, err)
		wire.WriteError(s.Log, w, err)
		return v, false
	}
	// A bytes.Buffer: the readers take its bytes without copying them.
	if v, err = read(bytes.NewBuffer(body)); err != nil {
		s.PDP.CountError(iface, err)
		wire.WriteError(s.Log, w, err)
		return v, false
	}
	return v, true
}
