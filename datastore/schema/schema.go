package schema

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nexuspdp/nexus/api"
	"go.yaml.in/yaml/v3"
)

// Schema is a parsed and validated schema: types with their relations and
// permissions, and tenant roles with their grants. A *Schema is immutable
// and safe for concurrent use. The YAML format is documented in doc.go.
type Schema struct {
	src      []byte
	types    map[string]*typeDef
	order    []string // type names in source order
	tenant   string   // the type that holds tenant roles ("" when no roles)
	grants   map[string][]string
	roleList []string
}

// SubjectType is a subject type a relation accepts: a type (Relation empty)
// or a userset such as group#member.
type SubjectType struct {
	Type     string
	Relation string
}

func (s SubjectType) String() string {
	if s.Relation == "" {
		return s.Type
	}
	return s.Type + "#" + s.Relation
}

type typeDef struct {
	name    string
	members map[string]*member // relations and permissions by name
	order   []*member
	tenancy Tenancy
	// tenanted: the type has a "tenant" relation to the tenant type
	// (Schema.Tenanted), known once the schema is resolved.
	tenanted bool
	// tenancyNode is the tenancy key's YAML (nil without one), for errors
	// found once the whole schema is read.
	tenancyNode *yaml.Node
}

// Tenancy is how a type's resources get their tenant, as its schema's
// tenancy key declares: a resource's own tenant (its "tenant" relation),
// else the tenant it inherits through the relations in Inherit (the
// nearest objects reached through them that have one). Required means a
// resource named by ID that has no tenant, own or inherited, is in none:
// the default policy denies it (reason no_tenant) instead of judging it
// in the tenant a request claims.
type Tenancy struct {
	Inherit  []string
	Required bool
}

// member is a relation or a permission of a type.
type member struct {
	name    string
	perm    bool
	allowed []SubjectType // relations
	expr    *Expr         // permissions
	src     string        // permission source text
	line    int
	col     int
}

// Parse parses and validates a YAML schema. Errors are *Error (joined
// when there are several) naming the type, relation and position.
func Parse(src []byte) (*Schema, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, &Error{Msg: "yaml: " + err.Error()}
	}
	p := &schemaParser{s: &Schema{src: bytes.Clone(src), types: map[string]*typeDef{}, grants: map[string][]string{}}}
	p.parse(&doc)
	if len(p.errs) == 0 {
		p.resolve()
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return p.s, nil
}

type schemaParser struct {
	s    *Schema
	errs []error
}

func (p *schemaParser) errf(n *yaml.Node, typ, rel, format string, args ...any) {
	e := &Error{Type: typ, Relation: rel, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	if len(p.errs) < 50 {
		p.errs = append(p.errs, e)
	}
}

func mapPairs(n *yaml.Node) [][2]*yaml.Node {
	var out [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		out = append(out, [2]*yaml.Node{n.Content[i], n.Content[i+1]})
	}
	return out
}

// listItems reads a list, or a single scalar as a list of one (null: an
// empty list); ok is false for anything else.
func listItems(n *yaml.Node) (items []*yaml.Node, ok bool) {
	switch n.Kind {
	case yaml.SequenceNode:
		return n.Content, true
	case yaml.ScalarNode:
		if isNullNode(n) {
			return nil, true
		}
		return []*yaml.Node{n}, true
	}
	return nil, false
}

func isNullNode(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func (p *schemaParser) parse(doc *yaml.Node) {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		p.errf(doc, "", "", "empty schema")
		return
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		p.errf(root, "", "", "top level must be a mapping with types and roles")
		return
	}
	var rolesNode *yaml.Node
	for _, kv := range mapPairs(root) {
		switch kv[0].Value {
		case "types":
			p.parseTypes(kv[1])
		case "roles":
			rolesNode = kv[1]
		default:
			p.errf(kv[0], "", "", "unknown top-level key %q (want types, roles)", kv[0].Value)
		}
	}
	if len(p.s.types) == 0 {
		p.errf(root, "", "", "no types")
	}
	if rolesNode != nil {
		p.parseRoles(rolesNode)
	}
}

func (p *schemaParser) parseTypes(n *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		p.errf(n, "", "", "types must be a mapping of type name to definition")
		return
	}
	for _, kv := range mapPairs(n) {
		name := kv[0].Value
		if !api.ValidName(name) {
			p.errf(kv[0], name, "", "invalid type name (want [a-z][a-z0-9_]*, at most %d bytes)", api.MaxNameLen)
			continue
		}
		if _, dup := p.s.types[name]; dup {
			p.errf(kv[0], name, "", "type declared twice")
			continue
		}
		t := &typeDef{name: name, members: map[string]*member{}}
		p.s.types[name] = t
		p.s.order = append(p.s.order, name)
		def := kv[1]
		if isNullNode(def) {
			continue
		}
		if def.Kind != yaml.MappingNode {
			p.errf(def, name, "", "type definition must be a mapping with relations and permissions")
			continue
		}
		for _, sec := range mapPairs(def) {
			switch sec[0].Value {
			case "relations":
				p.parseRelations(t, sec[1])
			case "permissions":
				p.parsePermissions(t, sec[1])
			case "tenancy":
				p.parseTenancy(t, sec[1])
			default:
				p.errf(sec[0], name, "", "unknown key %q (want relations, permissions, tenancy)", sec[0].Value)
			}
		}
	}
}

