package check

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/internal/index"
	bolt "go.etcd.io/bbolt"
)

// Trace is one node of a check's evaluation: a relation or permission of
// an object (Kind "relation" or "permission"), an operator of a permission
// expression ("union", "intersection", "exclusion"), an arrow ("arrow"), or
// a stored tuple that matched ("tuple").
type Trace struct {
	Kind     string
	Object   api.Object // the object evaluated (relation, permission, arrow)
	Name     string     // relation or permission name, arrow text, or tuple
	Result   bool
	Cached   bool // answered from this check's memo
	Cycle    bool // cut because it was already being evaluated
	Children []*Trace
}

// MarshalJSON writes the trace with lower-case field names and the object
// as "type:id": {"kind", "object", "name", "result", "cached", "cycle",
// "children"}, the last three only when set.
func (t *Trace) MarshalJSON() ([]byte, error) {
	type node struct {
		Kind     string   `json:"kind"`
		Object   string   `json:"object,omitempty"`
		Name     string   `json:"name"`
		Result   bool     `json:"result"`
		Cached   bool     `json:"cached,omitempty"`
		Cycle    bool     `json:"cycle,omitempty"`
		Children []*Trace `json:"children,omitempty"`
	}
	n := node{Kind: t.Kind, Name: t.Name, Result: t.Result, Cached: t.Cached, Cycle: t.Cycle, Children: t.Children}
	if t.Object.Type != "" {
		n.Object = t.Object.String()
	}
	return json.Marshal(n)
}

// String renders the trace as an indented tree.
func (t *Trace) String() string {
	var b bytes.Buffer
	t.write(&b, 0)
	return b.String()
}

func (t *Trace) write(b *bytes.Buffer, depth int) {
	for range depth {
		b.WriteString("  ")
	}
	mark := "✗"
	if t.Result {
		mark = "✓"
	}
	fmt.Fprintf(b, "%s %s", mark, t.Kind)
	if t.Object.Type != "" {
		fmt.Fprintf(b, " %s", t.Object)
	}
	if t.Name != "" {
		fmt.Fprintf(b, " %s", t.Name)
	}
	if t.Cached {
		b.WriteString(" (memo)")
	}
	if t.Cycle {
		b.WriteString(" (cycle)")
	}
	b.WriteByte('\n')
	for _, c := range t.Children {
		c.write(b, depth+1)
	}
}

type memoKey struct {
	m  *member
	id string
}

type target struct {
	m  *member
	id string
}

// Checker answers the checks, role reads and subject lists of one read
// snapshot of the store (Begin to End): it keeps the tuples it read for
// its later calls. Strings it holds alias the snapshot's pages and never
// outlive it. A Checker is reused from one snapshot to the next, its
// memory kept; it is not safe for concurrent use.
type Checker struct {
	st       *State
	objB     *bolt.Bucket // the snapshot's obj and subj buckets
	subjB    *bolt.Bucket
	cur      index.Cursor // the obj bucket's (reused while the snapshot lives)
	rolesCur index.Cursor // the subj bucket's
	maxDepth int

	sType, sID, sRel string
	stID, srID       uint64
	known            bool // the subject's tuples are kept and masked (begin)

	// nodes memoises results (and marks evaluations in progress) within
	// one check: a short slice scanned linearly, indexed by a map once
	// it grows.
	nodes []node
	index map[memoKey]int32
	objs  []objTuples
	tups  []tupEnt
	subj  subjTuples
	kb    []byte
	lists [][]target
}

type node struct {
	m     *member
	id    string
	state uint8 // nodeBusy, nodeFalse, nodeTrue, nodeFree
}

const (
	nodeBusy uint8 = iota
	nodeFalse
	nodeTrue
	nodeFree // evaluated but not memoised (depended on a cycle cut)
)

const linearNodes = 32

// New returns a Checker.
func New() *Checker {
	return &Checker{nodes: make([]node, 0, linearNodes), kb: make([]byte, 0, 256)}
}

// find returns the index of (m, id) in c.nodes or -1.
func (c *Checker) find(m *member, id string) int {
	if c.index != nil {
		if i, ok := c.index[memoKey{m, id}]; ok {
			return int(i)
		}
		return -1
	}
	for i := range c.nodes {
		if c.nodes[i].m == m && c.nodes[i].id == id {
			return i
		}
	}
	return -1
}

func (c *Checker) add(m *member, id string) int {
	c.nodes = append(c.nodes, node{m: m, id: id, state: nodeBusy})
	i := len(c.nodes) - 1
	if c.index != nil {
		c.index[memoKey{m, id}] = int32(i)
	} else if len(c.nodes) > linearNodes {
		c.index = make(map[memoKey]int32, 2*len(c.nodes))
		for j, n := range c.nodes {
			c.index[memoKey{n.m, n.id}] = int32(j)
		}
	}
	return i
}

