package schemaconv

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
)

// The parsers of both languages produce a model: types with members, each
// member a relation (directly assigned subject types), a permission (an
// expression) or, in OpenFGA only, both at once (an expression in which a
// direct leaf stands for the assigned subjects). convert turns a model into
// a nexus schema.

type model struct {
	from   Format
	types  []*typeDef
	byName map[string]*typeDef
}

type typeDef struct {
	name    string
	at      pos
	members []*memberDef
	byName  map[string]*memberDef
}

type memberDef struct {
	name string
	at   pos
	// direct lists the subject types a tuple may hold (a relation, or the
	// direct part of an OpenFGA relation); hasDirect says there is one.
	direct    []subjectRef
	hasDirect bool
	directAt  pos
	// expr is the computed part; nil for a plain relation. In OpenFGA it
	// may hold one nodeDirect leaf.
	expr *node
	// stored is the nexus relation that holds the tuples of a split member.
	stored string
}

type subjectRef struct {
	typ, rel string
	at       pos
}

func (s subjectRef) String() string {
	if s.rel == "" {
		return s.typ
	}
	return s.typ + "#" + s.rel
}

type nodeKind uint8

const (
	nodeDirect nodeKind = iota // OpenFGA's [types] inside an expression
	nodeRef                    // a relation or permission of the same type
	nodeArrow                  // via->name (OpenFGA: name from via)
	nodeUnion
	nodeIntersect
	nodeExclude
)

type node struct {
	kind  nodeKind
	name  string // ref, arrow target
	via   string // arrow relation
	l, r  *node
	at    pos // the name, or the operator
	viaAt pos
}

func (m *model) addType(name string, at pos) (*typeDef, error) {
	if m.byName == nil {
		m.byName = map[string]*typeDef{}
	}
	if prev := m.byName[name]; prev != nil {
		return nil, invalidErr(at, "type %s declared twice (first at %d:%d)", name, prev.at.line, prev.at.col)
	}
	t := &typeDef{name: name, at: at, byName: map[string]*memberDef{}}
	m.byName[name] = t
	m.types = append(m.types, t)
	return t, nil
}

func (t *typeDef) addMember(name string, at pos) (*memberDef, error) {
	if prev := t.byName[name]; prev != nil {
		return nil, invalidErr(at, "%s#%s declared twice (first at %d:%d)", t.name, name, prev.at.line, prev.at.col)
	}
	md := &memberDef{name: name, at: at}
	t.byName[name] = md
	t.members = append(t.members, md)
	return md, nil
}

// isRelation reports whether the member converts to a plain nexus relation.
func (md *memberDef) isRelation() bool { return md.expr == nil }

// directSuffix is appended to the name of an OpenFGA relation that mixes
// direct assignment with computed parts, to name the nexus relation that
// stores its tuples (viewer -> viewer_direct, or viewer_direct2, ... when
// the type already has that name).
const directSuffix = "_direct"

// storedName picks a collision-free name for the stored half of a split.
func storedName(t *typeDef, name string, taken map[string]bool) string {
	for i := 1; ; i++ {
		suf := directSuffix
		if i > 1 {
			suf += strconv.Itoa(i)
		}
		base := name
		if len(base)+len(suf) > api.MaxNameLen {
			base = base[:api.MaxNameLen-len(suf)]
		}
		if n := base + suf; !taken[n] && t.byName[n] == nil {
			return n
		}
	}
}

