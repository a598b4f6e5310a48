package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func validSnapshot() *EdgeSnapshot {
	return &EdgeSnapshot{
		Version:       EdgeSnapshotVersion,
		Revision:      42,
		GeneratedAt:   time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC),
		ResourceTypes: map[string]string{"file": ModeRBAC, "doc": ModeReBAC},
		Roles:         map[string][]string{"admin": {"file:*", "*:read"}, "viewer": {"file:read"}},
		Assignments:   map[string]map[string][]string{"alice": {"acme": {"admin"}}, "carol": {}},
	}
}

func TestEdgeSnapshotValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*EdgeSnapshot)
		wantErr string
	}{
		{"valid", func(*EdgeSnapshot) {}, ""},
		{"empty maps", func(s *EdgeSnapshot) { s.ResourceTypes, s.Roles, s.Assignments = nil, nil, nil }, ""},
		{"version", func(s *EdgeSnapshot) { s.Version = 0 }, "version 0"},
		{"generated_at", func(s *EdgeSnapshot) { s.GeneratedAt = time.Time{} }, "generated_at"},
		{"mode", func(s *EdgeSnapshot) { s.ResourceTypes["file"] = "RBAC" }, `mode "RBAC"`},
		{"empty type", func(s *EdgeSnapshot) { s.ResourceTypes[""] = ModeRBAC }, "empty resource type"},
		{"grant without colon", func(s *EdgeSnapshot) { s.Roles["admin"] = []string{"file"} }, "not type:action"},
		{"grant empty action", func(s *EdgeSnapshot) { s.Roles["admin"] = []string{"file:"} }, "not type:action"},
		{"grant undeclared type", func(s *EdgeSnapshot) { s.Roles["admin"] = []string{"video:play"} }, "undeclared resource type"},
		{"grant action with space", func(s *EdgeSnapshot) { s.Roles["admin"] = []string{"file:re ad"} }, "space or control"},
		{"too many grants", func(s *EdgeSnapshot) { s.Roles["admin"] = make([]string, MaxSnapshotGrants+1) }, "grants, at most"},
		{"undefined role", func(s *EdgeSnapshot) { s.Assignments["alice"]["acme"] = []string{"owner"} }, `undefined role "owner"`},
		{"control byte subject", func(s *EdgeSnapshot) { s.Assignments["a\x00"] = nil }, "space or control"},
		{"long tenant", func(s *EdgeSnapshot) { s.Assignments["alice"][strings.Repeat("t", MaxSnapshotNameLen+1)] = nil }, "longer than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := validSnapshot()
			tc.edit(s)
			err := s.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidSnapshot) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate() = %v, want ErrInvalidSnapshot containing %q", err, tc.wantErr)
			}
		})
	}
	var nilSnap *EdgeSnapshot
	if err := nilSnap.Validate(); !errors.Is(err, ErrInvalidSnapshot) {
		t.Fatalf("nil snapshot: %v", err)
	}
}

func TestEdgeSnapshotJSON(t *testing.T) {
	const doc = `{
	  "version": 1,
	  "revision": 42,
	  "generated_at": "2026-11-29T21:00:00Z",
	  "resource_types": {"file": "rbac", "folder": "rbac", "doc": "rebac"},
	  "roles": {"admin": ["file:*", "folder:*"], "viewer": ["file:read", "folder:read"]},
	  "assignments": {"alice": {"acme": ["admin"]}, "bob": {"acme": ["viewer"], "globex": ["admin"]}}
	}`
	var s EdgeSnapshot
	if err := json.Unmarshal([]byte(doc), &s); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Revision != 42 || s.Assignments["bob"]["globex"][0] != "admin" || s.ResourceTypes["doc"] != ModeReBAC {
		t.Fatalf("decoded %+v", s)
	}
}

func FuzzEdgeSnapshot(f *testing.F) {
	b, _ := json.Marshal(validSnapshot())
	f.Add(b)
	f.Add([]byte(`{"version":1,"generated_at":"2026-01-01T00:00:00Z","roles":{"r":["*:*"]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s EdgeSnapshot
		if json.Unmarshal(b, &s) != nil {
			return
		}
		if err := s.Validate(); err != nil {
			if !errors.Is(err, ErrInvalidSnapshot) {
				t.Fatalf("error does not wrap ErrInvalidSnapshot: %v", err)
			}
			return
		}
		// A valid snapshot's grants all parse.
		for _, gs := range s.Roles {
			for _, g := range gs {
				if _, _, ok := ParseGrant(g); !ok {
					t.Fatalf("valid snapshot with bad grant %q", g)
				}
			}
		}
	})
}
