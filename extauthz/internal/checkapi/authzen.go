package checkapi

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/nexuspdp/nexus/extauthz/internal/wire"
	"github.com/nexuspdp/nexus/pdp"
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
		// Evaluations stay raw so that one malformed item fails alone.
		Evaluations []json.RawMessage `json:"evaluations"`
		Options     struct {
			Semantic string `json:"evaluations_semantic"`
		} `json:"options"`
	}
	authzenSearch struct {
		authzenRequest
		Page *struct {
			Token string      `json:"token"`
			Limit json.Number `json:"limit"`
		} `json:"page"`
	}
)

// Evaluation semantics of an AuthZEN batch.
const (
	ExecuteAll          = "execute_all"
	DenyOnFirstDeny     = "deny_on_first_deny"
	PermitOnFirstPermit = "permit_on_first_permit"
)

// ReadAuthZEN reads the body of POST /access/v1/evaluation. Every field
// the specification requires is required: subject.type, subject.id,
// action.name, resource.type and resource.id.
func ReadAuthZEN(r io.Reader) (Check, error) {
	var s, res authzenEntity
	var a authzenAction
	if s, a, res, ok := readAuthZENFlat(r, &s, &a, &res); ok {
		return checkOf(s, a, res, nil)
	}
	var req authzenRequest
	if err := decode(r, &req); err != nil {
		return Check{}, err
	}
	return req.check(authzenRequest{})
}

// Batch is a POST /access/v1/evaluations request.
type Batch struct {
	// Single is set when the request has no evaluations (the array is
	// absent or empty): it is then one evaluation, answered as
	// /access/v1/evaluation answers, and Items holds it.
	Single bool
	// Semantic is the evaluation semantic (ExecuteAll by default).
	Semantic string
	// Items are the evaluations in request order, each with the
	// top-level defaults applied, or the error that makes it invalid.
	Items []BatchItem
}

// BatchItem is one evaluation of a batch: its check, or why it is not one.
type BatchItem struct {
	Check Check
	Err   error
}

// ReadAuthZENBatch reads the body of POST /access/v1/evaluations: the
// top-level subject, action, resource and context are defaults for each
// evaluation (an evaluation's own entity replaces the default whole). An
// error is the whole request's (malformed JSON, an unknown semantic, too
// many evaluations, or, for a request without evaluations, a missing
// field); an evaluation that is not valid gets its error in its item.
func ReadAuthZENBatch(r io.Reader, max int) (Batch, error) {
	var req authzenBatch
	if err := decode(r, &req); err != nil {
		return Batch{}, err
	}
	b := Batch{Semantic: req.Options.Semantic}
	switch b.Semantic {
	case "":
		b.Semantic = ExecuteAll
	case ExecuteAll, DenyOnFirstDeny, PermitOnFirstPermit:
	default:
		return Batch{}, fmt.Errorf("%w: options.evaluations_semantic %q is not one of %s, %s, %s", ErrBadRequest, b.Semantic, ExecuteAll, DenyOnFirstDeny, PermitOnFirstPermit)
	}
	if len(req.Evaluations) == 0 {
		c, err := req.check(authzenRequest{})
		if err != nil {
			return Batch{}, err
		}
		b.Single, b.Items = true, []BatchItem{{Check: c}}
		return b, nil
	}
	if len(req.Evaluations) > max {
		return Batch{}, pdp.Errorf(pdp.ErrTooLarge, "%d evaluations, at most %d in one request", len(req.Evaluations), max)
	}
	b.Items = make([]BatchItem, len(req.Evaluations))
	for i, raw := range req.Evaluations {
		var e authzenRequest
		err := decodeRaw(raw, &e, fmt.Sprintf("evaluations[%d]", i))
		if err == nil {
			b.Items[i].Check, err = e.check(req.authzenRequest)
		}
		if err != nil {
			b.Items[i].Err = fmt.Errorf("evaluations[%d]: %w", i, err)
		}
	}
	return b, nil
}

// decodeRaw decodes one element of a request; a type error names it.
func decodeRaw(raw json.RawMessage, v any, name string) error {
	return wire.DecodeJSON(raw, v, false, name)
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
	return checkOf(s, a, res, ctx)
}