func (p *schemaParser) addMember(t *typeDef, key *yaml.Node) *member {
	name := key.Value
	if !api.ValidName(name) {
		p.errf(key, t.name, name, "invalid name (want [a-z][a-z0-9_]*, at most %d bytes)", api.MaxNameLen)
		return nil
	}
	if _, dup := t.members[name]; dup {
		p.errf(key, t.name, name, "declared twice (relations and permissions share one namespace)")
		return nil
	}
	m := &member{name: name, line: key.Line, col: key.Column}
	t.members[name] = m
	t.order = append(t.order, m)
	return m
}

func (p *schemaParser) parseRelations(t *typeDef, n *yaml.Node) {
	if isNullNode(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.errf(n, t.name, "", "relations must be a mapping of relation name to subject types")
		return
	}
	for _, kv := range mapPairs(n) {
		m := p.addMember(t, kv[0])
		if m == nil {
			continue
		}
		var items []*yaml.Node
		switch kv[1].Kind {
		case yaml.ScalarNode:
			items = []*yaml.Node{kv[1]}
		case yaml.SequenceNode:
			items = kv[1].Content
		default:
			p.errf(kv[1], t.name, m.name, "subject types must be a list such as [user, group#member]")
			continue
		}
		for _, it := range items {
			for _, f := range strings.FieldsFunc(it.Value, func(r rune) bool { return r == '|' || r == ' ' || r == ',' }) {
				st := SubjectType{Type: f}
				if i := strings.IndexByte(f, '#'); i >= 0 {
					st = SubjectType{Type: f[:i], Relation: f[i+1:]}
				}
				if !api.ValidName(st.Type) || st.Relation != "" && !api.ValidName(st.Relation) {
					p.errf(it, t.name, m.name, "invalid subject type %q (want type or type#relation)", f)
					continue
				}
				if slices.Contains(m.allowed, st) {
					p.errf(it, t.name, m.name, "subject type %s listed twice", st)
					continue
				}
				m.allowed = append(m.allowed, st)
			}
		}
		if len(m.allowed) == 0 {
			p.errf(kv[1], t.name, m.name, "relation accepts no subject types")
		}
	}
}

func (p *schemaParser) parsePermissions(t *typeDef, n *yaml.Node) {
	if isNullNode(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.errf(n, t.name, "", "permissions must be a mapping of permission name to expression")
		return
	}
	for _, kv := range mapPairs(n) {
		m := p.addMember(t, kv[0])
		if m == nil {
			continue
		}
		m.perm = true
		if kv[1].Kind != yaml.ScalarNode || kv[1].Value == "" {
			p.errf(kv[1], t.name, m.name, "permission must be an expression such as viewer + parent->read")
			continue
		}
		m.src = kv[1].Value
		m.line, m.col = kv[1].Line, kv[1].Column
		e, err := parseExpr(m.src)
		if err != nil {
			var pe *exprError
			errors.As(err, &pe)
			se := &Error{Type: t.name, Relation: m.name, Line: kv[1].Line, Column: kv[1].Column, Msg: err.Error()}
			if pe != nil && kv[1].Style == 0 && !strings.Contains(m.src, "\n") {
				se.Column += pe.pos
			}
			p.errs = append(p.errs, se)
			continue
		}
		m.expr = e
	}
}

