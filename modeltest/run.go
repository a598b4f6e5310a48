package modeltest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
)

// Report is the outcome of a run.
type Report struct {
	// Assertions counts the assertions run; Failures lists those that did
	// not hold, in file order.
	Assertions int
	Failures   []Failure
	// Skipped lists what the file asks that the runner does not check.
	Skipped []string
}

// Failure is one assertion that did not hold.
type Failure struct {
	File string
	Line int
	Test string // the OpenFGA test's name; "" at the top level
	What string // "check doc:1 viewer user:anne", "list_objects ..."
	Want string
	Got  string // the answer, or "error: ..."
}

func (f Failure) String() string {
	test := ""
	if f.Test != "" {
		test = " (" + f.Test + ")"
	}
	return fmt.Sprintf("%s:%d:%s %s: want %s, got %s", f.File, f.Line, test, f.What, f.Want, f.Got)
}

// Run loads the schema and tuples into a new store in a temporary
// directory (removed afterwards) and runs every assertion. Each OpenFGA
// test sees the file's tuples and its own, which are deleted after it. An
// error means the suite could not run (a tuple the schema refuses, a
// store that does not open); failing assertions are in the Report.
func (s *Suite) Run(ctx context.Context) (*Report, error) {
	dir, err := os.MkdirTemp("", "nexus-rel-test-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	st, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(dir, "relations.db")})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if _, err := st.WriteSchema(ctx, s.schema.Schema, false); err != nil {
		return nil, err
	}
	have := map[api.Tuple]bool{}
	if _, err := s.writeNew(ctx, st, s.tuples, have); err != nil {
		return nil, err
	}
	rep := &Report{Skipped: s.skipped}
	for _, g := range s.groups {
		added, err := s.writeNew(ctx, st, g.tuples, have)
		if err != nil {
			return nil, err
		}
		for _, a := range g.checks {
			rep.Assertions++
			want, got := s.eval(ctx, st, a)
			if want != got {
				rep.Failures = append(rep.Failures, Failure{File: a.file, Line: a.line, Test: g.name, What: a.String(), Want: want, Got: got})
			}
		}
		if len(added) > 0 {
			if _, err := st.Write(ctx, datastore.WriteRequest{Deletes: added}); err != nil {
				return nil, err
			}
			for _, t := range added {
				delete(have, t)
			}
		}
	}
	return rep, nil
}

// writeNew writes the tuples not yet stored (renamed for the relations an
// OpenFGA conversion split) and returns them.
func (s *Suite) writeNew(ctx context.Context, st *datastore.BoltStore, ts []srcTuple, have map[api.Tuple]bool) ([]api.Tuple, error) {
	var fresh []srcTuple
	var added []api.Tuple
	seen := map[api.Tuple]bool{}
	for _, t := range ts {
		t.t = s.schema.Renames.Tuple(t.t)
		if !have[t.t] && !seen[t.t] {
			seen[t.t] = true
			fresh = append(fresh, t)
			added = append(added, t.t)
		}
	}
	return added, s.write(ctx, st, fresh, have)
}

// write stores tuples in one write; when the schema refuses one, it finds
// which, to name its line.
func (s *Suite) write(ctx context.Context, st *datastore.BoltStore, ts []srcTuple, have map[api.Tuple]bool) error {
	if len(ts) == 0 {
		return nil
	}
	all := make([]api.Tuple, len(ts))
	for i, t := range ts {
		all[i] = t.t
	}
	if _, err := st.Write(ctx, datastore.WriteRequest{Touches: all}); err != nil {
		if !errors.Is(err, datastore.ErrInvalidTuple) {
			return err
		}
		for i, t := range ts {
			if _, err := st.Write(ctx, datastore.WriteRequest{Touches: all[i : i+1]}); err != nil {
				return &Error{File: t.file, Line: t.line, Column: 1, Msg: err.Error()}
			}
		}
		return err
	}
	for _, t := range all {
		have[t] = true
	}
	return nil
}

// eval runs one assertion and returns the wanted and the actual answer.
func (s *Suite) eval(ctx context.Context, st *datastore.BoltStore, a *assertion) (want, got string) {
	switch a.kind {
	case "list_objects":
		ids, err := st.LookupResources(ctx, a.subject, a.permission, a.typ)
		if err != nil {
			return list(a.wantList), "error: " + err.Error()
		}
		return list(a.wantList), list(prefixed(a.typ, ids))
	case "list_users":
		ids, err := st.LookupSubjects(ctx, a.object, a.permission, a.typ)
		if err != nil {
			return list(a.wantList), "error: " + err.Error()
		}
		return list(a.wantList), list(prefixed(a.typ, ids))
	}
	res, err := st.Check(ctx, datastore.CheckRequest{Object: a.object, Permission: a.permission, Subject: a.subject})
	if err != nil {
		return fmt.Sprint(a.want), "error: " + err.Error()
	}
	return fmt.Sprint(a.want), fmt.Sprint(res.Allowed)
}

func prefixed(typ string, ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = typ + ":" + id
	}
	slices.Sort(out)
	return out
}

func list(xs []string) string { return "[" + strings.Join(xs, ", ") + "]" }