// reset ends one check. The objects' tuples it read (c.objs, c.tups)
// stay for the snapshot's later calls: they hold the snapshot, not the
// check's subject. End drops them.
func (c *Checker) reset() {
	clear(c.nodes)
	c.nodes = c.nodes[:0]
	c.index = nil
	for i := range c.lists {
		c.lists[i] = c.lists[i][:0]
	}
	c.known = false
}

// End drops what c kept of its snapshot: the tuples it read alias the
// snapshot's pages.
func (c *Checker) End() {
	c.st, c.objB, c.subjB = nil, nil, nil
	clear(c.objs)
	c.objs = c.objs[:0]
	clear(c.tups)
	c.tups = c.tups[:0]
	clear(c.subj.tups)
	c.subj = subjTuples{tups: c.subj.tups[:0], holds: c.subj.holds[:0]}
}

func (c *Checker) list(depth int) []target {
	for len(c.lists) <= depth {
		c.lists = append(c.lists, make([]target, 0, 8))
	}
	return c.lists[depth][:0]
}

// member evaluates m on object id. cut reports that the result depended
// on a cycle cut (then it is not memoised).
func (c *Checker) member(m *member, id string, depth int, tr *Trace) (res, cut bool, err error) {
	if depth > c.maxDepth {
		return false, false, ErrDepthExceeded
	}
	if c.known && tr == nil && c.cannotHold(m) {
		return false, false, nil
	}
	var node *Trace
	if tr != nil {
		kind := "relation"
		if m.perm {
			kind = "permission"
		}
		node = &Trace{Kind: kind, Object: api.Object{Type: m.typ.name, ID: id}, Name: m.name}
		tr.Children = append(tr.Children, node)
		// Strings in traces must outlive the transaction.
		node.Object.ID = string([]byte(id))
	}
	i := c.find(m, id)
	if i >= 0 {
		switch c.nodes[i].state {
		case nodeTrue, nodeFalse:
			v := c.nodes[i].state == nodeTrue
			if node != nil {
				node.Result, node.Cached = v, true
			}
			return v, false, nil
		case nodeBusy:
			if node != nil {
				node.Cycle = true
			}
			return false, true, nil
		}
	}
	// A userset subject has its own relation on its own object.
	if c.sRel == m.name && c.sType == m.typ.name && c.sID == id {
		if node != nil {
			node.Result = true
		}
		return true, false, nil
	}
	if i < 0 {
		i = c.add(m, id)
	} else {
		c.nodes[i].state = nodeBusy
	}
	if m.perm {
		res, cut, err = c.expr(m.expr, m.typ, id, depth, node)
	} else {
		res, cut, err = c.relation(m, id, depth, node)
	}
	if err != nil {
		return false, false, err
	}
	switch {
	case cut:
		c.nodes[i].state = nodeFree
	case res:
		c.nodes[i].state = nodeTrue
	default:
		c.nodes[i].state = nodeFalse
	}
	if node != nil {
		node.Result = res
	}
	return res, cut, nil
}

func (c *Checker) expr(e *expr, t *typeDef, id string, depth int, tr *Trace) (res, cut bool, err error) {
	switch e.kind {
	case exprRef:
		return c.member(e.ref, id, depth+1, tr)
	case exprArrow:
		return c.arrow(e, t, id, depth, tr)
	}
	var node *Trace
	if tr != nil {
		kind := map[exprKind]string{exprUnion: "union", exprIntersect: "intersection", exprExclude: "exclusion"}[e.kind]
		node = &Trace{Kind: kind, Name: e.src.String()}
		tr.Children = append(tr.Children, node)
		defer func() { node.Result = res }()
	}
	l, lcut, err := c.expr(e.l, t, id, depth, node)
	if err != nil {
		return false, false, err
	}
	switch e.kind {
	case exprUnion:
		if l {
			return true, lcut, nil
		}
	case exprIntersect, exprExclude:
		if !l {
			return false, lcut, nil
		}
	}
	r, rcut, err := c.expr(e.r, t, id, depth, node)
	if err != nil {
		return false, false, err
	}
	if e.kind == exprExclude {
		r = !r
	}
	return r, lcut || rcut, nil
}

