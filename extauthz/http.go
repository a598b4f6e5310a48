package extauthz

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/nexuspdp/nexus/extauthz/internal/checkapi"
	"github.com/nexuspdp/nexus/extauthz/internal/input"
	"github.com/nexuspdp/nexus/extauthz/internal/prune"
)

// forwardAuthPrefix is where HTTP ext_authz and forward-auth requests
// arrive.
const forwardAuthPrefix = "/ext_authz"

func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(forwardAuthPrefix+"/", s.handleForwardAuth)
	mux.HandleFunc(forwardAuthPrefix, s.handleForwardAuth)
	mux.HandleFunc("POST /access/v1/evaluation", s.handleAuthZEN)
	mux.HandleFunc("POST /access/v1/evaluations", s.handleAuthZENBatch)
	mux.HandleFunc("POST /allowed", s.handleAllowed)
	mux.HandleFunc("POST /allowed/bulk", s.handleAllowedBulk)
	mux.HandleFunc("POST /user-permissions", s.handleUserPermissions)
	mux.HandleFunc("POST /authorized_users", s.handleAuthorizedUsers)
	mux.HandleFunc("GET /healthz", s.handleHealthz)
	mux.HandleFunc("GET /readyz", s.handleReadyz)
	return mux
}

// readBody reads a bounded request body; more than MaxBodyBytes is
// ErrTooLarge.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, ErrTooLarge
	}
	return body, err
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers with the error's status and a JSON body that names
// it precisely.
func writeError(w http.ResponseWriter, err error) {
	code, status, _ := classify(err)
	writeJSON(w, status, map[string]string{"error": err.Error(), "reason": code})
}

// handleForwardAuth answers Envoy's http_service, nginx auth_request,
// Caddy forward_auth and Traefik ForwardAuth: 200 with the policy's
// headers on allow, the policy's status (default 403) on deny.
func (s *Server) handleForwardAuth(w http.ResponseWriter, r *http.Request) {
	method, uri := r.Method, strings.TrimPrefix(r.URL.RequestURI(), forwardAuthPrefix)
	if uri == "" {
		uri = "/"
	}
	for _, h := range [][2]string{{"X-Forwarded-Method", "X-Forwarded-Uri"}, {"X-Original-Method", "X-Original-URI"}} {
		if u := r.Header.Get(h[1]); u != "" {
			uri = u
			if m := r.Header.Get(h[0]); m != "" {
				method = m
			}
			break
		}
	}
	host := r.Host
	if fh := r.Header.Get("X-Forwarded-Host"); fh != "" {
		host = fh
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.denyHTTP(w, err)
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
	req := input.HTTP{
		ID: r.Header.Get("X-Request-Id"), Method: method, Headers: hdrs, Path: uri, Host: host,
		Scheme: scheme, Size: r.ContentLength, Protocol: r.Proto, Body: string(body),
	}
	d, err := s.p.decideBuilt(r.Context(), ifaceHTTP, s.cfg.EnvoyEntrypoint, meta{action: method, resource: uri}, func(dst []byte, keep *prune.Tree) ([]byte, error) {
		return input.AppendHTTP(dst, &req, r.RemoteAddr, input.Options{Keep: keep})
	})
	if err != nil {
		s.denyHTTP(w, err)
		return
	}
	for _, h := range d.Headers {
		w.Header().Add(h.Key, h.Value)
	}
	if d.Allowed {
		w.WriteHeader(http.StatusOK)
		return
	}
	status := d.HTTPStatus
	if status == 0 {
		status = http.StatusForbidden
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, d.Body)
}

func (s *Server) denyHTTP(w http.ResponseWriter, err error) {
	code, _, _ := classify(err)
	w.Header().Set("X-Nexus-Reason", code)
	writeError(w, err)
}

// check runs one application check through the authz entrypoint.
func (s *Server) check(ctx context.Context, iface string, c *checkapi.Check) (decision, error) {
	if s.cfg.AuthzEntrypoint == DefaultAuthzEntrypoint && !s.p.knownType(c.Resource.Type) {
		err := errorf(errUnknownType, "resource.type %q is not a type of the schema", c.Resource.Type)
		s.p.countError(iface, err)
		return decision{}, err
	}
	md := meta{subject: c.Subject.Type + ":" + c.Subject.ID, action: c.Action, resource: c.Resource.Type + ":" + c.Resource.ID}
	return s.p.decideDocument(ctx, iface, s.cfg.AuthzEntrypoint, c.Input(), md)
}

func (s *Server) handleAuthZEN(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	c, err := checkapi.ReadAuthZEN(strings.NewReader(string(body)))
	if err != nil {
		s.p.countError(ifaceAuthZEN, err)
		writeError(w, err)
		return
	}
	d, err := s.check(r.Context(), ifaceAuthZEN, &c)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, authzenResponse(d))
}

func authzenResponse(d decision) checkapi.AuthZENResponse {
	resp := checkapi.AuthZENResponse{Decision: d.Allowed}
	if d.Reason != "" {
		resp.Context = map[string]any{"reason": d.Reason}
	}
	return resp
}

func (s *Server) handleAuthZENBatch(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	cs, sem, err := checkapi.ReadAuthZENBatch(strings.NewReader(string(body)), s.cfg.MaxBatch)
	if err != nil {
		s.p.countError(ifaceAuthZEN, err)
		writeError(w, err)
		return
	}
	resp := checkapi.AuthZENBatchResponse{Evaluations: make([]checkapi.AuthZENResponse, 0, len(cs))}
	for i := range cs {
		d, err := s.check(r.Context(), ifaceAuthZEN, &cs[i])
		var e checkapi.AuthZENResponse
		if err != nil {
			code, _, _ := classify(err)
			e = checkapi.AuthZENResponse{Context: map[string]any{"error": err.Error(), "reason": code}}
		} else {
			e = authzenResponse(d)
		}
		resp.Evaluations = append(resp.Evaluations, e)
		if (sem == checkapi.DenyOnFirstDeny && !e.Decision) || (sem == checkapi.PermitOnFirstPermit && e.Decision) {
			break
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

func permitResponse(d decision) checkapi.PermitResponse {
	resp := checkapi.PermitResponse{Allow: d.Allowed, Result: d.Allowed}
	if d.Reason != "" {
		resp.Debug = map[string]any{"reason": d.Reason}
	}
	return resp
}

func (s *Server) handleAllowed(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	c, err := checkapi.ReadPermit(strings.NewReader(string(body)))
	if err != nil {
		s.p.countError(ifacePermit, err)
		writeError(w, err)
		return
	}
	d, err := s.check(r.Context(), ifacePermit, &c)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, permitResponse(d))
}

func (s *Server) handleAllowedBulk(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	cs, err := checkapi.ReadPermitBulk(strings.NewReader(string(body)), s.cfg.MaxBatch)
	if err != nil {
		s.p.countError(ifacePermit, err)
		writeError(w, err)
		return
	}
	resp := checkapi.PermitBulkResponse{Allow: make([]checkapi.PermitResponse, len(cs))}
	for i := range cs {
		d, err := s.check(r.Context(), ifacePermit, &cs[i])
		if err != nil {
			code, _, _ := classify(err)
			resp.Allow[i] = checkapi.PermitResponse{Debug: map[string]any{"error": err.Error(), "reason": code}}
			continue
		}
		resp.Allow[i] = permitResponse(d)
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleReadyz(w http.ResponseWriter, _ *http.Request) {
	if !s.p.ready.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": "no policy loaded"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "policy_revision": *s.p.policyRev()})
}
