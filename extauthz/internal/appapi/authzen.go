package appapi

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/nexuspdp/nexus/extauthz/internal/checkapi"
	"github.com/nexuspdp/nexus/extauthz/internal/wire"
	"github.com/nexuspdp/nexus/pdp"
)

func (s *API) handleAuthZEN(w http.ResponseWriter, r *http.Request) {
	c, ok := decodeBody(s, w, r, pdp.IfaceAuthZEN, checkapi.ReadAuthZEN)
	if !ok {
		return
	}
	s.evaluateOne(w, r, &c)
}

// evaluateOne answers one evaluation: the decision, or the error's status.
func (s *API) evaluateOne(w http.ResponseWriter, r *http.Request, c *checkapi.Check) {
	if err := s.atRevision(r.Context(), pdp.IfaceAuthZEN, c); err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	d, err := s.PDP.Check(r.Context(), pdp.IfaceAuthZEN, c)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	writeAuthZEN(w, d)
}

func authzenResponse(d pdp.Decision) checkapi.AuthZENResponse {
	resp := checkapi.AuthZENResponse{Decision: d.Allowed}
	if d.Reason != "" {
		resp.Context = map[string]any{"reason": d.Reason}
	}
	return resp
}

// authzenError is the answer to one evaluation of a batch that failed: a
// deny whose context names the error, in the shape the specification's
// example uses ({"error": {"status", "message"}}), and its reason code.
func authzenError(err error) checkapi.AuthZENResponse {
	code, status, _ := wire.Status(err)
	return checkapi.AuthZENResponse{Context: map[string]any{
		"error":  map[string]any{"status": status, "message": wire.Describe(err)},
		"reason": code,
	}}
}

// handleAuthZENBatch answers /access/v1/evaluations. Without evaluations
// it is /access/v1/evaluation; otherwise each evaluation gets its
// decision, or its error as a deny, in request order, until the semantic
// stops the batch.
func (s *API) handleAuthZENBatch(w http.ResponseWriter, r *http.Request) {
	b, ok := decodeBody(s, w, r, pdp.IfaceAuthZEN, func(rd io.Reader) (checkapi.Batch, error) { return checkapi.ReadAuthZENBatch(rd, s.MaxBatch) })
	if !ok {
		return
	}
	if b.Single {
		s.evaluateOne(w, r, &b.Items[0].Check)
		return
	}
	cs := make([]*checkapi.Check, 0, len(b.Items))
	for i := range b.Items {
		if b.Items[i].Err == nil {
			cs = append(cs, &b.Items[i].Check)
		}
	}
	if err := s.atRevision(r.Context(), pdp.IfaceAuthZEN, cs...); err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	ctx, cancel := s.PDP.Budget(r.Context())
	defer cancel()
	resp := checkapi.AuthZENBatchResponse{Evaluations: make([]checkapi.AuthZENResponse, 0, len(b.Items))}
	for i := range b.Items {
		it := &b.Items[i]
		var e checkapi.AuthZENResponse
		switch {
		case it.Err != nil:
			s.PDP.CountError(pdp.IfaceAuthZEN, it.Err)
			e = authzenError(it.Err)
		default:
			d, err := s.PDP.Check(ctx, pdp.IfaceAuthZEN, &it.Check)
			if errors.Is(err, pdp.ErrBudgetExceeded) {
				wire.WriteError(s.Log, w, err) // the whole batch, not one item
				return
			}
			if err != nil {
				if code, status, _ := wire.Status(err); status >= 500 && s.Log != nil {
					s.Log.Error("evaluation failed", "reason", code, "err", err)
				}
				e = authzenError(err)
			} else {
				e = authzenResponse(d)
			}
		}
		resp.Evaluations = append(resp.Evaluations, e)
		if (b.Semantic == checkapi.DenyOnFirstDeny && !e.Decision) || (b.Semantic == checkapi.PermitOnFirstPermit && e.Decision) {
			break
		}
	}
	wire.WriteJSON(w, http.StatusOK, resp)
}

// authzenMetadata is the AuthZEN Policy Decision Point metadata.
type authzenMetadata struct {
	PolicyDecisionPoint       string `json:"policy_decision_point"`
	AccessEvaluationEndpoint  string `json:"access_evaluation_endpoint"`
	AccessEvaluationsEndpoint string `json:"access_evaluations_endpoint"`
	SearchSubjectEndpoint     string `json:"search_subject_endpoint"`
	SearchResourceEndpoint    string `json:"search_resource_endpoint"`
	SearchActionEndpoint      string `json:"search_action_endpoint"`
}

// handleMetadata answers GET /.well-known/authzen-configuration: the
// base URL (PublicURL, or the request's scheme and Host) and the URL of
// every AuthZEN endpoint. It needs no API key: it says where the
// endpoints are, nothing about decisions.
func (s *API) handleMetadata(w http.ResponseWriter, r *http.Request) {
	base := strings.TrimSuffix(s.PublicURL, "/")
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	wire.WriteJSON(w, http.StatusOK, authzenMetadata{
		PolicyDecisionPoint:       base,
		AccessEvaluationEndpoint:  base + "/access/v1/evaluation",
		AccessEvaluationsEndpoint: base + "/access/v1/evaluations",
		SearchSubjectEndpoint:     base + "/access/v1/search/subject",
		SearchResourceEndpoint:    base + "/access/v1/search/resource",
		SearchActionEndpoint:      base + "/access/v1/search/action",
	})
}
