package datastore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// The differential test compares Check with a reference evaluator written
// separately here: the least fixed point of the schema's equations over
// the tuple set, computed by plain iteration. Random schemas have three
// types t0..t2 with the same members:
//
//	r0, r1: [user, and random usersets tX#m]
//	par:    [random subset of t0..t2]  (arrows go through par only)
//	ban:    [user]                     (the only right side of '-')
//	p0, p1: random expressions over r0, r1, p0, p1, par->m, with + & and "- ban"
//
// Exclusion only subtracts stored tuples, so the equations are stratified
// and their least fixed point is the one right answer, cycles included.
//
// Explore more schemas with NEXUS_DIFFERENTIAL_SEED (the first schema's
// seed, 0 by default) and NEXUS_DIFFERENTIAL_SCHEMAS (how many, 25 by
// default); a failure names its schema's seed.

var diffMembers = []string{"r0", "r1", "par", "ban", "p0", "p1"}

type refExpr struct {
	op   string // ref, arrow, +, &, -
	name string
	l, r *refExpr
}

func (e *refExpr) String() string {
	switch e.op {
	case "ref":
		return e.name
	case "arrow":
		return "par->" + e.name
	case "-":
		return "(" + e.l.String() + " - ban)"
	}
	return "(" + e.l.String() + " " + e.op + " " + e.r.String() + ")"
}

func randExpr(r *rand.Rand, depth int) *refExpr {
	names := []string{"r0", "r1", "p0", "p1"}
	if depth <= 0 || r.IntN(3) == 0 {
		if r.IntN(3) == 0 {
			return &refExpr{op: "arrow", name: names[r.IntN(len(names))]}
		}
		return &refExpr{op: "ref", name: names[r.IntN(2+r.IntN(3))%4]}
	}
	switch r.IntN(5) {
	case 0, 1:
		return &refExpr{op: "+", l: randExpr(r, depth-1), r: randExpr(r, depth-1)}
	case 2, 3:
		return &refExpr{op: "&", l: randExpr(r, depth-1), r: randExpr(r, depth-1)}
	default:
		return &refExpr{op: "-", l: randExpr(r, depth-1)}
	}
}

type refType struct {
	allowed map[string][]string // relation -> accepted subject types
	perms   map[string]*refExpr
}

func randSchema(r *rand.Rand) (string, map[string]*refType) {
	types := map[string]*refType{}
	var b strings.Builder
	b.WriteString("types:\n  user: {}\n")
	for i := range 3 {
		tn := fmt.Sprintf("t%d", i)
		rt := &refType{allowed: map[string][]string{}, perms: map[string]*refExpr{}}
		types[tn] = rt
		for _, rel := range []string{"r0", "r1"} {
			acc := []string{"user"}
			for j := range 3 {
				for _, m := range diffMembers {
					if m != "par" && m != "ban" && r.IntN(9) == 0 {
						acc = append(acc, fmt.Sprintf("t%d#%s", j, m))
					}
				}
			}
			rt.allowed[rel] = acc
		}
		var par []string
		for j := range 3 {
			if r.IntN(2) == 0 || j == i {
				par = append(par, fmt.Sprintf("t%d", j))
			}
		}
		rt.allowed["par"] = par
		rt.allowed["ban"] = []string{"user"}
		rt.perms["p0"] = randExpr(r, 3)
		rt.perms["p1"] = randExpr(r, 2)
		fmt.Fprintf(&b, "  %s:\n    relations:\n", tn)
		for _, rel := range []string{"r0", "r1", "par", "ban"} {
			fmt.Fprintf(&b, "      %s: [%s]\n", rel, strings.Join(rt.allowed[rel], ", "))
		}
		fmt.Fprintf(&b, "    permissions:\n      p0: %s\n      p1: %s\n", rt.perms["p0"], rt.perms["p1"])
	}
	// Tenant roles are ban on t0; they play no part in checks.
	b.WriteString("roles:\n  type: t0\n  grants:\n    ban: [t1:p0]\n")
	return b.String(), types
}

