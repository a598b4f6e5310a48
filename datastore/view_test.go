package datastore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// subjectStrings writes subjects as AppendSubjects does.
func subjectStrings(subs []api.Subject) []string {
	out := make([]string, len(subs))
	for i, s := range subs {
		out[i] = s.String()
	}
	return out
}

// TestViewSameAnswers: a View's Check, AppendRoles and AppendSubjects
// answer what the store's own methods answer, errors included, for
// several calls in one View.
func TestViewSameAnswers(t *testing.T) {
	ctx := context.Background()
	s := fixture.DemoStore(t)
	if _, err := s.Write(ctx, datastore.WriteRequest{Touches: []api.Tuple{
		mustTuple(t, "folder:q3#viewer@group:eng#member"),
		mustTuple(t, "file:report.pdf.bak#tenant@tenant:globex"),
		mustTuple(t, "file:report.pdf#tenant@tenant:globex"),
	}}); err != nil {
		t.Fatal(err)
	}
	type checkCase struct {
		obj  api.Object
		perm string
		sub  api.Subject
	}
	var checks []checkCase
	for _, c := range DriveCases {
		obj, _ := api.ParseObject(c.Object)
		sub, _ := api.ParseSubject(c.Subject)
		checks = append(checks, checkCase{obj, c.Permission, sub})
	}
	checks = append(checks,
		checkCase{api.Object{Type: "nope", ID: "x"}, "read", api.Subject{Type: "user", ID: "bob"}},
		checkCase{api.Object{Type: "file", ID: "report.pdf"}, "nope", api.Subject{Type: "user", ID: "bob"}},
		checkCase{api.Object{Type: "file", ID: "bad id"}, "read", api.Subject{Type: "user", ID: "bob"}},
		checkCase{api.Object{Type: "file", ID: "report.pdf"}, "read", api.Subject{Type: "user", ID: ""}},
		checkCase{api.Object{Type: "file", ID: "report.pdf"}, "read", api.Subject{Type: "group", ID: "eng", Relation: "member"}},
	)
	type rolesCase struct {
		sub    api.Subject
		tenant string
	}
	roles := []rolesCase{
		{api.Subject{Type: "user", ID: "alice"}, "acme"},
		{api.Subject{Type: "user", ID: "erin"}, "acme"},
		{api.Subject{Type: "user", ID: "bob"}, "acme"},
		{api.Subject{Type: "user", ID: "alice"}, "globex"},
		{api.Subject{Type: "user", ID: "alice"}, "bad tenant"},
		{api.Subject{Type: "nope", ID: "alice"}, "acme"},
	}
	type subjectsCase struct {
		obj api.Object
		rel string
	}
	subjects := []subjectsCase{
		{api.Object{Type: "file", ID: "report.pdf"}, "tenant"},
		{api.Object{Type: "file", ID: "report.pdf"}, "parent"},
		{api.Object{Type: "folder", ID: "q3"}, "viewer"},
		{api.Object{Type: "file", ID: "missing"}, "tenant"},
		{api.Object{Type: "nope", ID: "x"}, "tenant"},
		{api.Object{Type: "file", ID: ""}, "tenant"},
		{api.Object{Type: "file", ID: "report.pdf"}, ""},
	}
	err := s.View(ctx, func(v *datastore.View) error {
		if v.Schema() == nil || v.Schema().TenantType() != "tenant" {
			t.Errorf("View.Schema = %v", v.Schema())
		}
		for _, c := range checks {
			req := datastore.CheckRequest{Object: c.obj, Permission: c.perm, Subject: c.sub}
			want, werr := s.Check(ctx, req)
			got, gerr := v.Check(req)
			if got.Allowed != want.Allowed || (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
				t.Errorf("check %v: view %v, %v; store %v, %v", req, got.Allowed, gerr, want.Allowed, werr)
			}
		}
		for _, c := range roles {
			want, werr := s.AppendRoles(ctx, nil, c.sub, c.tenant)
			got, gerr := v.AppendRoles(nil, c.sub, c.tenant)
			if !slices.Equal(got, want) || (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
				t.Errorf("roles %v in %q: view %v, %v; store %v, %v", c.sub, c.tenant, got, gerr, want, werr)
			}
		}
		for _, c := range subjects {
			want, werr := s.AppendSubjects(ctx, nil, c.obj, c.rel)
			got, gerr := v.AppendSubjects(nil, c.obj, c.rel)
			if !slices.Equal(subjectStrings(got), want) || (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
				t.Errorf("subjects %v#%s: view %v, %v; store %v, %v", c.obj, c.rel, got, gerr, want, werr)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A traced check through a View explains as the store's does.
	req := datastore.CheckRequest{Object: api.Object{Type: "file", ID: "report.pdf"}, Permission: "read", Subject: api.Subject{Type: "user", ID: "bob"}, Trace: true}
	want, err := s.Check(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var got datastore.CheckResult
	if err := s.View(ctx, func(v *datastore.View) (err error) { got, err = v.Check(req); return err }); err != nil {
		t.Fatal(err)
	}
	if !got.Allowed || got.Trace.String() != want.Trace.String() {
		t.Fatalf("traced check through a View:\n%s\nwant\n%s", got.Trace, want.Trace)
	}
}

func mustTuple(t testing.TB, txt string) api.Tuple {
	t.Helper()
	tu, err := api.ParseTuple(txt)
	if err != nil {
		t.Fatal(err)
	}
	return tu
}

// TestViewOneState: the calls of one View read the state it was opened
// on, whatever is written meanwhile; the next View sees the write.
func TestViewOneState(t *testing.T) {
	ctx := context.Background()
	s := fixture.DemoStore(t)
	sub := api.Subject{Type: "user", ID: "zed"}
	req := datastore.CheckRequest{Object: api.Object{Type: "file", ID: "report.pdf"}, Permission: "read", Subject: sub}
	touches := []api.Tuple{mustTuple(t, "file:report.pdf#viewer@user:zed"), mustTuple(t, "tenant:acme#admin@user:zed")}
	written := make(chan error, 1)
	err := s.View(ctx, func(v *datastore.View) error {
		if res, err := v.Check(req); err != nil || res.Allowed {
			return fmt.Errorf("before the write: %v, %v", res.Allowed, err)
		}
		go func() {
			_, err := s.Write(ctx, datastore.WriteRequest{Touches: touches})
			written <- err
		}()
		// The write may wait for this View (when it remaps the file): give
		// it the time to commit when it does not, and read on.
		time.Sleep(50 * time.Millisecond)
		if res, err := v.Check(req); err != nil || res.Allowed {
			return fmt.Errorf("during the View, after the write: %v, %v", res.Allowed, err)
		}
		if roles, err := v.AppendRoles(nil, sub, "acme"); err != nil || len(roles) != 0 {
			return fmt.Errorf("roles during the View: %v, %v", roles, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	err = s.View(ctx, func(v *datastore.View) error {
		if res, err := v.Check(req); err != nil || !res.Allowed {
			return fmt.Errorf("after the write: %v, %v", res.Allowed, err)
		}
		if roles, err := v.AppendRoles(nil, sub, "acme"); err != nil || !slices.Equal(roles, []string{"admin"}) {
			return fmt.Errorf("roles after the write: %v, %v", roles, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestViewDuringSchemaPublication: a View that begins after a schema
// write committed, but before its state (schema and names) is published,
// pairs no state with the other's data: it waits and reads the new
// schema with the new data. Schema A reads "viewer - banned", B "viewer &
// approved", and writing B (forced) deletes the banned tuple: A's schema
// over B's data would allow bob, which neither schema does over its own.
func TestViewDuringSchemaPublication(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, datastore.Config{})
	schema := func(src string) *schema.Schema {
		t.Helper()
		sc, err := schema.Parse([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	a := schema("types:\n  user: {}\n  file:\n    relations:\n      viewer: [user]\n      banned: [user]\n    permissions:\n      read: viewer - banned\n")
	b := schema("types:\n  user: {}\n  file:\n    relations:\n      viewer: [user]\n      approved: [user]\n    permissions:\n      read: viewer & approved\n")
	if _, err := s.WriteSchema(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, datastore.WriteRequest{Touches: []api.Tuple{mustTuple(t, "file:f#viewer@user:bob"), mustTuple(t, "file:f#banned@user:bob")}}); err != nil {
		t.Fatal(err)
	}
	req := datastore.CheckRequest{Object: api.Object{Type: "file", ID: "f"}, Permission: "read", Subject: api.Subject{Type: "user", ID: "bob"}}
	type answer struct {
		allowed, approved bool
		err               error
	}
	answers := make(chan answer, 1)
	early := false
	restore := datastore.SetAfterSchemaCommit(func() {
		go func() {
			var ans answer
			ans.err = s.View(ctx, func(v *datastore.View) error {
				res, err := v.Check(req)
				ans.allowed = res.Allowed
				ans.approved = slices.Contains(v.Schema().Relations("file"), "approved")
				return err
			})
			answers <- ans
		}()
		// The View must wait for the publication: an answer now is one
		// that paired the old state with the new data.
		select {
		case ans := <-answers:
			early = true
			answers <- ans
		case <-time.After(200 * time.Millisecond):
		}
	})
	defer restore()
	if _, err := s.WriteSchema(ctx, b, true); err != nil {
		t.Fatal(err)
	}
	ans := <-answers
	if early {
		t.Errorf("a View answered before the schema write published its state (allowed %v, schema B %v, %v)", ans.allowed, ans.approved, ans.err)
	}
	if ans.err != nil || ans.allowed || !ans.approved {
		t.Fatalf("the View: allowed %v, schema B %v, %v; want a denial under schema B", ans.allowed, ans.approved, ans.err)
	}
}

// TestViewRefused: a View of a closed store, or for a done context, is
// an error and fn never runs; fn's error is View's.
func TestViewRefused(t *testing.T) {
	s := openTemp(t, datastore.Config{})
	MustDrive(t, s)
	called := false
	fn := func(*datastore.View) error { called = true; return nil }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.View(ctx, fn); !errors.Is(err, context.Canceled) || called {
		t.Fatalf("canceled context: %v (fn called: %v)", err, called)
	}
	mine := errors.New("mine")
	if err := s.View(context.Background(), func(*datastore.View) error { return mine }); err != mine {
		t.Fatalf("fn's error: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.View(context.Background(), fn); !errors.Is(err, datastore.ErrClosed) || called {
		t.Fatalf("closed store: %v (fn called: %v)", err, called)
	}
}

// TestViewHammer runs Views (several reads each) on several goroutines
// while tuples and the schema are written; run with -race. Answers about
// tuples nobody writes must stay right throughout, and every View must
// see its own writes' effects consistently.
func TestViewHammer(t *testing.T) {
	s := openTemp(t, datastore.Config{})
	MustDrive(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sc, _ := s.Schema(ctx)
	var wg sync.WaitGroup
	var views atomic.Int64
	fail := make(chan string, 1)
	report := func(msg string) {
		select {
		case fail <- msg:
		default:
		}
	}
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var roles []string
			var subs []api.Subject
			for ctx.Err() == nil {
				err := s.View(ctx, func(v *datastore.View) error {
					for _, c := range DriveCases {
						obj, _ := api.ParseObject(c.Object)
						sub, _ := api.ParseSubject(c.Subject)
						res, err := v.Check(datastore.CheckRequest{Object: obj, Permission: c.Permission, Subject: sub})
						if err != nil {
							return err
						}
						if res.Allowed != c.Want {
							return fmt.Errorf("%s#%s@%s = %v", c.Object, c.Permission, c.Subject, res.Allowed)
						}
					}
					var err error
					if roles, err = v.AppendRoles(roles[:0], api.Subject{Type: "user", ID: "alice"}, "acme"); err != nil {
						return err
					}
					if len(roles) != 1 || roles[0] != "admin" {
						return fmt.Errorf("roles %v", roles)
					}
					if subs, err = v.AppendSubjects(subs[:0], api.Object{Type: "file", ID: "report.pdf"}, "tenant"); err != nil {
						return err
					}
					if len(subs) != 1 || subs[0].String() != "tenant:acme" {
						return fmt.Errorf("tenants %v", subs)
					}
					// Both reads of a written folder's viewers agree.
					obj := api.Object{Type: "folder", ID: "h7"}
					a, err := v.AppendSubjects(nil, obj, "viewer")
					if err != nil {
						return err
					}
					res, err := v.Check(datastore.CheckRequest{Object: obj, Permission: "read", Subject: api.Subject{Type: "user", ID: "h"}})
					if err != nil {
						return err
					}
					if res.Allowed != (len(a) == 1) {
						return fmt.Errorf("%v reads %v, yet the check says %v", obj, a, res.Allowed)
					}
					return nil
				})
				if err != nil && ctx.Err() == nil {
					report(err.Error())
					return
				}
				views.Add(1)
			}
		}()
	}
	for i := range 60 {
		tu := api.Tuple{Object: api.Object{Type: "folder", ID: fmt.Sprintf("h%d", i%10)}, Relation: "viewer", Subject: api.Subject{Type: "user", ID: "h"}}
		wr := datastore.WriteRequest{Touches: []api.Tuple{tu}}
		if i%20 >= 10 {
			wr = datastore.WriteRequest{Deletes: []api.Tuple{tu}}
		}
		if _, err := s.Write(ctx, wr); err != nil {
			t.Fatal(err)
		}
		if i%20 == 0 {
			if _, err := s.WriteSchema(ctx, sc, false); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case msg := <-fail:
			t.Fatal(msg)
		default:
		}
	}
	cancel()
	wg.Wait()
	select {
	case msg := <-fail:
		t.Fatal(msg)
	default:
	}
	if views.Load() == 0 {
		t.Fatal("no View ran")
	}
}

// TestViewKeepsObjectTuples: a View reads an object's tuples once and
// answers its later calls on that object from them (a resource's tenant,
// then a check that reads the resource, then its tenant again), and
// likewise a subject's tuples (its roles, then a check of it, answered
// without a walk when no tuple can hold it), with the answers of the path
// that seeks each relation; and the next View reads the store again, so
// a write in between is seen.
func TestViewKeepsObjectTuples(t *testing.T) {
	ctx := context.Background()
	s := fixture.DemoStore(t)
	file := api.Object{Type: "file", ID: "report.pdf"}
	type call struct {
		rel   string // AppendSubjects(file, rel) if not ""
		roles bool   // else AppendRoles(sub, "acme") if set
		perm  string // else Check(file#perm@sub)
		sub   api.Subject
	}
	user := func(id string) api.Subject { return api.Subject{Type: "user", ID: id} }
	calls := []call{
		{rel: "tenant"},
		{perm: "read", sub: user("bob")},
		{rel: "parent"},
		{perm: "write", sub: user("bob")},
		{rel: "tenant"},
		{perm: "read", sub: user("mallory")},
		{rel: "viewer"},
		// The subject's roles, then checks: carol is named by no tuple,
		// erin by a role and a viewer tuple of another file, dave and frank
		// (through a nested group) by group tuples; bob is checked after
		// alice's roles.
		{roles: true, sub: user("carol")},
		{perm: "read", sub: user("carol")},
		{roles: true, sub: user("erin")},
		{perm: "read", sub: user("erin")},
		{roles: true, sub: user("dave")},
		{perm: "write", sub: user("dave")},
		{roles: true, sub: user("frank")},
		{perm: "write", sub: user("frank")},
		{roles: true, sub: user("alice")},
		{perm: "read", sub: user("bob")},
		{roles: true, sub: user("carol")},
		{perm: "read", sub: user("bob")},
	}
	answers := func(v *datastore.View) []string {
		var out []string
		for _, c := range calls {
			if c.rel != "" {
				subs, err := v.AppendSubjects(nil, file, c.rel)
				out = append(out, fmt.Sprint(subjectStrings(subs), err))
				continue
			}
			if c.roles {
				roles, err := v.AppendRoles(nil, c.sub, "acme")
				out = append(out, fmt.Sprint(roles, err))
				continue
			}
			res, err := v.Check(datastore.CheckRequest{Object: file, Permission: c.perm, Subject: c.sub})
			out = append(out, fmt.Sprint(res.Allowed, err))
		}
		return out
	}
	inView := func() []string {
		var out []string
		if err := s.View(ctx, func(v *datastore.View) error {
			out = answers(v)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// want: each call alone in a View, every relation a seek.
	want := func() []string {
		defer datastore.SetMaxObjTuples(0)()
		var out []string
		for i := range calls {
			if err := s.View(ctx, func(v *datastore.View) error {
				out = append(out, answers(v)[i])
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}

	// A View that keeps the file's tuples, a write, then another View.
	first := inView()
	if first[0] != "[tenant:acme] <nil>" || first[1] != "true <nil>" || first[8] != "false <nil>" ||
		first[9] != "[viewer] <nil>" || first[12] != "true <nil>" || first[14] != "true <nil>" || first[15] != "[admin] <nil>" || first[18] != "true <nil>" {
		t.Fatalf("the demo data changed: %q", first)
	}
	if _, err := s.Write(ctx, datastore.WriteRequest{
		Deletes: []api.Tuple{mustTuple(t, "file:report.pdf#tenant@tenant:acme")},
		Touches: []api.Tuple{mustTuple(t, "file:report.pdf#tenant@tenant:globex"),
			mustTuple(t, "folder:root#viewer@user:carol"), mustTuple(t, "tenant:acme#editor@user:carol"),
			mustTuple(t, "tenant:globex#admin@user:carol")},
	}); err != nil {
		t.Fatal(err)
	}
	if got := inView(); got[0] != "[tenant:globex] <nil>" || got[4] != got[0] || got[8] != "true <nil>" || got[17] != "[editor] <nil>" {
		t.Fatalf("after a write, the next View answered %q", got)
	}

	wantAll := want()
	for _, max := range []int{24, 1} {
		restore := datastore.SetMaxObjTuples(max)
		got := inView()
		restore()
		if !slices.Equal(got, wantAll) {
			t.Fatalf("max %d: one View answered\n%q\nwant\n%q", max, got, wantAll)
		}
	}
}

// TestViewSubjectManyRelations: the relations that can hold a subject are
// known past the first 64 of a schema. Type doc has 70 relations and a
// permission over the last two; after the subject's roles, users named
// by r69 or r68 are walked for it and hold it where the tuple is, and a
// user named only by r0 (and a tenant role) is answered without a walk.
func TestViewSubjectManyRelations(t *testing.T) {
	ctx := context.Background()
	var b strings.Builder
	b.WriteString("types:\n  user: {}\n  tenant:\n    relations:\n      admin: [user]\n  doc:\n    relations:\n")
	for i := range 70 {
		fmt.Fprintf(&b, "      r%d: [user]\n", i)
	}
	b.WriteString("    permissions:\n      p: r69 + r68\nroles:\n  type: tenant\n  grants:\n    admin: [doc:p]\n")
	sc, err := schema.Parse([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	s, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(t.TempDir(), "d.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.WriteSchema(ctx, sc, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, datastore.WriteRequest{Touches: []api.Tuple{
		mustTuple(t, "doc:d#r69@user:far"), mustTuple(t, "doc:d#r0@user:near"), mustTuple(t, "doc:e#r68@user:near"),
		mustTuple(t, "doc:d#r0@user:low"), mustTuple(t, "tenant:acme#admin@user:low"),
	}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		obj, user    string
		want, pruned bool
	}{{"d", "far", true, false}, {"d", "near", false, false}, {"e", "near", true, false}, {"e", "far", false, false}, {"d", "low", false, true}} {
		got, pruned, err := checkAfterRoles(ctx, s, false, "acme", api.Object{Type: "doc", ID: c.obj}, "p", api.Subject{Type: "user", ID: c.user})
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want || pruned != c.pruned {
			t.Errorf("doc:%s#p@user:%s after roles = %v (answered without a walk: %v), want %v (%v)", c.obj, c.user, got, pruned, c.want, c.pruned)
		}
	}
}
