package schemaconv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/schemaconv"
)

// The differential test writes one random model in the three languages
// (nexus YAML, OpenFGA DSL or JSON, SpiceDB), converts the two foreign ones,
// loads each schema and the same tuples into a real store, and asserts
// that every check answers the same in all three.
//
// Random models have types t0..t2 (and user) with the same members, so an
// arrow reaches its target on every type:
//
//	par:    [a random subset of t0..t2]          (the only arrow relation)
//	r0:     [user]                               (the only right side of -)
//	r1:     [user and random usersets tX#name]   (a relation)
//	m0, m1: a direct part and computed parts      (OpenFGA's mixed relations;
//	        written as a stored relation plus a permission in nexus and
//	        SpiceDB, each under its own name, and split by the converter)
//	p0, p1: random expressions                    (permissions)
//
// Exclusion only subtracts r0 or par->r0, which no permission feeds: with a
// cycle through the excluded operand a check has no canonical answer (see
// package datastore), and the stores may then differ by the order in
// which they meet the tuples, which the relation names decide.
//
// Expressions use +, &, - (or, and, but not) and par->name, and are written
// in each language with its own precedence (SpiceDB's differs from nexus')
// and random extra parentheses.

var diffTypes = []string{"t0", "t1", "t2"}

var diffNames = []string{"r0", "r1", "m0", "m1", "p0", "p1"}

type dExpr struct {
	op   string // "direct", "ref", "arrow", "+", "&", "-"
	name string
	l, r *dExpr
}

type dMember struct {
	name   string
	direct []string // subject types of a relation or of a mixed member's direct part
	expr   *dExpr   // nil for a relation
}

type dModel struct {
	types map[string][]*dMember // t0..t2 -> members in diffNames order plus par
}

func dRandExpr(r *rand.Rand, depth int) *dExpr {
	if depth <= 0 || r.IntN(3) == 0 {
		n := diffNames[r.IntN(len(diffNames))]
		if r.IntN(3) == 0 {
			return &dExpr{op: "arrow", name: n}
		}
		return &dExpr{op: "ref", name: n}
	}
	op := []string{"+", "+", "&", "-"}[r.IntN(4)]
	if op == "-" {
		// Only what no permission feeds is excluded (see above).
		sub := &dExpr{op: "ref", name: "r0"}
		if r.IntN(3) == 0 {
			sub.op = "arrow"
		}
		return &dExpr{op: op, l: dRandExpr(r, depth-1), r: sub}
	}
	return &dExpr{op: op, l: dRandExpr(r, depth-1), r: dRandExpr(r, depth-1)}
}

