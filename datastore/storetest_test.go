package datastore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/defaults/drive"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// storeOpener returns a fresh, empty store; the suite closes it.
type storeOpener func(t *testing.T) datastore.Store

// runConformance is the conformance suite every datastore.Store
// implementation must pass, run on the stores open returns:
//
//	func TestConformance(t *testing.T) {
//		runConformance(t, func(t *testing.T) datastore.Store { ... a fresh, empty store ... })
//	}
func runConformance(t *testing.T, open storeOpener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s datastore.Store)
	}{
		{"NoSchema", testNoSchema},
		{"SchemaRoundTrip", testSchemaRoundTrip},
		{"WriteReadDelete", testWriteReadDelete},
		{"InvalidTuples", testInvalidTuples},
		{"Preconditions", testPreconditions},
		{"DriveChecks", testDriveChecks},
		{"Roles", testRoles},
		{"Lookups", testLookups},
		{"Watch", testWatch},
		{"DepthAndCycles", testDepthAndCycles},
		{"SchemaOrphans", testSchemaOrphans},
		{"ImportExport", testImportExport},
		{"ImportStopsAtBadLine", testImportBadLine},
		{"Trace", testTrace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			tt.fn(t, s)
		})
	}
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// MustDrive writes the drive schema and demo tuples into s.
func MustDrive(t *testing.T, s datastore.Store) {
	t.Helper()
	sc, err := schema.Parse(drive.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteSchema(ctx(t), sc, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(ctx(t), bytes.NewReader(drive.Tuples), datastore.ImportOptions{Format: datastore.FormatText}); err != nil {
		t.Fatal(err)
	}
}

// check is Check over text arguments ("type:id", permission,
// "type:id[#relation]"), which must parse.
func check(t *testing.T, s datastore.Store, object, permission, subject string) (bool, error) {
	t.Helper()
	obj, err := api.ParseObject(object)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := api.ParseSubject(subject)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Check(ctx(t), datastore.CheckRequest{Object: obj, Permission: permission, Subject: sub})
	return res.Allowed, err
}

func strs(ts []api.Tuple) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.String()
	}
	slices.Sort(out)
	return out
}

func mustSchema(t *testing.T, s datastore.Store, src string) {
	t.Helper()
	sc, err := schema.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteSchema(ctx(t), sc, false); err != nil {
		t.Fatal(err)
	}
}

func testNoSchema(t *testing.T, s datastore.Store) {
	if _, err := s.Schema(ctx(t)); !errors.Is(err, datastore.ErrNoSchema) {
		t.Fatalf("Schema = %v, want ErrNoSchema", err)
	}
	if _, err := s.Write(ctx(t), datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:a#viewer@user:b")}); !errors.Is(err, datastore.ErrNoSchema) {
		t.Fatalf("Write = %v, want ErrNoSchema", err)
	}
	if _, err := check(t, s, "folder:a", "read", "user:b"); !errors.Is(err, datastore.ErrNoSchema) {
		t.Fatalf("Check = %v, want ErrNoSchema", err)
	}
	if r, err := s.Revision(ctx(t)); err != nil || r != 0 {
		t.Fatalf("Revision = %d, %v, want 0", r, err)
	}
}

func testSchemaRoundTrip(t *testing.T, s datastore.Store) {
	sc, err := schema.Parse(drive.Schema)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := s.WriteSchema(ctx(t), sc, false)
	if err != nil || rev != 1 {
		t.Fatalf("WriteSchema = %d, %v, want revision 1", rev, err)
	}
	got, err := s.Schema(ctx(t))
	if err != nil || !bytes.Equal(got.Source(), drive.Schema) {
		t.Fatalf("Schema() = %v, %v", got, err)
	}
	if g := got.RoleGrants("viewer"); !slices.Equal(g, []string{"file:read", "file:view", "folder:read", "folder:view"}) {
		t.Fatalf("RoleGrants(viewer) = %v", g)
	}
	if !got.Grants([]string{"admin"}, "file", "delete") || got.Grants([]string{"viewer"}, "file", "write") {
		t.Fatal("Grants gives wrong answers")
	}
}

