// Package api holds the types that nexus' packages share: the wire formats
// one component produces and another consumes. It imports only the standard
// library, so every package (including the proxy-wasm filter built for
// wasip1) can import it without pulling in anything else.
package api

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// EdgeSnapshotVersion is the only snapshot format version this package knows.
const EdgeSnapshotVersion = 1

// Resource type modes of an EdgeSnapshot.
const (
	// ModeRBAC marks a resource type whose permissions are decided by tenant
	// roles alone: the edge filter may answer it from the snapshot.
	ModeRBAC = "rbac"
	// ModeReBAC marks a resource type where relationships (or attributes) may
	// also grant access: the edge filter allows on a role grant, and passes
	// every other request on to the PDP; it never denies such a type.
	ModeReBAC = "rebac"
)

// Limits on an EdgeSnapshot, checked by Validate. They keep a corrupt or
// hostile snapshot from exhausting the filter's memory inside every proxy.
const (
	MaxSnapshotNameLen = 256
	MaxSnapshotGrants  = 256 // per role
)

// ErrInvalidSnapshot is wrapped by every error EdgeSnapshot.Validate returns.
var ErrInvalidSnapshot = errors.New("api: invalid edge snapshot")

// EdgeSnapshot is the RBAC state the proxy-wasm edge filter decides from. The
// PDP serves it as JSON at GET /v1/edge/snapshot on its admin listener with an
// ETag; the filter polls with If-None-Match and swaps a new snapshot in only
// when it decodes and validates completely.
//
// Subjects and tenants are bare ids ("alice", "acme"): the ids the filter
// extracts from a request header or JWT claim, without the "user:" or
// "tenant:" type prefix of the datastore.
//
// Example:
//
//	{
//	  "version": 1,
//	  "revision": 42,
//	  "generated_at": "2026-11-29T21:00:00Z",
//	  "resource_types": {"file": "rbac", "folder": "rbac", "doc": "rebac"},
//	  "roles": {"admin": ["file:*", "folder:*"], "viewer": ["file:read", "folder:read"]},
//	  "assignments": {"alice": {"acme": ["admin"]}, "bob": {"acme": ["viewer"], "globex": ["admin"]}}
//	}
type EdgeSnapshot struct {
	// Version is the format version; it must be EdgeSnapshotVersion.
	Version int `json:"version"`
	// Revision is the datastore revision the snapshot was built from. The
	// filter reports it; it does not order snapshots by it.
	Revision uint64 `json:"revision"`
	// GeneratedAt is when the PDP built the snapshot; it must be set.
	GeneratedAt time.Time `json:"generated_at"`
	// ResourceTypes maps a resource type to ModeRBAC or ModeReBAC. A type not
	// listed is unknown to the edge: requests on it pass on to ext_authz.
	ResourceTypes map[string]string `json:"resource_types"`
	// Roles maps a role name to its grants. A grant is "type:action", where
	// type is a resource type of ResourceTypes or "*" and action is a name or
	// "*" (every action).
	Roles map[string][]string `json:"roles"`
	// Assignments maps a subject to a tenant to the roles the subject holds in
	// that tenant. Every role must be defined in Roles. A subject listed here
	// (even with no roles) is known to the edge: a request it makes on an RBAC
	// type that none of its roles grant is denied at the edge.
	Assignments map[string]map[string][]string `json:"assignments"`
}

// Validate reports whether s is complete and consistent: version, time, names,
// modes, grants and role references. It returns an error wrapping
// ErrInvalidSnapshot that names the first offending entry.
func (s *EdgeSnapshot) Validate() error {
	if s == nil {
		return fmt.Errorf("%w: nil snapshot", ErrInvalidSnapshot)
	}
	if s.Version != EdgeSnapshotVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrInvalidSnapshot, s.Version, EdgeSnapshotVersion)
	}
	if s.GeneratedAt.IsZero() {
		return fmt.Errorf("%w: generated_at missing", ErrInvalidSnapshot)
	}
	for typ, mode := range s.ResourceTypes {
		if err := checkName("resource type", typ); err != nil {
			return err
		}
		if mode != ModeRBAC && mode != ModeReBAC {
			return fmt.Errorf("%w: resource type %q: mode %q, want %q or %q", ErrInvalidSnapshot, typ, mode, ModeRBAC, ModeReBAC)
		}
	}
	for role, grants := range s.Roles {
		if err := checkName("role", role); err != nil {
			return err
		}
		if len(grants) > MaxSnapshotGrants {
			return fmt.Errorf("%w: role %q: %d grants, at most %d", ErrInvalidSnapshot, role, len(grants), MaxSnapshotGrants)
		}
		for _, g := range grants {
			typ, action, ok := ParseGrant(g)
			if !ok {
				return fmt.Errorf("%w: role %q: grant %q is not type:action", ErrInvalidSnapshot, role, g)
			}
			if typ != "*" {
				if _, known := s.ResourceTypes[typ]; !known {
					return fmt.Errorf("%w: role %q: grant %q names undeclared resource type %q", ErrInvalidSnapshot, role, g, typ)
				}
			}
			if err := checkName("action", action); err != nil {
				return fmt.Errorf("role %q: %w", role, err)
			}
		}
	}
	for subject, tenants := range s.Assignments {
		if err := checkName("subject", subject); err != nil {
			return err
		}
		for tenant, roles := range tenants {
			if err := checkName("tenant", tenant); err != nil {
				return err
			}
			for _, r := range roles {
				if _, ok := s.Roles[r]; !ok {
					return fmt.Errorf("%w: subject %q tenant %q: undefined role %q", ErrInvalidSnapshot, subject, tenant, r)
				}
			}
		}
	}
	return nil
}

// ParseGrant splits a grant "type:action" into its parts. It reports false
// when the grant has no colon or an empty part.
func ParseGrant(g string) (typ, action string, ok bool) {
	typ, action, found := strings.Cut(g, ":")
	if !found || typ == "" || action == "" {
		return "", "", false
	}
	return typ, action, true
}

func checkName(kind, name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty %s name", ErrInvalidSnapshot, kind)
	}
	if len(name) > MaxSnapshotNameLen {
		return fmt.Errorf("%w: %s name longer than %d bytes", ErrInvalidSnapshot, kind, MaxSnapshotNameLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("%w: %s %q has a space or control byte", ErrInvalidSnapshot, kind, name)
		}
	}
	return nil
}
