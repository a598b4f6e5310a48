package check

import (
	"maps"
	"slices"

	"github.com/nexuspdp/nexus/datastore/internal/index"
	"github.com/nexuspdp/nexus/datastore/schema"
)

// Graph is a schema as one store checks it: its types' relations and
// permissions linked into a graph (references, arrows and usersets point
// at the members they name) and numbered by the store's dictionary
// (Bind). The *schema.Schema it embeds answers everything else. A Graph
// is private to one store and immutable once bound.
type Graph struct {
	*schema.Schema
	types   map[string]*typeDef
	nrels   int            // relations in all types (see member.relIndex)
	relByID map[relKey]int // relIndex by dictionary numbers, set by Bind
}

type typeDef struct {
	name    string
	members map[string]*member // relations and permissions by name
	order   []*member          // relations in source order, then permissions
}

// member is a relation or a permission of a type.
type member struct {
	typ     *typeDef
	name    string
	perm    bool
	allowed []schema.SubjectType // relations
	expr    *expr                // permissions
	// for relations: does it accept usersets?
	hasUserset bool

	// relIndex numbers the schema's relations (not permissions) from 0.
	relIndex int
	// holds has the bits of the relations (by relIndex) whose tuples can
	// hold a plain subject in this member (see Graph.holders).
	holds []uint64

	// bound to a store's dictionary by Bind
	typeID, relID uint64
	usersets      []usersetRef
}

// relKey is a relation by its dictionary numbers.
type relKey struct{ typeID, relID uint64 }

type usersetRef struct {
	typeID, relID uint64
	m             *member
}

type exprKind uint8

const (
	exprRef exprKind = iota
	exprArrow
	exprUnion
	exprIntersect
	exprExclude
)

var exprKinds = map[schema.Op]exprKind{
	schema.OpRef: exprRef, schema.OpArrow: exprArrow, schema.OpUnion: exprUnion,
	schema.OpIntersect: exprIntersect, schema.OpExclude: exprExclude,
}

type expr struct {
	kind exprKind
	name string // ref: member; arrow: permission on the targets
	via  string // arrow: relation followed
	l, r *expr
	src  *schema.Expr // for traces

	ref    *member            // resolved ref
	target map[string]*member // arrow: target type -> member

	// bound to a store's dictionary by Bind
	viaID      uint64
	targetByID []*member // dict type id -> member
}

// Compile links sc's members into the graph the checks walk. sc is valid
// (schema.Parse resolved every name), so every lookup here succeeds.
func Compile(sc *schema.Schema) *Graph {
	c := &Graph{Schema: sc, types: map[string]*typeDef{}}
	types := sc.Types()
	for _, tn := range types {
		t := &typeDef{name: tn, members: map[string]*member{}}
		c.types[tn] = t
		for _, rel := range sc.Relations(tn) {
			m := &member{typ: t, name: rel, allowed: sc.AllowedSubjects(tn, rel), relIndex: c.nrels}
			c.nrels++
			for _, a := range m.allowed {
				if a.Relation != "" {
					m.hasUserset = true
				}
			}
			t.members[rel], t.order = m, append(t.order, m)
		}
		for _, p := range sc.Permissions(tn) {
			m := &member{typ: t, name: p, perm: true}
			t.members[p], t.order = m, append(t.order, m)
		}
	}
	for _, tn := range types {
		t := c.types[tn]
		for _, m := range t.order {
			if m.perm {
				m.expr = c.compileExpr(t, sc.Expr(tn, m.name))
			}
		}
	}
	for _, t := range c.types {
		for _, m := range t.order {
			m.holds = make([]uint64, (c.nrels+63)/64)
			for _, h := range c.holders(m) {
				m.holds[h.relIndex/64] |= 1 << (h.relIndex % 64)
			}
		}
	}
	return c
}

func (c *Graph) compileExpr(t *typeDef, e *schema.Expr) *expr {
	x := &expr{kind: exprKinds[e.Op], name: e.Name, via: e.Via, src: e}
	switch e.Op {
	case schema.OpRef:
		x.ref = t.members[e.Name]
	case schema.OpArrow:
		x.target = map[string]*member{}
		for _, st := range t.members[e.Via].allowed {
			if tm := c.types[st.Type].members[e.Name]; tm != nil {
				x.target[st.Type] = tm
			}
		}
	default:
		x.l, x.r = c.compileExpr(t, e.Left), c.compileExpr(t, e.Right)
	}
	return x
}

// holders returns the relations whose tuples can hold a plain subject in
// m: every relation a check of m may test for a tuple naming the subject
// (m itself when it is a relation, those its permission refers to, the
// targets of its arrows, the relations of the usersets a relation
// accepts, and so on). An arrow's own relation is not among them: the
// walk follows its tuples' objects and never matches them against the
// subject. Both sides of an intersection and an exclusion are included,
// which is more than needed and never less.
func (c *Graph) holders(m *member) []*member {
	seen := map[*member]bool{}
	var out []*member
	var visit func(*member)
	var visitExpr func(*expr)
	visit = func(x *member) {
		if x == nil || seen[x] {
			return
		}
		seen[x] = true
		if x.perm {
			visitExpr(x.expr)
			return
		}
		out = append(out, x)
		for _, a := range x.allowed {
			if a.Relation != "" {
				if tt := c.types[a.Type]; tt != nil {
					visit(tt.members[a.Relation])
				}
			}
		}
	}
	visitExpr = func(e *expr) {
		switch {
		case e == nil:
		case e.kind == exprRef:
			visit(e.ref)
		case e.kind == exprArrow:
			for _, tm := range e.target {
				visit(tm)
			}
		default:
			visitExpr(e.l)
			visitExpr(e.r)
		}
	}
	visit(m)
	return out
}

// Names returns every type and relation name of the schema, sorted: the
// names the dictionary Bind is given must hold.
func (c *Graph) Names() []string {
	set := map[string]bool{}
	for _, t := range c.types {
		set[t.name] = true
		for _, m := range t.order {
			set[m.name] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// Bind records the dictionary numbers of every name in the graph. d
// holds every name of the schema (Names).
func (c *Graph) Bind(d *index.Dict) {
	for _, t := range c.types {
		for _, m := range t.order {
			m.typeID, _ = d.ID(t.name)
			m.relID, _ = d.ID(m.name)
			m.usersets = m.usersets[:0]
			for _, a := range m.allowed {
				if a.Relation == "" {
					continue
				}
				tid, _ := d.ID(a.Type)
				rid, _ := d.ID(a.Relation)
				m.usersets = append(m.usersets, usersetRef{tid, rid, c.types[a.Type].members[a.Relation]})
			}
			if m.expr != nil {
				bindExpr(m.expr, d)
			}
		}
	}
	c.relByID = make(map[relKey]int, c.nrels)
	for _, t := range c.types {
		for _, m := range t.order {
			if !m.perm {
				c.relByID[relKey{m.typeID, m.relID}] = m.relIndex
			}
		}
	}
}

func bindExpr(e *expr, d *index.Dict) {
	switch e.kind {
	case exprRef:
	case exprArrow:
		e.viaID, _ = d.ID(e.via)
		e.targetByID = make([]*member, len(d.Names))
		for tn, m := range e.target {
			if id, ok := d.ID(tn); ok {
				e.targetByID[id] = m
			}
		}
	default:
		bindExpr(e.l, d)
		bindExpr(e.r, d)
	}
}

// Public is the schema c compiles, nil for a nil c (no schema).
func (c *Graph) Public() *schema.Schema {
	if c == nil {
		return nil
	}
	return c.Schema
}