func testWriteReadDelete(t *testing.T, s datastore.Store) {
	MustDrive(t, s)
	r0, _ := s.Revision(ctx(t))
	add := fixture.Tuples(t, "folder:x#viewer@user:zed", "folder:x#viewer@group:eng#member", "file:y#parent@folder:x")
	r1, err := s.Write(ctx(t), datastore.WriteRequest{Touches: add})
	if err != nil || r1 != r0+1 {
		t.Fatalf("Write = %d, %v, want %d", r1, err, r0+1)
	}
	tests := []struct {
		name string
		f    datastore.Filter
		want []string
	}{
		{"object", datastore.Filter{ObjectType: "folder", ObjectID: "x"}, []string{"folder:x#viewer@group:eng#member", "folder:x#viewer@user:zed"}},
		{"object relation", datastore.Filter{ObjectType: "file", ObjectID: "y", Relation: "parent"}, []string{"file:y#parent@folder:x"}},
		{"subject", datastore.Filter{SubjectType: "user", SubjectID: "zed"}, []string{"folder:x#viewer@user:zed"}},
		{"subject userset", datastore.Filter{SubjectType: "group", SubjectID: "eng", SubjectRelation: "member"}, []string{"folder:projects#editor@group:eng#member", "folder:x#viewer@group:eng#member"}},
		{"type and subject", datastore.Filter{ObjectType: "folder", SubjectType: "user", SubjectID: "zed"}, []string{"folder:x#viewer@user:zed"}},
		{"unknown type", datastore.Filter{ObjectType: "nope"}, []string{}},
		{"limit", datastore.Filter{ObjectType: "folder", ObjectID: "x", Limit: 1}, []string{"folder:x#viewer@user:zed"}}, // direct subjects sort first
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Read(ctx(t), tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if g := strs(got); !slices.Equal(g, tt.want) {
				t.Fatalf("Read(%+v) = %v, want %v", tt.f, g, tt.want)
			}
		})
	}
	// Touching again changes nothing but still commits a revision.
	r2, err := s.Write(ctx(t), datastore.WriteRequest{Touches: add[:1], Deletes: add[1:2]})
	if err != nil || r2 != r1+1 {
		t.Fatalf("Write = %d, %v", r2, err)
	}
	got, _ := s.Read(ctx(t), datastore.Filter{ObjectType: "folder", ObjectID: "x"})
	if g := strs(got); !slices.Equal(g, []string{"folder:x#viewer@user:zed"}) {
		t.Fatalf("after delete: %v", g)
	}
	if ok, _ := check(t, s, "file:y", "read", "user:zed"); !ok {
		t.Fatal("zed cannot read file:y through folder:x")
	}
}

func testInvalidTuples(t *testing.T, s datastore.Store) {
	MustDrive(t, s)
	r0, _ := s.Revision(ctx(t))
	tests := []struct {
		name, tuple, want string
	}{
		{"unknown type", "drive:a#viewer@user:b", "unknown type"},
		{"unknown relation", "folder:a#reader@user:b", "no relation"},
		{"permission", "folder:a#read@user:b", "is a permission"},
		{"subject type", "folder:a#parent@user:b", "does not accept"},
		{"userset type", "folder:a#owner@group:g#member", "does not accept"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			good := fixture.Tuples(t, "folder:ok#viewer@user:ok")[0]
			_, err := s.Write(ctx(t), datastore.WriteRequest{Touches: append([]api.Tuple{good}, fixture.Tuples(t, tt.tuple)...)})
			if !errors.Is(err, datastore.ErrInvalidTuple) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Write(%s) = %v, want ErrInvalidTuple with %q", tt.tuple, err, tt.want)
			}
		})
	}
	if r, _ := s.Revision(ctx(t)); r != r0 {
		t.Fatalf("revision moved from %d to %d on failed writes", r0, r)
	}
	if got, _ := s.Read(ctx(t), datastore.Filter{ObjectType: "folder", ObjectID: "ok"}); len(got) != 0 {
		t.Fatalf("failed write left %v", got)
	}
}

