package checkapi

import (
	"fmt"
	"io"
)

// AuthZEN Authorization API 1.0 request shapes.
type (
	authzenEntity struct {
		Type       string         `json:"type"`
		ID         string         `json:"id"`
		Properties map[string]any `json:"properties"`
	}
	authzenAction struct {
		Name       string         `json:"name"`
		Properties map[string]any `json:"properties"`
	}
	authzenRequest struct {
		Subject  *authzenEntity `json:"subject"`
		Action   *authzenAction `json:"action"`
		Resource *authzenEntity `json:"resource"`
		Context  map[string]any `json:"context"`
	}
	authzenBatch struct {
		authzenRequest
		Evaluations []authzenRequest `json:"evaluations"`
		Options     struct {
			Semantic string `json:"evaluations_semantic"`
		} `json:"options"`
	}
)

// Evaluation semantics of an AuthZEN batch.
const (
	ExecuteAll          = "execute_all"
	DenyOnFirstDeny     = "deny_on_first_deny"
	PermitOnFirstPermit = "permit_on_first_permit"
)

// ReadAuthZEN reads the body of POST /access/v1/evaluation.
func ReadAuthZEN(r io.Reader) (Check, error) {
	var req authzenRequest
	if err := decode(r, &req); err != nil {
		return Check{}, err
	}
	return req.check(authzenRequest{})
}

// ReadAuthZENBatch reads the body of POST /access/v1/evaluations: the
// top-level subject, action, resource and context are defaults for each
// evaluation. It returns the checks and the evaluation semantic.
func ReadAuthZENBatch(r io.Reader, max int) ([]Check, string, error) {
	var req authzenBatch
	if err := decode(r, &req); err != nil {
		return nil, "", err
	}
	sem := req.Options.Semantic
	switch sem {
	case "":
		sem = ExecuteAll
	case ExecuteAll, DenyOnFirstDeny, PermitOnFirstPermit:
	default:
		return nil, "", fmt.Errorf("%w: options.evaluations_semantic %q is not one of %s, %s, %s", ErrBadRequest, sem, ExecuteAll, DenyOnFirstDeny, PermitOnFirstPermit)
	}
	if len(req.Evaluations) == 0 {
		c, err := req.check(authzenRequest{})
		return []Check{c}, sem, err
	}
	if len(req.Evaluations) > max {
		return nil, "", fmt.Errorf("%w: %d evaluations, at most %d in one request", ErrBadRequest, len(req.Evaluations), max)
	}
	out := make([]Check, len(req.Evaluations))
	for i, e := range req.Evaluations {
		c, err := e.check(req.authzenRequest)
		if err != nil {
			return nil, "", fmt.Errorf("evaluations[%d]: %w", i, err)
		}
		out[i] = c
	}
	return out, sem, nil
}

func (r authzenRequest) check(def authzenRequest) (Check, error) {
	s, a, res, ctx := r.Subject, r.Action, r.Resource, r.Context
	if s == nil {
		s = def.Subject
	}
	if a == nil {
		a = def.Action
	}
	if res == nil {
		res = def.Resource
	}
	if ctx == nil {
		ctx = def.Context
	}
	switch {
	case s == nil:
		return Check{}, fmt.Errorf("%w: subject is required", ErrBadRequest)
	case a == nil:
		return Check{}, fmt.Errorf("%w: action is required", ErrBadRequest)
	case res == nil:
		return Check{}, fmt.Errorf("%w: resource is required", ErrBadRequest)
	}
	c := Check{
		Subject:  Subject{Type: s.Type, ID: s.ID, Attributes: s.Properties},
		Action:   a.Name,
		Resource: Resource{Type: res.Type, ID: res.ID, Attributes: res.Properties},
		Context:  ctx,
	}
	if t, ok := res.Properties["tenant"]; ok {
		ts, ok := t.(string)
		if !ok {
			return Check{}, fmt.Errorf("%w: resource.properties.tenant must be a string", ErrBadRequest)
		}
		c.Resource.Tenant = ts
	}
	return c, c.Validate()
}

// AuthZENResponse is the body of an evaluation's answer.
type AuthZENResponse struct {
	Decision bool           `json:"decision"`
	Context  map[string]any `json:"context,omitempty"`
}

// AuthZENBatchResponse is the body of an evaluations answer.
type AuthZENBatchResponse struct {
	Evaluations []AuthZENResponse `json:"evaluations"`
}