// parseTenancy reads a type's tenancy: {inherit: [relation, ...],
// required: bool}. resolveTenancy checks the names once every type is read.
func (p *schemaParser) parseTenancy(t *typeDef, n *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		p.errf(n, t.name, "", "tenancy must be a mapping such as {inherit: [parent], required: true}")
		return
	}
	t.tenancyNode = n
	for _, kv := range mapPairs(n) {
		switch kv[0].Value {
		case "inherit":
			items, ok := listItems(kv[1])
			if !ok {
				p.errf(kv[1], t.name, "", "tenancy: inherit must be a list of relations such as [parent]")
				continue
			}
			for _, it := range items {
				if it.Kind != yaml.ScalarNode || !api.ValidName(it.Value) {
					p.errf(it, t.name, "", "tenancy: inherit: invalid relation name %q", it.Value)
					continue
				}
				if slices.Contains(t.tenancy.Inherit, it.Value) {
					p.errf(it, t.name, it.Value, "tenancy: inherit: relation listed twice")
					continue
				}
				t.tenancy.Inherit = append(t.tenancy.Inherit, it.Value)
			}
		case "required":
			if kv[1].Kind != yaml.ScalarNode || (kv[1].Value != "true" && kv[1].Value != "false") {
				p.errf(kv[1], t.name, "", "tenancy: required must be true or false")
				continue
			}
			t.tenancy.Required = kv[1].Value == "true"
		default:
			p.errf(kv[0], t.name, "", "unknown key %q under tenancy (want inherit, required)", kv[0].Value)
		}
	}
}

// resolveTenancy checks t's tenancy: a tenant type, relations to inherit
// through that t declares and that lead to objects (no usersets), and a
// required tenant that t can have.
func (p *schemaParser) resolveTenancy(t *typeDef) {
	n := t.tenancyNode
	if n == nil {
		return
	}
	if p.s.tenant == "" {
		p.errf(n, t.name, "", "tenancy: the schema declares no tenant type (a roles section)")
		return
	}
	for _, rel := range t.tenancy.Inherit {
		m := t.members[rel]
		switch {
		case m == nil:
			p.errf(n, t.name, rel, "tenancy: inherit: type %s has no relation %q", t.name, rel)
		case m.perm:
			p.errf(n, t.name, rel, "tenancy: inherit: %q is a permission; a tenant is inherited through relations", rel)
		default:
			for _, st := range m.allowed {
				if st.Relation != "" {
					p.errf(n, t.name, rel, "tenancy: inherit: %s#%s accepts the userset %s; a tenant is inherited from objects", t.name, rel, st)
				}
			}
		}
	}
	if t.tenancy.Required && len(t.tenancy.Inherit) == 0 && !t.tenanted {
		p.errf(n, t.name, "", "tenancy: required, but type %s has no tenant relation to %s and inherits none", t.name, p.s.tenant)
	}
}

func (p *schemaParser) parseRoles(n *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		p.errf(n, "", "", "roles must be a mapping with type and grants")
		return
	}
	p.s.tenant = "tenant"
	var grants *yaml.Node
	for _, kv := range mapPairs(n) {
		switch kv[0].Value {
		case "type":
			p.s.tenant = kv[1].Value
		case "grants":
			grants = kv[1]
		default:
			p.errf(kv[0], "", "", "unknown key %q under roles (want type, grants)", kv[0].Value)
		}
	}
	tt := p.s.types[p.s.tenant]
	if tt == nil {
		p.errf(n, p.s.tenant, "", "roles: tenant type %q is not declared", p.s.tenant)
		return
	}
	if grants == nil || grants.Kind != yaml.MappingNode {
		p.errf(n, p.s.tenant, "", "roles: grants must be a mapping of role to [type:permission, ...]")
		return
	}
	for _, kv := range mapPairs(grants) {
		role := kv[0].Value
		m := tt.members[role]
		if m == nil || m.perm {
			p.errf(kv[0], p.s.tenant, role, "role is not a relation of tenant type %s", p.s.tenant)
			continue
		}
		items, ok := listItems(kv[1])
		if !ok {
			p.errf(kv[1], p.s.tenant, role, "grants must be a list such as [file:read, folder:*]")
			continue
		}
		var gs []string
		for _, it := range items {
			g := it.Value
			typ, perm, ok := strings.Cut(g, ":")
			if !ok {
				p.errf(it, p.s.tenant, role, "grant %q: want type:permission or type:*", g)
				continue
			}
			t := p.s.types[typ]
			switch {
			case typ == "*" && perm == "*":
			case t == nil:
				p.errf(it, p.s.tenant, role, "grant %q: unknown type %q", g, typ)
				continue
			case perm == "*":
			case !api.ValidName(perm):
				p.errf(it, p.s.tenant, role, "grant %q: invalid permission name", g)
				continue
			}
			gs = append(gs, g)
		}
		p.s.grants[role] = gs
		p.s.roleList = append(p.s.roleList, role)
	}
}