func testPreconditions(t *testing.T, s datastore.Store) {
	MustDrive(t, s)
	exists := datastore.Filter{ObjectType: "folder", ObjectID: "root", Relation: "viewer", SubjectType: "user", SubjectID: "bob"}
	missing := datastore.Filter{ObjectType: "folder", ObjectID: "root", Relation: "viewer", SubjectType: "user", SubjectID: "nobody"}
	tests := []struct {
		name string
		pre  []datastore.Precondition
		ok   bool
	}{
		{"must exist holds", []datastore.Precondition{{Filter: exists, MustExist: true}}, true},
		{"must exist fails", []datastore.Precondition{{Filter: missing, MustExist: true}}, false},
		{"must not exist holds", []datastore.Precondition{{Filter: missing}}, true},
		{"must not exist fails", []datastore.Precondition{{Filter: exists}}, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tu := fixture.Tuples(t, fmt.Sprintf("folder:pre%d#viewer@user:u", i))
			_, err := s.Write(ctx(t), datastore.WriteRequest{Touches: tu, Preconditions: tt.pre})
			if tt.ok != (err == nil) || !tt.ok && !errors.Is(err, datastore.ErrPreconditionFailed) {
				t.Fatalf("Write = %v, want ok=%v", err, tt.ok)
			}
			got, _ := s.Read(ctx(t), datastore.Filter{ObjectType: "folder", ObjectID: fmt.Sprintf("pre%d", i)})
			if (len(got) == 1) != tt.ok {
				t.Fatalf("stored %v, want written=%v", got, tt.ok)
			}
		})
	}
}

// DriveCases are checks on the drive demo data with their answers.
var DriveCases = []struct {
	Object, Permission, Subject string
	Want                        bool
}{
	{"file:report.pdf", "read", "user:bob", true},     // viewer of root, 3 folders up
	{"file:report.pdf", "write", "user:bob", false},   // viewer only
	{"file:report.pdf", "read", "user:carol", false},  // nothing
	{"file:report.pdf", "delete", "user:alice", true}, // owner of root
	{"file:report.pdf", "write", "user:dave", true},   // group eng edits projects
	{"file:report.pdf", "write", "user:frank", true},  // ops is nested in eng
	{"file:notes.txt", "write", "user:dave", false},   // notes is under root, not projects
	{"file:notes.txt", "read", "user:erin", true},     // direct viewer
	{"folder:projects", "view", "user:bob", true},
	{"folder:root", "write", "user:dave", false},
	{"group:eng", "member", "user:frank", true},
	{"group:eng", "member", "group:ops#member", true},
	{"folder:projects", "editor", "group:ops#member", true},
	{"tenant:acme", "manage", "user:alice", true},
	{"tenant:acme", "manage", "user:bob", false},
	{"file:missing", "read", "user:bob", false},
}

func testDriveChecks(t *testing.T, s datastore.Store) {
	MustDrive(t, s)
	for _, c := range DriveCases {
		t.Run(c.Object+"#"+c.Permission+"@"+c.Subject, func(t *testing.T) {
			got, err := check(t, s, c.Object, c.Permission, c.Subject)
			if err != nil || got != c.Want {
				t.Fatalf("Check = %v, %v, want %v", got, err, c.Want)
			}
			// With a trace the answer is the same.
			sub, _ := api.ParseSubject(c.Subject)
			obj, _ := api.ParseObject(c.Object)
			res, err := s.Check(ctx(t), datastore.CheckRequest{Object: obj, Permission: c.Permission, Subject: sub, Trace: true})
			if err != nil || res.Allowed != c.Want || res.Trace == nil {
				t.Fatalf("Check with trace = %v, %v (trace %v), want %v", res.Allowed, err, res.Trace != nil, c.Want)
			}
		})
	}
	bob := api.Subject{Type: "user", ID: "bob"}
	fileX := api.Object{Type: "file", ID: "x"}
	errTests := []struct {
		name string
		req  datastore.CheckRequest
		want error
	}{
		{"unknown type", datastore.CheckRequest{Object: api.Object{Type: "drive", ID: "x"}, Permission: "read", Subject: bob}, datastore.ErrUnknown},
		{"unknown permission", datastore.CheckRequest{Object: fileX, Permission: "print", Subject: bob}, datastore.ErrUnknown},
		{"unknown subject type", datastore.CheckRequest{Object: fileX, Permission: "read", Subject: api.Subject{Type: "robot", ID: "r2"}}, datastore.ErrUnknown},
		{"unknown subject relation", datastore.CheckRequest{Object: fileX, Permission: "read", Subject: api.Subject{Type: "group", ID: "eng", Relation: "owner"}}, datastore.ErrUnknown},
		{"bad object", datastore.CheckRequest{Object: api.Object{Type: "file"}, Permission: "read", Subject: bob}, api.ErrSyntax},
		{"bad subject", datastore.CheckRequest{Object: fileX, Permission: "read", Subject: api.Subject{Type: "user", ID: "b b"}}, api.ErrSyntax},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.Check(ctx(t), tt.req); !errors.Is(err, tt.want) {
				t.Fatalf("Check = %v, want %v", err, tt.want)
			}
		})
	}
}