// checkOf is the check of subject s, action a, resource res and context
// ctx; nil for an entity or the action is an error.
func checkOf(s *authzenEntity, a *authzenAction, res *authzenEntity, ctx map[string]any) (Check, error) {
	switch {
	case s == nil:
		return Check{}, fmt.Errorf("%w: subject is required", ErrBadRequest)
	case a == nil:
		return Check{}, fmt.Errorf("%w: action is required", ErrBadRequest)
	case res == nil:
		return Check{}, fmt.Errorf("%w: resource is required", ErrBadRequest)
	}
	c, err := toCheck(s, a, res, ctx)
	if err != nil {
		return Check{}, err
	}
	if err := c.Validate(); err != nil {
		return Check{}, err
	}
	if c.Resource.ID == "" {
		return Check{}, fmt.Errorf("%w: resource.id is required", ErrBadRequest)
	}
	return c, nil
}

// toCheck maps the entities to a check: properties become attributes, a
// resource's properties.tenant its tenant.
func toCheck(s *authzenEntity, a *authzenAction, res *authzenEntity, ctx map[string]any) (Check, error) {
	if a.Name == "" {
		return Check{}, fmt.Errorf("%w: action.name is required", ErrBadRequest)
	}
	c := Check{
		Subject:          Subject{Type: s.Type, ID: s.ID, Attributes: s.Properties},
		Action:           a.Name,
		ActionAttributes: a.Properties,
		Resource:         Resource{Type: res.Type, ID: res.ID, Attributes: res.Properties},
		Context:          ctx,
	}
	if t, ok := res.Properties["tenant"]; ok {
		ts, ok := t.(string)
		if !ok {
			return Check{}, fmt.Errorf("%w: resource.properties.tenant must be a string", ErrBadRequest)
		}
		c.Resource.Tenant = ts
	}
	return c, nil
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

// What an AuthZEN search looks for.
const (
	SearchSubject  = "subject"
	SearchResource = "resource"
	SearchAction   = "action"
)

// Search is an AuthZEN search request (/access/v1/search/subject,
// /resource or /action). The searched-for entity's id (the action, for an
// action search) is ignored, as the specification says; Check holds the
// rest, with that id (or the action) empty.
type Search struct {
	Kind  string
	Check Check
	// PageToken is page.token ("" for the first page); PageLimit is
	// page.limit (0 when absent).
	PageToken string
	PageLimit int
}

// ReadAuthZENSearch reads the body of a search of kind (SearchSubject,
// SearchResource or SearchAction). Required: the searched-for entity's
// type (none for actions), the action's name (not for an action search)
// and the type and id of every other entity.
func ReadAuthZENSearch(r io.Reader, kind string) (Search, error) {
	var req authzenSearch
	if err := decode(r, &req); err != nil {
		return Search{}, err
	}
	s, a, res := req.Subject, req.Action, req.Resource
	switch {
	case s == nil:
		return Search{}, fmt.Errorf("%w: subject is required", ErrBadRequest)
	case a == nil && kind != SearchAction:
		return Search{}, fmt.Errorf("%w: action is required", ErrBadRequest)
	case res == nil:
		return Search{}, fmt.Errorf("%w: resource is required", ErrBadRequest)
	}
	subj, rsrc := *s, *res
	act := authzenAction{Name: "-"} // a placeholder, validated but never used
	switch kind {
	case SearchSubject:
		subj.ID = "-"
	case SearchResource:
		rsrc.ID = "-"
	case SearchAction:
	default:
		return Search{}, fmt.Errorf("checkapi: unknown search kind %q", kind)
	}
	if kind != SearchAction {
		act = *a
	}
	c, err := toCheck(&subj, &act, &rsrc, req.Context)
	if err != nil {
		return Search{}, err
	}
	if err := c.Validate(); err != nil {
		return Search{}, err
	}
	if c.Resource.ID == "" {
		return Search{}, fmt.Errorf("%w: resource.id is required", ErrBadRequest)
	}
	switch kind {
	case SearchSubject:
		c.Subject.ID = ""
	case SearchResource:
		c.Resource.ID = ""
	case SearchAction:
		c.Action, c.ActionAttributes = "", nil
	}
	out := Search{Kind: kind, Check: c}
	if p := req.Page; p != nil {
		out.PageToken = p.Token
		if p.Limit != "" {
			n, err := p.Limit.Int64()
			if err != nil || n < 0 {
				return Search{}, fmt.Errorf("%w: page.limit must be a non-negative integer, not %s", ErrBadRequest, p.Limit)
			}
			out.PageLimit = int(min(n, 1<<31-1))
		}
	}
	return out, nil
}

// SearchPage is the page object of a search answer.
type SearchPage struct {
	NextToken string `json:"next_token"`
	Count     int    `json:"count"`
}

// SearchResponse is the body of a search answer: subjects or resources
// ({"type","id"}) or actions ({"name"}).
type SearchResponse struct {
	Page    SearchPage `json:"page"`
	Results []any      `json:"results"`
}