// arrow evaluates via->name: the permission on every object reached
// through relation via.
func (c *Checker) arrow(e *expr, t *typeDef, id string, depth int, tr *Trace) (res, cut bool, err error) {
	var node *Trace
	if tr != nil {
		node = &Trace{Kind: "arrow", Object: api.Object{Type: t.name, ID: string([]byte(id))}, Name: e.via + "->" + e.name}
		tr.Children = append(tr.Children, node)
		defer func() { node.Result = res }()
	}
	list := c.list(depth)
	if o, err := c.object(t.order[0].typeID, id); err != nil {
		return false, false, err
	} else if o != nil {
		for _, te := range c.tups[o.start:o.end] {
			if te.rel != e.viaID || te.st >= uint64(len(e.targetByID)) || e.targetByID[te.st] == nil {
				continue
			}
			list = append(list, target{e.targetByID[te.st], te.sid})
		}
		goto eval
	}
	c.kb = index.AppendObjPrefix(c.kb[:0], t.order[0].typeID, id)
	c.kb = binary.AppendUvarint(c.kb, e.viaID)
	for k := c.cur.Seek(c.kb); k != nil && bytes.HasPrefix(k, c.kb); k = c.cur.Next() {
		rest := k[len(c.kb):]
		_, rest, err := index.Uvarint(rest) // subject relation: arrows follow the subject object
		if err != nil {
			return false, false, err
		}
		st, sid, err := index.Uvarint(rest)
		if err != nil || len(sid) == 0 {
			return false, false, index.ErrBadKey
		}
		var tm *member
		if st < uint64(len(e.targetByID)) {
			tm = e.targetByID[st]
		}
		if tm == nil {
			continue // a type the relation no longer accepts
		}
		list = append(list, target{tm, index.Bstr(sid)})
	}
eval:
	c.lists[depth] = list
	for i := 0; i < len(list); i++ {
		r, rc, err := c.member(list[i].m, list[i].id, depth+1, node)
		if err != nil {
			return false, false, err
		}
		cut = cut || rc
		if r {
			return true, cut, nil
		}
	}
	return false, cut, nil
}

// relation evaluates a relation: a stored tuple with the subject, or a
// userset tuple whose userset contains the subject.
func (c *Checker) relation(m *member, id string, depth int, tr *Trace) (res, cut bool, err error) {
	typeID, relID := m.typeID, m.relID
	direct := m.accepts(c.sType, c.sRel)
	if !direct && !m.hasUserset {
		return false, false, nil // nothing stored here can hold the subject
	}
	o, err := c.object(typeID, id)
	if err != nil {
		return false, false, err
	}
	if o != nil {
		return c.relationCached(m, o, id, depth, direct, tr)
	}
	if direct {
		c.kb = index.AppendObjKey(c.kb[:0], index.IDs{OT: typeID, Rel: relID, ST: c.stID, SR: c.srID}, id, c.sID)
		if k := c.cur.Seek(c.kb); k != nil && bytes.Equal(k, c.kb) {
			if tr != nil {
				c.traceDirect(tr, m, id)
			}
			return true, false, nil
		}
	}
	if !m.hasUserset {
		return false, false, nil
	}
	list := c.list(depth)
	c.kb = index.AppendObjPrefix(c.kb[:0], typeID, id)
	c.kb = binary.AppendUvarint(c.kb, relID)
	base := len(c.kb)
	for _, u := range m.usersets {
		c.kb = binary.AppendUvarint(c.kb[:base], u.relID)
		c.kb = binary.AppendUvarint(c.kb, u.typeID)
		tm := u.m
		for k := c.cur.Seek(c.kb); k != nil && bytes.HasPrefix(k, c.kb); k = c.cur.Next() {
			list = append(list, target{tm, index.Bstr(k[len(c.kb):])})
		}
	}
	c.lists[depth] = list
	return c.evalUsersets(m, list, id, depth, tr)
}

// traceDirect adds to tr the stored tuple that holds the check's subject
// directly in m on id.
func (c *Checker) traceDirect(tr *Trace, m *member, id string) {
	t := api.Tuple{Object: api.Object{Type: m.typ.name, ID: id}, Relation: m.name, Subject: api.Subject{Type: c.sType, ID: c.sID, Relation: c.sRel}}
	tr.Children = append(tr.Children, &Trace{Kind: "tuple", Result: true, Name: t.String()})
}

// evalUsersets evaluates the userset subjects of m on id.
func (c *Checker) evalUsersets(m *member, list []target, id string, depth int, tr *Trace) (res, cut bool, err error) {
	for i := 0; i < len(list); i++ {
		var node *Trace
		if tr != nil {
			t := list[i]
			node = &Trace{Kind: "tuple", Name: api.Tuple{Object: api.Object{Type: m.typ.name, ID: id}, Relation: m.name,
				Subject: api.Subject{Type: t.m.typ.name, ID: t.id, Relation: t.m.name}}.String()}
			tr.Children = append(tr.Children, node)
		}
		r, rc, err := c.member(list[i].m, list[i].id, depth+1, node)
		if err != nil {
			return false, false, err
		}
		if node != nil {
			node.Result = r
		}
		cut = cut || rc
		if r {
			return true, cut, nil
		}
	}
	return false, cut, nil
}