func testRoles(t *testing.T, s datastore.Store) {
	MustDrive(t, s)
	if _, err := s.Write(ctx(t), datastore.WriteRequest{Touches: fixture.Tuples(t, "tenant:acme#viewer@user:alice", "tenant:globex#editor@user:alice")}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, subject, tenant string
		want                  []string
	}{
		{"two roles", "user:alice", "acme", []string{"admin", "viewer"}},
		{"other tenant", "user:alice", "globex", []string{"editor"}},
		{"no roles", "user:carol", "acme", nil},
		{"unknown tenant", "user:alice", "initech", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, _ := api.ParseSubject(tt.subject)
			got, err := s.AppendRoles(ctx(t), nil, sub, tt.tenant)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("AppendRoles = %v, want %v", got, tt.want)
			}
			// Roles are appended after what dst holds.
			pre := []string{"kept"}
			got, err = s.AppendRoles(ctx(t), pre, sub, tt.tenant)
			if err != nil || len(got) != 1+len(tt.want) || got[0] != "kept" {
				t.Fatalf("AppendRoles after %v = %v, %v", pre, got, err)
			}
		})
	}
}

func testLookups(t *testing.T, s datastore.Store) {
	MustDrive(t, s)
	got, err := s.LookupResources(ctx(t), api.Subject{Type: "user", ID: "bob"}, "read", "file")
	if err != nil || !slices.Equal(got, []string{"notes.txt", "report.pdf"}) {
		t.Fatalf("LookupResources(bob, read, file) = %v, %v", got, err)
	}
	got, err = s.LookupResources(ctx(t), api.Subject{Type: "user", ID: "frank"}, "write", "folder")
	if err != nil || !slices.Equal(got, []string{"projects", "q3"}) {
		t.Fatalf("LookupResources(frank, write, folder) = %v, %v", got, err)
	}
	got, err = s.LookupResources(ctx(t), api.Subject{Type: "user", ID: "carol"}, "read", "file")
	if err != nil || len(got) != 0 {
		t.Fatalf("LookupResources(carol) = %v, %v", got, err)
	}
	got, err = s.LookupSubjects(ctx(t), api.Object{Type: "file", ID: "report.pdf"}, "write", "user")
	if err != nil || !slices.Equal(got, []string{"alice", "dave", "frank"}) {
		t.Fatalf("LookupSubjects(report.pdf, write, user) = %v, %v", got, err)
	}
	got, err = s.LookupSubjects(ctx(t), api.Object{Type: "file", ID: "report.pdf"}, "read", "user")
	if err != nil || !slices.Equal(got, []string{"alice", "bob", "dave", "frank"}) {
		t.Fatalf("LookupSubjects(report.pdf, read, user) = %v, %v", got, err)
	}
}

