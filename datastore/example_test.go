package datastore_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/defaults/drive"
)

func Example() {
	dir, _ := os.MkdirTemp("", "nexus-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(dir, "relations.db")})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	sc, err := datastore.ParseSchema(drive.Schema)
	if err != nil {
		panic(err)
	}
	if _, err := s.WriteSchema(ctx, sc, false); err != nil {
		panic(err)
	}
	if _, err := s.Import(ctx, bytes.NewReader(drive.Tuples), datastore.ImportOptions{Format: datastore.FormatText}); err != nil {
		panic(err)
	}
	// ReBAC: bob is a viewer of the folder three levels above the file.
	report := api.Object{Type: "file", ID: "report.pdf"}
	res, err := s.Check(ctx, datastore.CheckRequest{Object: report, Permission: "read", Subject: api.Subject{Type: "user", ID: "bob"}})
	fmt.Println("bob reads report.pdf:", res.Allowed, err)
	res, _ = s.Check(ctx, datastore.CheckRequest{Object: report, Permission: "read", Subject: api.Subject{Type: "user", ID: "carol"}})
	fmt.Println("carol reads report.pdf:", res.Allowed)
	// RBAC: alice's tenant roles and what they grant.
	roles, _ := s.AppendRoles(ctx, nil, api.Subject{Type: "user", ID: "alice"}, "acme")
	fmt.Println("alice in acme:", roles, "may delete files:", sc.Grants(roles, "file", "delete"))
	// Output:
	// bob reads report.pdf: true <nil>
	// carol reads report.pdf: false
	// alice in acme: [admin] may delete files: true
}