// accepts reports whether the relation accepts subjects of type#rel.
func (m *member) accepts(typ, rel string) bool {
	for _, a := range m.allowed {
		if a.Type == typ && a.Relation == rel {
			return true
		}
	}
	return false
}

// objTuples is the cached tuple list of one small object.
type objTuples struct {
	typeID     uint64
	id         string
	start, end int32
	big        bool // more than maxObjTuples tuples: not cached
}

type tupEnt struct {
	rel, sr, st uint64
	sid         string
}

// maxObjTuples bounds the tuples of one object that a check reads in one
// range scan instead of one seek per relation and subject type.
// A variable only so tests can force the seek path (SetMaxObjTuples).
var maxObjTuples = 24

// object returns the cached tuples of typeID:id, reading them with one
// range scan on first use; nil if the object has too many tuples (then
// the caller seeks per relation).
func (c *Checker) object(typeID uint64, id string) (*objTuples, error) {
	if o, done := c.keptObject(typeID, id); done {
		return o, nil
	}
	c.kb = index.AppendObjPrefix(c.kb[:0], typeID, id)
	return c.readObject(typeID, id, c.kb, c.cur.Seek(c.kb))
}

// keptObject returns the kept tuples of typeID:id and true when nothing
// is left to read for it: its tuples were read before (nil for an object
// with too many), or the walk is too large to keep more (nil: seek
// instead).
func (c *Checker) keptObject(typeID uint64, id string) (*objTuples, bool) {
	for i := range c.objs {
		if o := &c.objs[i]; o.typeID == typeID && o.id == id {
			if o.big {
				return nil, true
			}
			return o, true
		}
	}
	return nil, len(c.objs) >= 64
}

// readObject keeps the tuples of typeID:id, whose key prefix is prefix,
// from c.cur positioned at its first key k.
func (c *Checker) readObject(typeID uint64, id string, prefix, k []byte) (*objTuples, error) {
	start := len(c.tups)
	big := false
	for ; k != nil && bytes.HasPrefix(k, prefix); k = c.cur.Next() {
		if len(c.tups)-start == maxObjTuples {
			big = true
			break
		}
		rest := k[len(prefix):]
		var te tupEnt
		var err error
		if te.rel, rest, err = index.Uvarint(rest); err != nil {
			return nil, err
		}
		if te.sr, rest, err = index.Uvarint(rest); err != nil {
			return nil, err
		}
		if te.st, rest, err = index.Uvarint(rest); err != nil || len(rest) == 0 {
			return nil, index.ErrBadKey
		}
		te.sid = index.Bstr(rest)
		c.tups = append(c.tups, te)
	}
	if big {
		c.tups = c.tups[:start]
		c.objs = append(c.objs, objTuples{typeID: typeID, id: id, big: true})
		return nil, nil
	}
	c.objs = append(c.objs, objTuples{typeID: typeID, id: id, start: int32(start), end: int32(len(c.tups))})
	return &c.objs[len(c.objs)-1], nil
}

// subjTuples are the tuples naming one subject (the subj bucket's range
// of subject type st, id id), kept for the rest of a snapshot like objTuples.
type subjTuples struct {
	st    uint64
	id    string
	state uint8 // subjUnread, subjKept, subjBig
	tups  []subjEnt
	// holds has the bits of the relations (by relIndex) of the tuples
	// naming the subject itself (no subject relation), once masked.
	holds  []uint64
	masked bool
}

const (
	subjUnread uint8 = iota
	subjKept
	subjBig // more than maxObjTuples tuples: not kept
)

type subjEnt struct {
	sr, ot, rel uint64
	oid         string
}

// subject reads the tuples naming subject stID:id (with any subject
// relation) with one range scan and keeps them; false if there are more
// than maxObjTuples (then the caller seeks for what it needs).
func (c *Checker) subject(stID uint64, id string) (bool, error) {
	if c.keptSubject(stID, id) {
		return c.subj.state == subjKept, nil
	}
	c.kb = index.AppendSubjPrefix(c.kb[:0], stID, id)
	return c.readSubject(stID, id, c.kb, c.rolesCur.Seek(c.kb))
}