func testWatch(t *testing.T, s datastore.Store) {
	MustDrive(t, s)
	from, _ := s.Revision(ctx(t))
	c, cancel := context.WithCancel(ctx(t))
	defer cancel()
	type got struct {
		cs  datastore.ChangeSet
		err error
	}
	ch := make(chan got, 16)
	go func() {
		for cs, err := range s.Watch(c, from) {
			ch <- got{cs, err}
			if err != nil {
				return
			}
		}
	}()
	r1, err := s.Write(ctx(t), datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:w#viewer@user:a", "folder:w#viewer@user:b")})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := s.Write(ctx(t), datastore.WriteRequest{Deletes: fixture.Tuples(t, "folder:w#viewer@user:a", "folder:w#viewer@user:nobody")})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		rev     datastore.Revision
		changes []string
	}{
		{r1, []string{"touch folder:w#viewer@user:a", "touch folder:w#viewer@user:b"}},
		{r2, []string{"delete folder:w#viewer@user:a"}},
	}
	for _, w := range want {
		select {
		case g := <-ch:
			if g.err != nil {
				t.Fatal(g.err)
			}
			var cs []string
			for _, c := range g.cs.Changes {
				cs = append(cs, c.Op.String()+" "+c.Tuple.String())
			}
			if g.cs.Revision != w.rev || !slices.Equal(cs, w.changes) {
				t.Fatalf("watch got rev %d %v, want %d %v", g.cs.Revision, cs, w.rev, w.changes)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("watch timed out")
		}
	}
	cancel()
	select {
	case g := <-ch:
		if !errors.Is(g.err, context.Canceled) {
			t.Fatalf("after cancel: %v", g.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not end on cancel")
	}
}

func testDepthAndCycles(t *testing.T, s datastore.Store) {
	mustSchema(t, s, `
types:
  user: {}
  group:
    relations:
      member: [user, group#member]
  folder:
    relations:
      parent: [folder]
      viewer: [user]
    permissions:
      read: viewer + parent->read
`)
	var w datastore.WriteRequest
	// A cycle of groups, and a cycle of folders.
	w.Touches = append(w.Touches, fixture.Tuples(t, "group:a#member@group:b#member", "group:b#member@group:a#member", "group:b#member@user:x",
		"folder:c1#parent@folder:c2", "folder:c2#parent@folder:c1")...)
	// A chain of 100 folders: f0 <- f1 <- ... <- f99; u is viewer of f0.
	for i := 1; i < 100; i++ {
		w.Touches = append(w.Touches, fixture.Tuples(t, fmt.Sprintf("folder:f%d#parent@folder:f%d", i, i-1))...)
	}
	w.Touches = append(w.Touches, fixture.Tuples(t, "folder:f0#viewer@user:u")...)
	if _, err := s.Write(ctx(t), w); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, obj, perm, sub string
		want                 bool
		err                  error
	}{
		{"group cycle allowed", "group:a", "member", "user:x", true, nil},
		{"group cycle denied", "group:a", "member", "user:y", false, nil},
		{"folder cycle terminates", "folder:c1", "read", "user:u", false, nil},
		{"shallow chain", "folder:f10", "read", "user:u", true, nil},
		{"deep chain is an error", "folder:f99", "read", "user:u", false, datastore.ErrDepthExceeded},
		{"deep chain deny is an error too", "folder:f99", "read", "user:v", false, datastore.ErrDepthExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := check(t, s, tt.obj, tt.perm, tt.sub)
			if !errors.Is(err, tt.err) || (tt.err == nil && err != nil) {
				t.Fatalf("Check err = %v, want %v", err, tt.err)
			}
			if got != tt.want {
				t.Fatalf("Check = %v, want %v", got, tt.want)
			}
		})
	}
}

func testSchemaOrphans(t *testing.T, s datastore.Store) {
	MustDrive(t, s)
	// Drop file#viewer and group usersets from folder#editor.
	src := strings.Replace(string(drive.Schema), "      viewer: [user, group#member]\n    permissions:\n      delete: owner + parent->delete\n      write: owner + editor + parent->write\n      read: write + viewer + parent->read\n      view: read\n    tenancy: {inherit: [parent], required: true}\n\nroles", "    permissions:\n      delete: owner + parent->delete\n      write: owner + editor + parent->write\n      read: write + parent->read\n      view: read\n    tenancy: {inherit: [parent], required: true}\n\nroles", 1)
	src = strings.Replace(src, "      editor: [user, group#member]\n      viewer: [user, group#member]\n    permissions:\n      delete: owner + parent->delete\n      write: owner + editor + parent->write\n      read: write + viewer + parent->read\n      view: read\n    tenancy: {inherit: [parent], required: true}\n\n  file", "      editor: [user]\n      viewer: [user, group#member]\n    permissions:\n      delete: owner + parent->delete\n      write: owner + editor + parent->write\n      read: write + viewer + parent->read\n      view: read\n    tenancy: {inherit: [parent], required: true}\n\n  file", 1)
	sc, err := schema.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	r0, _ := s.Revision(ctx(t))
	_, err = s.WriteSchema(ctx(t), sc, false)
	var oe *datastore.OrphanError
	if !errors.As(err, &oe) || oe.Count != 2 || !slices.Contains(oe.Examples, "file:notes.txt#viewer@user:erin") || !slices.Contains(oe.Examples, "folder:projects#editor@group:eng#member") {
		t.Fatalf("WriteSchema = %v, want an OrphanError naming 2 tuples", err)
	}
	if r, _ := s.Revision(ctx(t)); r != r0 {
		t.Fatal("refused schema write moved the revision")
	}
	if _, err := s.WriteSchema(ctx(t), sc, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Read(ctx(t), datastore.Filter{ObjectType: "file", ObjectID: "notes.txt", Relation: "viewer"}); len(got) != 0 {
		t.Fatalf("forced schema write kept %v", got)
	}
	if ok, _ := check(t, s, "file:report.pdf", "write", "user:dave"); ok {
		t.Fatal("dave still writes after the group editor tuple was dropped")
	}
}

func testImportExport(t *testing.T, s datastore.Store) {
	MustDrive(t, s)
	formats := []datastore.Format{datastore.FormatNDJSON, datastore.FormatCSV, datastore.FormatText}
	var first []api.Tuple
	for _, f := range formats {
		t.Run(string(f), func(t *testing.T) {
			var buf bytes.Buffer
			n, err := s.Export(ctx(t), &buf, f)
			if err != nil {
				t.Fatal(err)
			}
			all, _ := s.Read(ctx(t), datastore.Filter{})
			if int(n) != len(all) || n < 15 {
				t.Fatalf("exported %d tuples, store has %d", n, len(all))
			}
			if first == nil {
				first = all
			}
			// Re-import into the same store: a no-op on content.
			st, err := s.Import(ctx(t), &buf, datastore.ImportOptions{Format: f, BatchSize: 4})
			if err != nil || st.Tuples != n {
				t.Fatalf("Import = %+v, %v", st, err)
			}
			again, _ := s.Read(ctx(t), datastore.Filter{})
			if !slices.Equal(strs(again), strs(first)) {
				t.Fatal("export/import round trip changed the store")
			}
		})
	}
}

func testImportBadLine(t *testing.T, s datastore.Store) {
	MustDrive(t, s)
	before, _ := s.Read(ctx(t), datastore.Filter{})
	var in strings.Builder
	for i := range 10 {
		fmt.Fprintf(&in, "{\"object\":\"folder:imp%d\",\"relation\":\"viewer\",\"subject\":\"user:u\"}\n", i)
	}
	in.WriteString("{\"object\":\"folder:bad\",\"relation\":\"reader\",\"subject\":\"user:u\"}\n")
	in.WriteString("{\"object\":\"folder:after\",\"relation\":\"viewer\",\"subject\":\"user:u\"}\n")
	st, err := s.Import(ctx(t), strings.NewReader(in.String()), datastore.ImportOptions{BatchSize: 4})
	var ie *datastore.ImportError
	if !errors.As(err, &ie) || ie.Line != 11 || !errors.Is(err, datastore.ErrBadImport) {
		t.Fatalf("Import = %v, want ImportError at line 11", err)
	}
	// Nothing of the import is written: the store is as before it.
	after, _ := s.Read(ctx(t), datastore.Filter{})
	if len(after) != len(before) || st.Tuples != 0 {
		t.Fatalf("store grew by %d (stats %+v), want 0", len(after)-len(before), st)
	}
	// A valid multi-batch import with duplicates across batches.
	in.Reset()
	for i := range 30 {
		fmt.Fprintf(&in, "folder:dup%d#viewer@user:u\n", i%7)
	}
	st, err = s.Import(ctx(t), strings.NewReader(in.String()), datastore.ImportOptions{Format: datastore.FormatText, BatchSize: 4})
	if err != nil || st.Parsed != 30 || st.Tuples != 7 {
		t.Fatalf("Import with duplicates = %+v, %v, want 7 tuples", st, err)
	}
	got, _ := s.Read(ctx(t), datastore.Filter{SubjectType: "user", SubjectID: "u"})
	if len(got) != 7 {
		t.Fatalf("subject index has %d tuples, want 7", len(got))
	}
}

func testTrace(t *testing.T, s datastore.Store) {
	MustDrive(t, s)
	res, err := s.Check(ctx(t), datastore.CheckRequest{Object: api.Object{Type: "file", ID: "report.pdf"}, Permission: "read", Subject: api.Subject{Type: "user", ID: "bob"}, Trace: true})
	if err != nil || !res.Allowed || res.Trace == nil {
		t.Fatalf("Check = %+v, %v", res, err)
	}
	out := res.Trace.String()
	for _, want := range []string{"✓ permission file:report.pdf read", "✓ arrow folder:q3 parent->read", "✓ tuple folder:root#viewer@user:bob"} {
		if !strings.Contains(out, want) {
			t.Fatalf("trace lacks %q:\n%s", want, out)
		}
	}
}