func dSubjects(r *rand.Rand) []string {
	out := []string{"user"}
	for range r.IntN(3) {
		s := diffTypes[r.IntN(3)] + "#" + diffNames[r.IntN(len(diffNames))]
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func dRandModel(r *rand.Rand) *dModel {
	m := &dModel{types: map[string][]*dMember{}}
	for _, tn := range diffTypes {
		var ms []*dMember
		var par []string
		for _, t := range diffTypes {
			if r.IntN(2) == 0 {
				par = append(par, t)
			}
		}
		if len(par) == 0 {
			par = []string{diffTypes[r.IntN(3)]}
		}
		ms = append(ms, &dMember{name: "par", direct: par})
		ms = append(ms, &dMember{name: "r0", direct: []string{"user"}})
		ms = append(ms, &dMember{name: "r1", direct: dSubjects(r)})
		for _, n := range []string{"m0", "m1"} {
			e := dRandExpr(r, 2)
			for e.op == "ref" || e.op == "arrow" {
				e = dRandExpr(r, 2)
			}
			// The direct part is the leftmost operand, where OpenFGA wants it.
			leaf := e
			for leaf.l != nil {
				leaf = leaf.l
			}
			*leaf = dExpr{op: "direct"}
			ms = append(ms, &dMember{name: n, direct: dSubjects(r), expr: e})
		}
		for _, n := range []string{"p0", "p1"} {
			ms = append(ms, &dMember{name: n, expr: dRandExpr(r, 3)})
		}
		m.types[tn] = ms
	}
	return m
}

// Stored names of the mixed members in nexus and SpiceDB.
func nexusStored(n string) string { return n + "_s" }
func zedStored(n string) string   { return n + "_st" }

// binExpr renders e with the operator precedence prec (higher binds
// tighter; operators of equal precedence are left associative), adding
// parentheses where needed and, at random, where not.
func binExpr(r *rand.Rand, e *dExpr, prec map[string]int, ops map[string]string, leaf func(*dExpr) string, parent int, right bool) string {
	if e.l == nil {
		return leaf(e)
	}
	p := prec[e.op]
	s := binExpr(r, e.l, prec, ops, leaf, p, false) + " " + ops[e.op] + " " + binExpr(r, e.r, prec, ops, leaf, p, true)
	if p < parent || right && p == parent || r.IntN(5) == 0 {
		s = "(" + s + ")"
	}
	return s
}

func (m *dModel) nexusYAML(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString("types:\n  user: {}\n")
	prec := map[string]int{"+": 1, "-": 1, "&": 2}
	ops := map[string]string{"+": "+", "-": "-", "&": "&"}
	for _, tn := range diffTypes {
		fmt.Fprintf(&b, "  %s:\n    relations:\n", tn)
		for _, md := range m.types[tn] {
			if md.expr == nil {
				fmt.Fprintf(&b, "      %s: [%s]\n", md.name, strings.Join(md.direct, ", "))
			} else if md.direct != nil {
				fmt.Fprintf(&b, "      %s: [%s]\n", nexusStored(md.name), strings.Join(md.direct, ", "))
			}
		}
		b.WriteString("    permissions:\n")
		for _, md := range m.types[tn] {
			if md.expr != nil {
				leaf := func(e *dExpr) string {
					switch e.op {
					case "direct":
						return nexusStored(md.name)
					case "arrow":
						return "par->" + e.name
					}
					return e.name
				}
				fmt.Fprintf(&b, "      %s: %s\n", md.name, binExpr(r, md.expr, prec, ops, leaf, 0, false))
			}
		}
	}
	return b.String()
}

func (m *dModel) spiceDB(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString("// random model\ndefinition user {}\n")
	// SpiceDB: - loosest, then &, then + (tightest of the three).
	prec := map[string]int{"-": 1, "&": 2, "+": 3}
	ops := map[string]string{"+": "+", "-": "-", "&": "&"}
	for _, tn := range diffTypes {
		fmt.Fprintf(&b, "\ndefinition %s {\n", tn)
		for _, md := range m.types[tn] {
			name := md.name
			if md.expr != nil {
				if md.direct == nil {
					continue
				}
				name = zedStored(md.name)
			}
			fmt.Fprintf(&b, "    relation %s: %s\n", name, strings.Join(md.direct, " | "))
		}
		for _, md := range m.types[tn] {
			if md.expr == nil {
				continue
			}
			leaf := func(e *dExpr) string {
				switch e.op {
				case "direct":
					return zedStored(md.name)
				case "arrow":
					if r.IntN(2) == 0 {
						return "par.any(" + e.name + ")"
					}
					return "par->" + e.name
				}
				return e.name
			}
			fmt.Fprintf(&b, "    permission %s = %s\n", md.name, binExpr(r, md.expr, prec, ops, leaf, 0, false))
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// fgaExpr renders e in the OpenFGA DSL: chains of one operator (or, and)
// go without parentheses, every other operand is parenthesised.
func fgaExpr(r *rand.Rand, e *dExpr, direct []string) string {
	switch e.op {
	case "direct":
		return "[" + strings.Join(direct, ", ") + "]"
	case "ref":
		return e.name
	case "arrow":
		return e.name + " from par"
	}
	op := map[string]string{"+": "or", "&": "and", "-": "but not"}[e.op]
	operand := func(c *dExpr, chain bool) string {
		s := fgaExpr(r, c, direct)
		if c.l != nil && !(chain && c.op == e.op && e.op != "-") || c.l == nil && r.IntN(6) == 0 {
			s = "(" + s + ")"
		}
		return s
	}
	return operand(e.l, true) + " " + op + " " + operand(e.r, false)
}

func (m *dModel) openFGA(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString("model\n  schema 1.1\n\n# random model\ntype user\n")
	for _, tn := range diffTypes {
		fmt.Fprintf(&b, "\ntype %s\n  relations\n", tn)
		for _, md := range m.types[tn] {
			if md.expr == nil {
				fmt.Fprintf(&b, "    define %s: [%s]\n", md.name, strings.Join(md.direct, ", "))
				continue
			}
			fmt.Fprintf(&b, "    define %s: %s\n", md.name, fgaExpr(r, md.expr, md.direct))
		}
	}
	return b.String()
}

// openFGAJSON is the same model in OpenFGA's JSON form.
func (m *dModel) openFGAJSON() string {
	type obj = map[string]any
	var userset func(e *dExpr) obj
	userset = func(e *dExpr) obj {
		switch e.op {
		case "direct":
			return obj{"this": obj{}}
		case "ref":
			return obj{"computedUserset": obj{"relation": e.name}}
		case "arrow":
			return obj{"tupleToUserset": obj{"tupleset": obj{"relation": "par"}, "computedUserset": obj{"relation": e.name}}}
		case "-":
			return obj{"difference": obj{"base": userset(e.l), "subtract": userset(e.r)}}
		}
		k := map[string]string{"+": "union", "&": "intersection"}[e.op]
		return obj{k: obj{"child": []any{userset(e.l), userset(e.r)}}}
	}
	tds := []any{obj{"type": "user"}}
	for _, tn := range diffTypes {
		rels, meta := obj{}, obj{}
		for _, md := range m.types[tn] {
			e := md.expr
			if e == nil {
				e = &dExpr{op: "direct"}
			}
			rels[md.name] = userset(e)
			var drt []any
			for _, s := range md.direct {
				t, rel, _ := strings.Cut(s, "#")
				if rel == "" {
					drt = append(drt, obj{"type": t})
				} else {
					drt = append(drt, obj{"type": t, "relation": rel})
				}
			}
			meta[md.name] = obj{"directly_related_user_types": drt}
		}
		tds = append(tds, obj{"type": tn, "relations": rels, "metadata": obj{"relations": meta}})
	}
	out, _ := json.MarshalIndent(obj{"schema_version": "1.1", "type_definitions": tds}, "", "\t")
	return string(out)
}

// dTuple is one random tuple: relation is the member's name.
type dTuple struct {
	object, relation, subject string
}

// diffIDs is the number of objects of each type, and of users.
const diffIDs = 2

// randTuples makes n tuples on objects tX:s<seed>o<i> and users u<i>.
func (m *dModel) randTuples(r *rand.Rand, seed, n int) []dTuple {
	var out []dTuple
	for range n {
		tn := diffTypes[r.IntN(3)]
		var stored []*dMember
		for _, md := range m.types[tn] {
			if md.direct != nil {
				stored = append(stored, md)
			}
		}
		md := stored[r.IntN(len(stored))]
		st := md.direct[r.IntN(len(md.direct))]
		t, rel, _ := strings.Cut(st, "#")
		sub := fmt.Sprintf("%s:u%d", t, r.IntN(diffIDs))
		if t != "user" {
			sub = fmt.Sprintf("%s:s%do%d", t, seed, r.IntN(diffIDs))
		}
		if rel != "" {
			sub += "#" + rel
		}
		out = append(out, dTuple{fmt.Sprintf("%s:s%do%d", tn, seed, r.IntN(diffIDs)), md.name, sub})
	}
	return out
}

type dStore struct {
	name string
	s    *datastore.BoltStore
}

// openStore opens a store in a temporary directory. The test reuses its
// three stores for every seed (a fresh store per seed would spend the time
// budget on fsyncs): each seed writes its schema with force, which drops
// the earlier tuples it does not allow, and uses object IDs of its own, so
// the tuples left from earlier seeds are unreachable from its checks.
func openStore(t *testing.T, ctx context.Context, name string) dStore {
	t.Helper()
	s, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(t.TempDir(), name+".db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return dStore{name, s}
}

func (d dStore) load(t *testing.T, ctx context.Context, sc *datastore.Schema, tuples []api.Tuple) {
	t.Helper()
	if _, err := d.s.WriteSchema(ctx, sc, true); err != nil {
		t.Fatalf("%s: %v", d.name, err)
	}
	if len(tuples) > 0 {
		if _, err := d.s.Write(ctx, datastore.WriteRequest{Touches: tuples}); err != nil {
			t.Fatalf("%s: %v", d.name, err)
		}
	}
}

func mustTuple(t *testing.T, s string) api.Tuple {
	t.Helper()
	tu, err := api.ParseTuple(s)
	if err != nil {
		t.Fatal(err)
	}
	return tu
}

func TestDifferentialFormats(t *testing.T) {
	seeds := 150
	if testing.Short() || raceEnabled {
		seeds = 40
	}
	ctx := context.Background()
	start := time.Now()
	var checks, allowed, errs int
	stores := []dStore{openStore(t, ctx, "nexus"), openStore(t, ctx, "spicedb"), openStore(t, ctx, "openfga")}
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 15))
		m := dRandModel(r)
		tuples := m.randTuples(r, seed, 20+r.IntN(30))

		nativeSrc := m.nexusYAML(r)
		native, err := datastore.ParseSchema([]byte(nativeSrc))
		if err != nil {
			t.Fatalf("seed %d: nexus schema: %v\n%s", seed, err, nativeSrc)
		}
		zedSrc := m.spiceDB(r)
		zed, err := schemaconv.FromSpiceDB([]byte(zedSrc))
		if err != nil {
			t.Fatalf("seed %d: SpiceDB: %v\n%s", seed, err, zedSrc)
		}
		fgaSrc := m.openFGA(r)
		if seed%3 == 2 {
			fgaSrc = m.openFGAJSON()
		}
		fga, err := schemaconv.FromOpenFGA([]byte(fgaSrc))
		if err != nil {
			t.Fatalf("seed %d: OpenFGA: %v\n%s", seed, err, fgaSrc)
		}

		var nt, zt, ft []api.Tuple
		for _, tu := range tuples {
			isMixed := tu.relation[0] == 'm'
			rel := tu.relation
			if isMixed {
				rel = nexusStored(tu.relation)
			}
			nt = append(nt, mustTuple(t, tu.object+"#"+rel+"@"+tu.subject))
			if isMixed {
				rel = zedStored(tu.relation)
			}
			zt = append(zt, mustTuple(t, tu.object+"#"+rel+"@"+tu.subject))
			// OpenFGA tuples name the relation as the model does.
			line, _ := json.Marshal(map[string]string{"user": tu.subject, "relation": tu.relation, "object": tu.object})
			err := schemaconv.ReadOpenFGATuples(strings.NewReader(string(line)), schemaconv.TuplesJSONL, func(x api.Tuple, _ int) error {
				ft = append(ft, fga.Renames.Tuple(x))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		stores[0].load(t, ctx, native, nt)
		stores[1].load(t, ctx, zed.Schema, zt)
		stores[2].load(t, ctx, fga.Schema, ft)
		var subjects []string
		for i := range diffIDs {
			subjects = append(subjects, fmt.Sprintf("user:u%d", i))
		}
		subjects = append(subjects, fmt.Sprintf("t0:s%do0#r1", seed), fmt.Sprintf("t1:s%do1#m0", seed), fmt.Sprintf("t2:s%do0#p1", seed))
		for _, tn := range diffTypes {
			for o := range diffIDs {
				obj := fmt.Sprintf("%s:s%do%d", tn, seed, o)
				for _, perm := range append([]string{"par"}, diffNames...) {
					for _, sub := range subjects {
						var first string
						for i, st := range stores {
							ok, err := fixture.CheckText(ctx, st.s, obj, perm, sub)
							got := fmt.Sprint(ok)
							if err != nil {
								got = "error"
							}
							if i == 0 {
								first = got
								checks++
								if ok {
									allowed++
								}
								if err != nil {
									errs++
								}
								continue
							}
							if got != first {
								t.Fatalf("seed %d: check %s %s %s: nexus %s, %s %s\nnexus:\n%s\nSpiceDB:\n%s\nOpenFGA:\n%s\nconverted OpenFGA:\n%s\ntuples: %v",
									seed, obj, perm, sub, first, st.name, got, native.Source(), zedSrc, fgaSrc, fga.YAML, tuples)
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d seeds, %d checks in each of 3 stores: %d allowed, %d depth errors, in %v", seeds, checks, allowed, errs, time.Since(start).Round(time.Millisecond))
	if allowed < checks/20 || allowed > checks*19/20 {
		t.Fatalf("%d of %d checks allowed: the random models are too one-sided to compare", allowed, checks)
	}
}
