package appapi

import (
	"context"
	"encoding/json"

	"github.com/nexuspdp/nexus/extauthz/internal/checkapi"
	"github.com/nexuspdp/nexus/pdp"
)

// atRevision takes the consistency token out of each check's context
// (pdp.RevisionContextKey: a revision as a JSON string or integer), so
// that it is neither policy input nor part of the decision cache's key,
// and waits until the data has reached the highest one. A malformed token
// is pdp.ErrBadRequest; a revision not reached in time is
// pdp.ErrRevisionUnavailable: the checks must not be answered.
func (s *API) atRevision(ctx context.Context, iface string, cs ...*checkapi.Check) error {
	var want pdp.Revision
	for _, c := range cs {
		v, ok := c.Context[pdp.RevisionContextKey]
		if !ok {
			continue
		}
		rev, err := parseContextRevision(v)
		if err != nil {
			s.PDP.CountError(iface, err)
			return err
		}
		want = max(want, rev)
	}
	for _, c := range cs {
		delete(c.Context, pdp.RevisionContextKey)
	}
	return s.PDP.WaitRevision(ctx, iface, want)
}

func parseContextRevision(v any) (pdp.Revision, error) {
	switch v := v.(type) {
	case string:
		return pdp.ParseRevision(v)
	case json.Number:
		return pdp.ParseRevision(v.String())
	}
	return 0, pdp.Errorf(pdp.ErrBadRequest, "context.%s must be a revision (a string or an integer), not %s", pdp.RevisionContextKey, jsonKind(v))
}

// jsonKind names the JSON kind of a decoded value, in the request's
// terms (never a Go type).
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return "another kind of value"
}