// resolve links references, checks that subject types exist and that arrows
// reach a member on every type their relation accepts.
func (p *schemaParser) resolve() {
	for _, tn := range p.s.order {
		t := p.s.types[tn]
		for _, m := range t.order {
			if m.perm {
				continue
			}
			for _, st := range m.allowed {
				tt := p.s.types[st.Type]
				if tt == nil {
					p.errf(nil, t.name, m.name, "subject type %s: unknown type %q (line %d)", st, st.Type, m.line)
					continue
				}
				if st.Relation != "" {
					if tt.members[st.Relation] == nil {
						p.errf(nil, t.name, m.name, "subject type %s: type %s has no relation or permission %q (line %d)", st, st.Type, st.Relation, m.line)
					}
				}
			}
		}
		for _, m := range t.order {
			if m.perm && m.expr != nil {
				p.resolveExpr(t, m, m.expr)
			}
		}
		t.tenanted = p.s.hasTenantRelation(t.name)
		p.resolveTenancy(t)
	}
}

func (p *schemaParser) exprErr(t *typeDef, m *member, e *Expr, format string, args ...any) {
	se := &Error{Type: t.name, Relation: m.name, Line: m.line, Column: m.col, Msg: fmt.Sprintf(format, args...) + fmt.Sprintf(" (at offset %d of %q)", e.pos, m.src)}
	if !strings.Contains(m.src, "\n") {
		se.Column += e.pos
	}
	p.errs = append(p.errs, se)
}

// resolveExpr checks that e names members of t, and that each of its
// arrows reaches a member on every type its relation accepts.
func (p *schemaParser) resolveExpr(t *typeDef, m *member, e *Expr) {
	switch e.Op {
	case OpRef:
		if t.members[e.Name] == nil {
			p.exprErr(t, m, e, "unknown relation or permission %q on type %s", e.Name, t.name)
		}
	case OpArrow:
		via := t.members[e.Via]
		switch {
		case via == nil:
			p.exprErr(t, m, e, "arrow %s->%s: unknown relation %q on type %s", e.Via, e.Name, e.Via, t.name)
			return
		case via.perm:
			p.exprErr(t, m, e, "arrow %s->%s: %q is a permission; arrows follow relations", e.Via, e.Name, e.Via)
			return
		}
		for _, st := range via.allowed {
			tt := p.s.types[st.Type]
			if tt == nil {
				continue // reported above
			}
			if tt.members[e.Name] == nil {
				p.exprErr(t, m, e, "arrow %s->%s: type %s (accepted by %s#%s) has no relation or permission %q", e.Via, e.Name, st.Type, t.name, e.Via, e.Name)
			}
		}
	default:
		p.resolveExpr(t, m, e.Left)
		p.resolveExpr(t, m, e.Right)
	}
}

// Source returns the YAML the schema was parsed from.
func (s *Schema) Source() []byte { return s.src }

// Types returns the declared type names in source order.
func (s *Schema) Types() []string { return slices.Clone(s.order) }

// Relations returns the relation names of typ (nil if typ is unknown).
func (s *Schema) Relations(typ string) []string { return s.memberNames(typ, false) }

// Permissions returns the permission names of typ (nil if typ is unknown).
func (s *Schema) Permissions(typ string) []string { return s.memberNames(typ, true) }

// memberNames returns the names of typ's permissions (perm) or relations
// (!perm) in source order, nil if typ is unknown.
func (s *Schema) memberNames(typ string, perm bool) []string {
	t := s.types[typ]
	if t == nil {
		return nil
	}
	var out []string
	for _, m := range t.order {
		if m.perm == perm {
			out = append(out, m.name)
		}
	}
	return out
}

// HasPermission reports whether name is one of typ's permissions
// (Permissions(typ) holds it), without allocating.
func (s *Schema) HasPermission(typ, name string) bool {
	t := s.types[typ]
	if t == nil {
		return false
	}
	for _, m := range t.order {
		if m.perm && m.name == name {
			return true
		}
	}
	return false
}

// Expr returns the parsed expression of typ's permission, a copy the
// caller may keep (nil if typ has no such permission).
func (s *Schema) Expr(typ, permission string) *Expr {
	t := s.types[typ]
	if t == nil {
		return nil
	}
	m := t.members[permission]
	if m == nil || !m.perm {
		return nil
	}
	return m.expr.clone()
}

