package edge

import (
	"encoding/json"
	"fmt"

	"github.com/nexuspdp/nexus/api"
)

// grants is a compiled role: which actions it grants on which types.
type grants struct {
	all    bool                // "*:*"
	anyOn  map[string]struct{} // actions granted on every type ("*:action")
	byType map[string]actions  // type -> actions
}

type actions struct {
	all   bool // "type:*"
	names map[string]struct{}
}

func (g *grants) allows(typ, action string) bool {
	if g.all {
		return true
	}
	if _, ok := g.anyOn[action]; ok {
		return true
	}
	a, ok := g.byType[typ]
	if !ok {
		return false
	}
	if a.all {
		return true
	}
	_, ok = a.names[action]
	return ok
}

// Snapshot is a validated api.EdgeSnapshot compiled for lookups.
type Snapshot struct {
	// Revision is the snapshot's datastore revision.
	Revision uint64
	types    map[string]bool                 // resource type -> pure RBAC
	users    map[string]map[string][]*grants // subject -> tenant -> roles
}

// DecodeSnapshot decodes, validates and compiles a snapshot reply body.
func DecodeSnapshot(body []byte) (*Snapshot, error) {
	var s api.EdgeSnapshot
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	return CompileSnapshot(&s)
}

// CompileSnapshot validates s and builds its lookup tables.
func CompileSnapshot(s *api.EdgeSnapshot) (*Snapshot, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	out := &Snapshot{
		Revision: s.Revision,
		types:    make(map[string]bool, len(s.ResourceTypes)),
		users:    make(map[string]map[string][]*grants, len(s.Assignments)),
	}
	for t, mode := range s.ResourceTypes {
		out.types[t] = mode == api.ModeRBAC
	}
	roles := make(map[string]*grants, len(s.Roles))
	for name, list := range s.Roles {
		g := &grants{anyOn: map[string]struct{}{}, byType: map[string]actions{}}
		for _, grant := range list {
			typ, action, _ := api.ParseGrant(grant) // Validate checked the form
			switch {
			case typ == "*" && action == "*":
				g.all = true
			case typ == "*":
				g.anyOn[action] = struct{}{}
			default:
				a := g.byType[typ]
				if action == "*" {
					a.all = true
				} else {
					if a.names == nil {
						a.names = map[string]struct{}{}
					}
					a.names[action] = struct{}{}
				}
				g.byType[typ] = a
			}
		}
		roles[name] = g
	}
	for subject, tenants := range s.Assignments {
		m := make(map[string][]*grants, len(tenants))
		for tenant, names := range tenants {
			rs := make([]*grants, 0, len(names))
			for _, n := range names {
				rs = append(rs, roles[n])
			}
			m[tenant] = rs
		}
		out.users[subject] = m
	}
	return out, nil
}

// Outcome is what the edge does with a request.
type Outcome uint8

// Outcomes of Decide.
const (
	// Pass: the snapshot cannot answer; the request goes on untouched.
	Pass Outcome = iota
	// Allow: a role of the subject in the tenant grants the action.
	Allow
	// Deny: the subject is known and no role of it in the tenant grants it.
	Deny
)

func (o Outcome) String() string {
	switch o {
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	default:
		return "pass"
	}
}

// Reason codes of decisions: bounded, usable as metric labels and in the
// deny response.
const (
	ReasonGranted        = "granted"
	ReasonNoGrant        = "no_grant"
	ReasonNoRoute        = "no_route"
	ReasonBadPath        = "unsafe_path"
	ReasonNoSnapshot     = "no_snapshot"
	ReasonStale          = "stale_snapshot"
	ReasonNoSubject      = "no_subject"
	ReasonNoTenant       = "no_tenant"
	ReasonUnknownSubject = "unknown_subject"
	ReasonReBAC          = "rebac_type"
	ReasonUnknownType    = "unknown_type"
)

// Decide answers whether subject may perform action on typ in tenant from the
// snapshot alone.
func (s *Snapshot) Decide(subject, tenant, typ, action string) (Outcome, string) {
	rbac, known := s.types[typ]
	if !known {
		return Pass, ReasonUnknownType
	}
	tenants, ok := s.users[subject]
	if !ok {
		if !rbac {
			return Pass, ReasonReBAC
		}
		return Pass, ReasonUnknownSubject
	}
	for _, g := range tenants[tenant] {
		if g.allows(typ, action) {
			return Allow, ReasonGranted
		}
	}
	if !rbac {
		// A role grant is sufficient on a ReBAC type, but its absence is
		// not a denial: relationships may still allow. The PDP decides.
		return Pass, ReasonReBAC
	}
	return Deny, ReasonNoGrant
}