func randTuples(r *rand.Rand, types map[string]*refType, n int) []api.Tuple {
	var out []api.Tuple
	seen := map[api.Tuple]bool{}
	for len(out) < n {
		tn := fmt.Sprintf("t%d", r.IntN(3))
		rel := []string{"r0", "r1", "par", "ban"}[r.IntN(4)]
		acc := types[tn].allowed[rel]
		st := acc[r.IntN(len(acc))]
		sub := api.Subject{Type: st, ID: fmt.Sprintf("o%d", r.IntN(4))}
		if st == "user" {
			sub.ID = fmt.Sprintf("u%d", r.IntN(3))
		}
		if i := strings.IndexByte(st, '#'); i >= 0 {
			sub.Type, sub.Relation = st[:i], st[i+1:]
		}
		t := api.Tuple{Object: api.Object{Type: tn, ID: fmt.Sprintf("o%d", r.IntN(4))}, Relation: rel, Subject: sub}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// reference computes, for user u, every (type, id, member) that holds.
func reference(types map[string]*refType, tuples []api.Tuple, user string) map[string]bool {
	val := map[string]bool{}
	key := func(t, id, m string) string { return t + ":" + id + "#" + m }
	direct := func(t, id, rel string) bool {
		for _, tu := range tuples {
			if tu.Object.Type == t && tu.Object.ID == id && tu.Relation == rel && tu.Subject.Type == "user" && tu.Subject.ID == user && tu.Subject.Relation == "" {
				return true
			}
		}
		return false
	}
	var eval func(t, id string, e *refExpr) bool
	eval = func(t, id string, e *refExpr) bool {
		switch e.op {
		case "ref":
			return val[key(t, id, e.name)]
		case "arrow":
			for _, tu := range tuples {
				if tu.Object.Type == t && tu.Object.ID == id && tu.Relation == "par" && val[key(tu.Subject.Type, tu.Subject.ID, e.name)] {
					return true
				}
			}
			return false
		case "+":
			return eval(t, id, e.l) || eval(t, id, e.r)
		case "&":
			return eval(t, id, e.l) && eval(t, id, e.r)
		default:
			return eval(t, id, e.l) && !direct(t, id, "ban")
		}
	}
	for changed := true; changed; {
		changed = false
		next := map[string]bool{}
		for tn, rt := range types {
			for o := range 4 {
				id := fmt.Sprintf("o%d", o)
				for _, rel := range []string{"r0", "r1", "par", "ban"} {
					v := direct(tn, id, rel)
					for _, tu := range tuples {
						if !v && tu.Object.Type == tn && tu.Object.ID == id && tu.Relation == rel && tu.Subject.Relation != "" {
							v = val[key(tu.Subject.Type, tu.Subject.ID, tu.Subject.Relation)]
						}
					}
					next[key(tn, id, rel)] = v
				}
				for p, e := range rt.perms {
					next[key(tn, id, p)] = eval(tn, id, e)
				}
			}
		}
		for k, v := range next {
			if val[k] != v {
				changed = true
			}
		}
		val = next
	}
	return val
}

func TestDifferentialCheck(t *testing.T) {
	// Once with the per-object tuple cache, once with seeks only.
	for _, cache := range []bool{true, false} {
		t.Run(fmt.Sprint("objectCache=", cache), func(t *testing.T) {
			if !cache {
				defer datastore.SetMaxObjTuples(0)()
			}
			testDifferential(t, alone)
		})
	}
	// Each check after the subject's roles in the same View, as the
	// default policy asks them: the View keeps the subject's tuples and a
	// check of a subject no tuple can hold is answered without a walk.
	t.Run("rolesFirst", func(t *testing.T) { testDifferential(t, rolesFirst) })
	// Each check after View.Preload of its object and subject, then the
	// subject's roles, as the default policy's decision asks them.
	t.Run("preloadFirst", func(t *testing.T) { testDifferential(t, preloadFirst) })
}

// How testDifferential asks each check.
const (
	alone        = iota // a check of its own
	rolesFirst          // after the subject's roles, in one View
	preloadFirst        // after Preload and the subject's roles, in one View
)

// checkAfterRoles asks subject's roles in tenant and then the check, in
// one View (with preload, after View.Preload of obj and sub); pruned is
// whether the View could answer without a walk.
func checkAfterRoles(ctx context.Context, s *datastore.BoltStore, preload bool, tenant string, obj api.Object, perm string, sub api.Subject) (got, pruned bool, err error) {
	err = s.View(ctx, func(v *datastore.View) error {
		if preload {
			if err := v.Preload(obj, sub); err != nil {
				return err
			}
		}
		if _, err := v.AppendRoles(nil, sub, tenant); err != nil {
			return err
		}
		pruned = v.CannotHold(obj, perm, sub)
		res, err := v.Check(datastore.CheckRequest{Object: obj, Permission: perm, Subject: sub})
		got = res.Allowed
		return err
	})
	return got, pruned, err
}

func testDifferential(t *testing.T, how int) {
	schemas, datasets := 25, 4
	allowed, total, pruned := 0, 0, 0
	if testing.Short() {
		schemas = 15
	}
	schemas = envInt(t, "NEXUS_DIFFERENTIAL_SCHEMAS", schemas)
	first := envInt(t, "NEXUS_DIFFERENTIAL_SEED", 0)
	ctx := context.Background()
	for i := first; i < first+schemas; i++ {
		r := rand.New(rand.NewPCG(uint64(i), 99))
		src, types := randSchema(r)
		sc, err := schema.Parse([]byte(src))
		if err != nil {
			t.Fatalf("schema %d does not parse: %v\n%s", i, err, src)
		}
		s, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(t.TempDir(), "d.db"), MaxDepth: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.WriteSchema(ctx, sc, false); err != nil {
			t.Fatal(err)
		}
		// Tuples no check can reach (objects and users of their own),
		// before and after the checked ones in key order, so that the
		// indexes are trees of several levels, read from their pages.
		var filler []api.Tuple
		for f := range 1500 {
			for _, p := range []string{"a", "z"} {
				filler = append(filler, api.Tuple{Object: api.Object{Type: fmt.Sprintf("t%d", f%3), ID: fmt.Sprintf("%sobj%d", p, f)},
					Relation: "r0", Subject: api.Subject{Type: "user", ID: fmt.Sprintf("%suser%d", p, f)}})
			}
		}
		if _, err := s.Write(ctx, datastore.WriteRequest{Touches: filler}); err != nil {
			t.Fatal(err)
		}
		if !s.ReadsPages() {
			t.Fatal("the filled store's indexes are not read from their pages")
		}
		for d := range datasets {
			tuples := randTuples(r, types, 10+r.IntN(30))
			if _, err := s.Write(ctx, datastore.WriteRequest{Touches: tuples}); err != nil {
				t.Fatal(err)
			}
			for u := range 4 { // u3 is named by no tuple
				user := fmt.Sprintf("u%d", u)
				want := reference(types, tuples, user)
				for tn := range types {
					for o := range 4 {
						for _, m := range diffMembers {
							obj := fmt.Sprintf("%s:o%d", tn, o)
							var got, cut bool
							var err error
							if how != alone {
								got, cut, err = checkAfterRoles(ctx, s, how == preloadFirst, "o0", api.Object{Type: tn, ID: fmt.Sprintf("o%d", o)}, m, api.Subject{Type: "user", ID: user})
								if cut {
									pruned++
								}
							} else {
								got, err = fixture.CheckText(ctx, s, obj, m, "user:"+user)
							}
							if err != nil {
								t.Fatalf("schema %d data %d: %s#%s@user:%s: %v", i, d, obj, m, user, err)
							}
							total++
							if got {
								allowed++
							}
							if exp := want[obj+"#"+m]; got != exp {
								var tl []string
								for _, tu := range tuples {
									tl = append(tl, tu.String())
								}
								t.Fatalf("schema %d data %d: %s#%s@user:%s = %v, reference %v\nschema:\n%s\ntuples:\n%s",
									i, d, obj, m, user, got, exp, src, strings.Join(tl, "\n"))
							}
						}
					}
				}
			}
			if _, err := s.Write(ctx, datastore.WriteRequest{Deletes: tuples}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Guard against a generator whose answers are all the same.
	if allowed < total/20 || allowed > total*19/20 {
		t.Fatalf("%d of %d checks allowed: the random cases do not discriminate", allowed, total)
	}
	t.Logf("%d of %d checks allowed, %d answered without a walk", allowed, total, pruned)
	// Guard against a View that never answers without a walk, or always.
	if how != alone && (pruned < total/10 || pruned > total-allowed-total/10) {
		t.Fatalf("%d of %d checks (%d allowed) answered without a walk: the cases do not test it", pruned, total, allowed)
	}
}

// envInt is the integer in the environment variable name, or def when it
// is not set.
func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a number of at least 0", name, v)
	}
	return n
}
