package datastore

import (
	"errors"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/defaults/drive"
)

func TestParseSchemaDrive(t *testing.T) {
	s, err := ParseSchema(drive.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Types(), ","); got != "user,group,tenant,folder,file" {
		t.Fatalf("Types = %s", got)
	}
	if got := strings.Join(s.Permissions("file"), ","); got != "delete,write,read,view" {
		t.Fatalf("Permissions(file) = %s", got)
	}
	if got := s.AllowedSubjects("folder", "viewer"); len(got) != 2 || got[1] != (SubjectType{"group", "member"}) {
		t.Fatalf("AllowedSubjects = %v", got)
	}
	if s.TenantType() != "tenant" || strings.Join(s.roleList, ",") != "admin,editor,viewer" {
		t.Fatalf("roles: %s %v", s.TenantType(), s.roleList)
	}
}

// tenancySchema is a schema whose doc type has the given tenancy.
func tenancySchema(tenancy string) string {
	return "types:\n  user: {}\n  tenant:\n    relations:\n      admin: [user]\n  group:\n    relations:\n      member: [user]\n" +
		"  doc:\n    relations:\n      tenant: [tenant]\n      parent: [doc]\n      owner: [group#member]\n    permissions:\n      read: owner\n" +
		"    tenancy: " + tenancy + "\nroles:\n  grants:\n    admin: [doc:*]\n"
}

func TestSchemaTenancy(t *testing.T) {
	s, err := ParseSchema(drive.Schema)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"file", "folder"} {
		if got := s.Tenancy(typ); !got.Required || strings.Join(got.Inherit, ",") != "parent" {
			t.Errorf("Tenancy(%s) = %+v, want inherit [parent], required", typ, got)
		}
	}
	if got := s.Tenancy("user"); got.Required || got.Inherit != nil {
		t.Errorf("Tenancy(user) = %+v, want none", got)
	}
	s, err = ParseSchema([]byte(tenancySchema("{inherit: parent}")))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Tenancy("doc"); got.Required || strings.Join(got.Inherit, ",") != "parent" {
		t.Errorf("Tenancy(doc) = %+v", got)
	}
}

func TestParseSchemaErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // substrings of the error
	}{
		{"not yaml", "types: [", []string{"yaml"}},
		{"empty", "", []string{"empty schema"}},
		{"no types", "roles: {}", []string{"no types"}},
		{"unknown key", "types:\n  user: {}\nextra: 1\n", []string{"3:1", "unknown top-level key"}},
		{"bad type name", "types:\n  User: {}\n", []string{"2:3", "User", "invalid type name"}},
		{"unknown subject type", "types:\n  doc:\n    relations:\n      viewer: [user]\n", []string{"doc#viewer", "unknown type \"user\""}},
		{"unknown userset relation", "types:\n  user: {}\n  group: {}\n  doc:\n    relations:\n      viewer: [group#member]\n", []string{"doc#viewer", "no relation or permission \"member\""}},
		{"duplicate member", "types:\n  user: {}\n  doc:\n    relations:\n      viewer: [user]\n    permissions:\n      viewer: viewer\n", []string{"doc#viewer", "declared twice"}},
		{"unknown ref", "types:\n  user: {}\n  doc:\n    relations:\n      viewer: [user]\n    permissions:\n      read: viewer + editor\n", []string{"doc#read", "7:22", "unknown relation or permission \"editor\""}},
		{"arrow through permission", "types:\n  user: {}\n  doc:\n    relations:\n      viewer: [user]\n    permissions:\n      read: viewer\n      x: read->read\n", []string{"doc#x", "is a permission"}},
		{"arrow target lacks permission", "types:\n  user: {}\n  doc:\n    relations:\n      parent: [user]\n    permissions:\n      read: parent->read\n", []string{"doc#read", "type user", "has no relation or permission \"read\""}},
		{"syntax", "types:\n  user: {}\n  doc:\n    relations:\n      viewer: [user]\n    permissions:\n      read: viewer +\n", []string{"doc#read", "unexpected end"}},
		{"unbalanced", "types:\n  user: {}\n  doc:\n    relations:\n      viewer: [user]\n    permissions:\n      read: (viewer\n", []string{"unclosed"}},
		{"no subject types", "types:\n  doc:\n    relations:\n      viewer: []\n", []string{"accepts no subject types"}},
		{"role not a relation", "types:\n  user: {}\n  tenant:\n    relations:\n      admin: [user]\nroles:\n  grants:\n    owner: [tenant:admin]\n", []string{"tenant#owner", "not a relation"}},
		{"grant unknown type", "types:\n  user: {}\n  tenant:\n    relations:\n      admin: [user]\nroles:\n  grants:\n    admin: [file:read]\n", []string{"unknown type \"file\""}},
		{"grant syntax", "types:\n  user: {}\n  tenant:\n    relations:\n      admin: [user]\nroles:\n  grants:\n    admin: [file]\n", []string{"want type:permission"}},
		{"missing tenant type", "types:\n  user: {}\nroles:\n  type: org\n  grants: {}\n", []string{"tenant type \"org\""}},
		{"tenancy without roles", "types:\n  doc:\n    tenancy: {required: true}\n", []string{"doc", "no tenant type"}},
		{"tenancy unknown key", tenancySchema("{inherit: [parent], needed: true}"), []string{"unknown key \"needed\" under tenancy"}},
		{"tenancy inherit unknown", tenancySchema("{inherit: [folder]}"), []string{"doc#folder", "has no relation"}},
		{"tenancy inherit permission", tenancySchema("{inherit: [read]}"), []string{"doc#read", "is a permission"}},
		{"tenancy inherit userset", tenancySchema("{inherit: [owner]}"), []string{"doc#owner", "userset"}},
		{"tenancy required bad", tenancySchema("{required: yes}"), []string{"required must be true or false"}},
		{"tenancy inherit twice", tenancySchema("{inherit: [parent, parent]}"), []string{"listed twice"}},
		{"tenancy required without tenant", "types:\n  user: {}\n  tenant:\n    relations:\n      admin: [user]\n  doc:\n    tenancy: {required: true}\nroles:\n  grants:\n    admin: [doc:*]\n", []string{"doc", "inherits none"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSchema([]byte(tt.src))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalidSchema) {
				t.Fatalf("%v is not ErrInvalidSchema", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestParseExprPrecedence(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a", "a"},
		{"a + b - c", "((a + b) - c)"},
		{"a + b & c - d", "((a + (b & c)) - d)"},
		{"(a + b) & c", "((a + b) & c)"},
		{"p->r & a", "(p->r & a)"},
		{"a-b", "(a - b)"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			e, err := parseExpr(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if e.String() != tt.want {
				t.Fatalf("parseExpr(%q) = %s, want %s", tt.in, e, tt.want)
			}
		})
	}
}

func FuzzParseSchema(f *testing.F) {
	f.Add(string(drive.Schema))
	f.Add("types:\n  user: {}\n  doc:\n    relations:\n      viewer: [user]\n    permissions:\n      read: (viewer & viewer) - viewer\n")
	f.Add("types:\n  a:\n    relations:\n      r: [a#r]\n    permissions:\n      p: r->p + r\n")
	f.Fuzz(func(t *testing.T, src string) {
		s, err := ParseSchema([]byte(src))
		if err != nil {
			if !errors.Is(err, ErrInvalidSchema) {
				t.Fatalf("error %v is not ErrInvalidSchema", err)
			}
			return
		}
		// A valid schema parses again to the same thing.
		again, err := ParseSchema(s.Source())
		if err != nil || strings.Join(again.Types(), ",") != strings.Join(s.Types(), ",") {
			t.Fatalf("reparse: %v", err)
		}
	})
}

func FuzzParseExpr(f *testing.F) {
	for _, s := range []string{"a + b - c", "(a & b)", "p->q", "((a))", "a -> b + -"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := parseExpr(s)
		if err != nil {
			return
		}
		// The fully parenthesised form parses to the same tree.
		e2, err := parseExpr(e.String())
		if err != nil || e2.String() != e.String() {
			t.Fatalf("%q -> %q -> %v %v", s, e.String(), e2, err)
		}
	})
}