// AllowedSubjects returns the subject types typ#relation accepts (nil if
// it is unknown or a permission).
func (s *Schema) AllowedSubjects(typ, relation string) []SubjectType {
	t := s.types[typ]
	if t == nil {
		return nil
	}
	m := t.members[relation]
	if m == nil || m.perm {
		return nil
	}
	return slices.Clone(m.allowed)
}

// TenantType returns the type that holds tenant roles, "" if the schema has
// no roles section.
func (s *Schema) TenantType() string { return s.tenant }

// Tenanted reports whether typ's resources can be assigned to a tenant:
// typ has a "tenant" relation whose subjects are of the tenant type.
func (s *Schema) Tenanted(typ string) bool {
	t := s.types[typ]
	return t != nil && t.tenanted
}

// hasTenantRelation is Tenanted worked out from the resolved relations.
func (s *Schema) hasTenantRelation(typ string) bool {
	return s.tenant != "" && slices.Contains(s.Relations(typ), "tenant") &&
		slices.ContainsFunc(s.AllowedSubjects(typ, "tenant"), func(st SubjectType) bool {
			return st.Type == s.tenant && st.Relation == ""
		})
}

// Tenancy returns how typ's resources get their tenant (the zero Tenancy
// for a type without a tenancy key, or an unknown one).
func (s *Schema) Tenancy(typ string) Tenancy {
	t := s.types[typ]
	if t == nil {
		return Tenancy{}
	}
	return Tenancy{Inherit: slices.Clone(t.tenancy.Inherit), Required: t.tenancy.Required}
}

// TenancyOf is Tenancy without the copy, for the decision path: Inherit
// is the schema's own slice, which the caller must not change.
func (s *Schema) TenancyOf(typ string) Tenancy {
	if t := s.types[typ]; t != nil {
		return t.tenancy
	}
	return Tenancy{}
}

// RoleGrants returns the grants of a tenant role, such as "file:read" or
// "folder:*" (nil for an unknown role).
func (s *Schema) RoleGrants(role string) []string { return slices.Clone(s.grants[role]) }

// RoleGrantsOn reports whether one of role's grants is "typ:action" or
// "typ:*" (RoleGrants(role) holds it), without allocating. Unlike Grants,
// it matches no "*" type.
func (s *Schema) RoleGrantsOn(role, typ, action string) bool {
	for _, g := range s.grants[role] {
		if gt, ga, _ := strings.Cut(g, ":"); gt == typ && (ga == action || ga == "*") {
			return true
		}
	}
	return false
}

// RoleGrantsMap returns every role with its grants.
func (s *Schema) RoleGrantsMap() map[string][]string {
	out := make(map[string][]string, len(s.grants))
	for r, g := range s.grants {
		out[r] = slices.Clone(g)
	}
	return out
}

// Grants reports whether one of roles grants permission on resourceType,
// directly, through "type:*" or through "*:*". It does not allocate.
func (s *Schema) Grants(roles []string, resourceType, permission string) bool {
	for _, r := range roles {
		for _, g := range s.grants[r] {
			typ, perm, _ := strings.Cut(g, ":")
			if (typ == "*" || typ == resourceType) && (perm == "*" || perm == permission) {
				return true
			}
		}
	}
	return false
}

// ValidateTuple checks a tuple against the schema: its syntax (package
// api's), a declared type, a relation of that type (not a permission),
// and a subject type the relation accepts. Its errors match
// ErrInvalidTuple.
func (s *Schema) ValidateTuple(t api.Tuple) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidTuple, t, err)
	}
	td := s.types[t.Object.Type]
	if td == nil {
		return fmt.Errorf("%w: %s: unknown type %q", ErrInvalidTuple, t, t.Object.Type)
	}
	m := td.members[t.Relation]
	if m == nil {
		return fmt.Errorf("%w: %s: type %s has no relation %q", ErrInvalidTuple, t, td.name, t.Relation)
	}
	if m.perm {
		return fmt.Errorf("%w: %s: %s#%s is a permission, not a relation", ErrInvalidTuple, t, td.name, t.Relation)
	}
	if !slices.Contains(m.allowed, SubjectType{Type: t.Subject.Type, Relation: t.Subject.Relation}) {
		return fmt.Errorf("%w: %s: relation %s#%s does not accept subject type %s (accepts %v)", ErrInvalidTuple, t, td.name, m.name,
			SubjectType{Type: t.Subject.Type, Relation: t.Subject.Relation}, m.allowed)
	}
	return nil
}