// keptSubject reports whether the tuples naming stID:id were read.
func (c *Checker) keptSubject(stID uint64, id string) bool {
	return c.subj.state != subjUnread && c.subj.st == stID && c.subj.id == id
}

// readSubject keeps the tuples naming stID:id, whose key prefix is
// prefix, from c.rolesCur positioned at its first key k.
func (c *Checker) readSubject(stID uint64, id string, prefix, k []byte) (bool, error) {
	c.subj.st, c.subj.id, c.subj.tups, c.subj.masked = stID, id, c.subj.tups[:0], false
	c.subj.state = subjBig
	for ; k != nil && bytes.HasPrefix(k, prefix); k = c.rolesCur.Next() {
		if len(c.subj.tups) == maxObjTuples {
			c.subj.tups = c.subj.tups[:0]
			return false, nil
		}
		n, oid, _, err := index.DecodeSubjKey(k)
		if err != nil {
			return false, err
		}
		c.subj.tups = append(c.subj.tups, subjEnt{sr: n.SR, ot: n.OT, rel: n.Rel, oid: index.Bstr(oid)})
	}
	c.subj.state = subjKept
	return true, nil
}

// begin sets the subject of a check (reset ends it). The
// schema's type and member names are all in the dictionary (and "" always
// is), and the caller has checked the subject against the schema. With
// the subject's tuples kept for the snapshot (a plain subject: no relation), a
// member none of them can hold is false without a walk (known).
func (c *Checker) begin(sub api.Subject) {
	st := c.st
	c.sType, c.sID, c.sRel = sub.Type, sub.ID, sub.Relation
	c.stID, _ = st.Dict.ID(sub.Type)
	c.srID, _ = st.Dict.ID(sub.Relation)
	c.known = c.sRel == "" && c.keptSubject(c.stID, c.sID) && c.subj.state == subjKept
	if c.known {
		c.maskSubject()
	}
}

// maskSubject sets c.subj.holds from the kept tuples, once per snapshot (the
// snapshot's schema does not change).
func (c *Checker) maskSubject() {
	if c.subj.masked {
		return
	}
	sc := c.st.Graph
	c.subj.holds = append(c.subj.holds[:0], make([]uint64, (sc.nrels+63)/64)...)
	for _, te := range c.subj.tups {
		if te.sr != 0 {
			continue // the subject's usersets, not the subject
		}
		if i, ok := sc.relByID[relKey{te.ot, te.rel}]; ok {
			c.subj.holds[i/64] |= 1 << (i % 64)
		}
	}
	c.subj.masked = true
}

// cannotHold reports that the subject of the check, whose tuples are
// known and masked (begin), is named by no tuple of a
// relation that can hold it in m: then m holds for it on no object, and
// no walk need look.
func (c *Checker) cannotHold(m *member) bool {
	for i, w := range m.holds {
		if w&c.subj.holds[i] != 0 {
			return false
		}
	}
	return true
}

// relationCached is relation over an object's cached tuples.
// direct is whether m accepts the subject's type.
func (c *Checker) relationCached(m *member, o *objTuples, id string, depth int, direct bool, tr *Trace) (res, cut bool, err error) {
	start, end := o.start, o.end // o may move when c.objs grows
	if direct {
		for _, te := range c.tups[start:end] {
			if te.rel == m.relID && te.sr == c.srID && te.st == c.stID && te.sid == c.sID {
				if tr != nil {
					c.traceDirect(tr, m, id)
				}
				return true, false, nil
			}
		}
	}
	if !m.hasUserset {
		return false, false, nil
	}
	list := c.list(depth)
	for _, te := range c.tups[start:end] {
		if te.rel != m.relID || te.sr == 0 {
			continue
		}
		for _, u := range m.usersets {
			if u.relID == te.sr && u.typeID == te.st {
				list = append(list, target{u.m, te.sid})
			}
		}
	}
	c.lists[depth] = list
	return c.evalUsersets(m, list, id, depth, tr)
}

// CannotHold reports whether a check of perm on obj for sub would be
// answered false without a walk, from the subject's tuples c has kept:
// for the store's tests, which hold the shortcut to the walk.
func (c *Checker) CannotHold(obj api.Object, perm string, sub api.Subject) bool {
	defer c.reset()
	c.begin(sub)
	return c.known && c.cannotHold(c.st.Graph.types[obj.Type].members[perm])
}

// SetMaxObjTuples sets how many tuples of one object a check keeps (0:
// none, every relation is a seek) and returns a function restoring it:
// for the store's tests, which force the seek path with it.
func SetMaxObjTuples(n int) (restore func()) {
	old := maxObjTuples
	maxObjTuples = n
	return func() { maxObjTuples = old }
}