// convert validates the model, splits mixed members and renders the nexus
// schema.
func (m *model) convert() (*Result, error) {
	var errs []error
	add := func(err error) {
		if len(errs) < 20 {
			errs = append(errs, err)
		}
	}
	if len(m.types) == 0 {
		return nil, invalidErr(pos{1, 1}, "no types")
	}
	// Names nexus accepts.
	for _, t := range m.types {
		if !api.ValidName(t.name) {
			add(invalidErr(t.at, "type name %q is not a valid nexus name (want [a-z][a-z0-9_]*, at most %d bytes)", t.name, api.MaxNameLen))
		}
		for _, md := range t.members {
			if !api.ValidName(md.name) {
				add(invalidErr(md.at, "relation name %q is not a valid nexus name (want [a-z][a-z0-9_]*, at most %d bytes)", md.name, api.MaxNameLen))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// Split mixed members.
	renames := Renames{}
	for _, t := range m.types {
		taken := map[string]bool{}
		for _, md := range t.members {
			if md.expr != nil && md.hasDirect {
				md.stored = storedName(t, md.name, taken)
				taken[md.stored] = true
				renames[t.name+"#"+md.name] = md.stored
			}
		}
	}
	// References.
	for _, t := range m.types {
		for _, md := range t.members {
			seen := map[string]bool{}
			for _, s := range md.direct {
				if seen[s.String()] {
					add(invalidErr(s.at, "%s#%s: subject type %s listed twice", t.name, md.name, s))
					continue
				}
				seen[s.String()] = true
				st := m.byName[s.typ]
				switch {
				case st == nil:
					add(invalidErr(s.at, "%s#%s: unknown type %q", t.name, md.name, s.typ))
				case s.rel != "" && st.byName[s.rel] == nil:
					add(invalidErr(s.at, "%s#%s: type %s has no relation %q", t.name, md.name, s.typ, s.rel))
				}
			}
			if md.expr != nil {
				m.checkExpr(t, md, md.expr, add)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	src := m.render(renames)
	sc, err := datastore.ParseSchema(src)
	if err != nil {
		return nil, fmt.Errorf("schemaconv: the converted schema is invalid (please report this): %w\n%s", err, src)
	}
	return &Result{YAML: src, Schema: sc, Renames: renames}, nil
}

func (m *model) checkExpr(t *typeDef, md *memberDef, e *node, add func(error)) {
	switch e.kind {
	case nodeDirect:
	case nodeRef:
		if t.byName[e.name] == nil {
			add(invalidErr(e.at, "%s#%s: type %s has no relation %q", t.name, md.name, t.name, e.name))
		}
	case nodeArrow:
		via := t.byName[e.via]
		arrow := e.via + "->" + e.name
		if m.from == OpenFGA {
			arrow = e.name + " from " + e.via
		}
		switch {
		case via == nil:
			add(invalidErr(e.viaAt, "%s#%s: %s: type %s has no relation %q", t.name, md.name, arrow, t.name, e.via))
			return
		case !via.isRelation():
			if m.from == OpenFGA {
				add(invalidErr(e.viaAt, "%s#%s: %s: %s must be a relation with only directly assigned types (as OpenFGA requires)", t.name, md.name, arrow, e.via))
			} else {
				add(invalidErr(e.viaAt, "%s#%s: %s: %s is a permission; an arrow must start from a relation", t.name, md.name, arrow, e.via))
			}
			return
		}
		for _, s := range via.direct {
			st := m.byName[s.typ]
			if st == nil {
				continue // reported with the relation
			}
			if st.byName[e.name] == nil {
				add(invalidErr(e.at, "%s#%s: %s: type %s (accepted by %s#%s) has no relation %q; nexus needs it on every type the relation accepts",
					t.name, md.name, arrow, s.typ, t.name, e.via, e.name))
			}
		}
	default:
		m.checkExpr(t, md, e.l, add)
		m.checkExpr(t, md, e.r, add)
	}
}

// render writes the nexus YAML schema.
func (m *model) render(renames Renames) []byte {
	var b bytes.Buffer
	switch m.from {
	case OpenFGA:
		b.WriteString("# Converted from an OpenFGA model by nexus.\n")
	case SpiceDB:
		b.WriteString("# Converted from a SpiceDB schema by nexus.\n")
	}
	if len(renames) > 0 {
		b.WriteString("# OpenFGA relations that mix directly assigned subjects with computed ones\n")
		b.WriteString("# are split into a relation that stores their tuples (marked \"tuples of\n")
		b.WriteString("# OpenFGA's ...\"; nexus rel import --from openfga writes there) and a\n")
		b.WriteString("# permission under the original name, which checks use.\n")
	}
	b.WriteString("types:\n")
	for _, t := range m.types {
		var rels, perms []*memberDef
		for _, md := range t.members {
			if md.isRelation() {
				rels = append(rels, md)
			} else {
				if md.stored != "" {
					rels = append(rels, md)
				}
				perms = append(perms, md)
			}
		}
		if len(rels)+len(perms) == 0 {
			fmt.Fprintf(&b, "  %s: {}\n", t.name)
			continue
		}
		fmt.Fprintf(&b, "  %s:\n", t.name)
		if len(rels) > 0 {
			b.WriteString("    relations:\n")
			for _, md := range rels {
				name := md.name
				if md.stored != "" {
					name = md.stored
				}
				subs := make([]string, len(md.direct))
				for i, s := range md.direct {
					subs[i] = s.String()
				}
				fmt.Fprintf(&b, "      %s: [%s]", name, strings.Join(subs, ", "))
				if md.stored != "" {
					fmt.Fprintf(&b, "  %s%s", renameMarker, md.name)
				}
				b.WriteByte('\n')
			}
		}
		if len(perms) > 0 {
			b.WriteString("    permissions:\n")
			for _, md := range perms {
				fmt.Fprintf(&b, "      %s: %s\n", md.name, exprString(md.expr, md.stored, 0))
			}
		}
	}
	return b.Bytes()
}

// Precedence of nexus' operators: -> binds tightest (an atom here), then
// &, then + and - (equal, left to right).
func prec(k nodeKind) int {
	switch k {
	case nodeUnion, nodeExclude:
		return 1
	case nodeIntersect:
		return 2
	}
	return 3
}

// exprString renders e in nexus syntax with the parentheses nexus'
// precedence needs; stored names the relation a direct leaf stands for.
func exprString(e *node, stored string, parent int) string {
	var s string
	switch e.kind {
	case nodeDirect:
		return stored
	case nodeRef:
		return e.name
	case nodeArrow:
		return e.via + "->" + e.name
	case nodeUnion, nodeExclude, nodeIntersect:
		op := map[nodeKind]string{nodeUnion: " + ", nodeExclude: " - ", nodeIntersect: " & "}[e.kind]
		p := prec(e.kind)
		l := exprString(e.l, stored, p)
		// The right operand of a left-associative operator needs
		// parentheses at equal precedence (even a + (b + c): b could be
		// x - y, whose - must not reach a).
		r := exprString(e.r, stored, p+1)
		s = l + op + r
		if p < parent {
			s = "(" + s + ")"
		}
	}
	return s
}
