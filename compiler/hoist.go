package compiler

import (
	"fmt"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// OPA's Wasm planner evaluates a reference to input from the root on every
// use: http.method, with input.attributes.request.http imported as http,
// is four lookups, and inside a loop over a route table it is four lookups
// per route. Each is a hash and a string comparison in the Wasm runtime,
// and for policies that match requests against tables in data they were
// most of the evaluation.
//
// hoistInputRefs binds such a prefix to a local variable once per body and
// has the body's later uses read through the variable, as a user would by
// writing `http := input.attributes.request.http` first. The answer stays
// OPA's:
//   - The binding goes in front of the first expression that reads the
//     prefix and is undefined, without an error, when the prefix is: its
//     operands are constants, local variables, input and data that no
//     rule defines, and a call in it is made only once they are defined.
//     It moves further up only past expressions that cannot fail with an
//     error (comparisons, membership, unification and `some ... in` over
//     such operands). When the prefix is undefined the body fails there
//     instead of at that first reading, after the same expressions and
//     without skipping one that could fail with an error.
//   - Uses in expressions with `with` keep their reference (they read
//     another input), and so do uses before the binding.
//   - An import or `input` that a rule declares again as a variable (a
//     `some`, an assignment, an argument) is left alone in that rule.
//   - Comprehension and `every` bodies are bodies of their own.
//
// The rewrite runs on the modules OPA's Wasm compiler builds, after the
// analyses of the input a policy reads, which see the modules as written.
const hoistPrefix = "__nexus_in"

// hoistOps are the operators of expressions that never raise an error and
// are undefined when an operand is.
var hoistOps = map[string]bool{
	"eq": true, "assign": true, "equal": true, "neq": true,
	"lt": true, "gt": true, "lte": true, "gte": true,
	"internal.member_2": true, "internal.member_3": true,
}

func hoistInputRefs(mods []*ast.Module) []*ast.Module {
	var rulePaths []ast.Ref
	// A package's rule names, over all its modules.
	rules := map[string]map[ast.Var]bool{}
	for _, m := range mods {
		pkg := m.Package.Path.String()
		if rules[pkg] == nil {
			rules[pkg] = map[ast.Var]bool{}
		}
		for _, r := range m.Rules {
			rulePaths = append(rulePaths, m.Package.Path.Extend(r.Head.Ref().GroundPrefix()))
			rules[pkg][r.Head.Ref()[0].Value.(ast.Var)] = true
		}
	}
	out := make([]*ast.Module, len(mods))
	for i, m := range mods {
		out[i] = m
		if usesHoistNames(m) {
			continue
		}
		h := &hoister{rulePaths: rulePaths, rules: rules[m.Package.Path.String()], names: map[ast.Var]ast.Ref{}, others: map[ast.Var]bool{}}
		h.names[ast.InputRootDocument.Value.(ast.Var)] = ast.InputRootRef
		for _, imp := range m.Imports {
			ref, ok := imp.Path.Value.(ast.Ref)
			if !ok || len(ref) == 0 {
				continue
			}
			name := imp.Alias
			if name == "" {
				if s, ok := ref[len(ref)-1].Value.(ast.String); ok {
					name = ast.Var(s)
				} else if v, ok := ref[len(ref)-1].Value.(ast.Var); ok && len(ref) == 1 {
					name = v
				}
			}
			if ref[0].Equal(ast.InputRootDocument) && ref.IsGround() {
				h.names[name] = ref
			} else {
				h.others[name] = true
			}
		}
		m = m.Copy()
		for _, r := range m.Rules {
			h.rule(r)
		}
		out[i] = m
	}
	return out
}

// usesHoistNames reports whether m already holds a variable named like
// the ones the rewrite makes.
func usesHoistNames(m *ast.Module) bool {
	found := false
	ast.WalkVars(m, func(v ast.Var) bool {
		found = found || strings.HasPrefix(string(v), hoistPrefix)
		return found
	})
	return found
}

type hoister struct {
	rulePaths []ast.Ref
	rules     map[ast.Var]bool    // the rule names of the module's package
	names     map[ast.Var]ast.Ref // input and its imports, by name
	others    map[ast.Var]bool    // other imports
	usable    map[ast.Var]ast.Ref // names the current rule does not declare
	declared  map[ast.Var]bool    // the variables the current rule declares
	n         int
}

func (h *hoister) rule(r *ast.Rule) {
	h.declared = declaredVars(r)
	h.usable = map[ast.Var]ast.Ref{}
	for v, ref := range h.names {
		if !h.declared[v] {
			h.usable[v] = ref
		}
	}
	for ; r != nil; r = r.Else {
		// Heads are left as they are; their comprehensions are bodies.
		h.nested(r.Head)
		args := ast.NewVarSet()
		for _, a := range r.Head.Args {
			args.Update(a.Vars())
		}
		r.Body = h.body(r.Body, args)
	}
}

// declaredVars are the variables r declares anywhere: function arguments,
// `some` declarations, assigned and unified variables, and every's key and
// value.
func declaredVars(r *ast.Rule) map[ast.Var]bool {
	out := map[ast.Var]bool{}
	// pattern adds the variables of a term that can bind them: itself,
	// or the elements of a collection, not references or calls.
	var pattern func(t *ast.Term)
	pattern = func(t *ast.Term) {
		switch v := t.Value.(type) {
		case ast.Var:
			out[v] = true
		case ast.Ref: // input and data parse as references
			if h, ok := v[0].Value.(ast.Var); ok && len(v) == 1 {
				out[h] = true
			}
		default:
			eachElem(v, pattern)
		}
	}
	for ; r != nil; r = r.Else {
		for _, a := range r.Head.Args {
			pattern(a)
		}
		ast.WalkExprs(r, func(e *ast.Expr) bool {
			switch t := e.Terms.(type) {
			case *ast.SomeDecl:
				for _, s := range t.Symbols {
					if c, ok := s.Value.(ast.Call); ok && len(c) > 2 {
						for _, o := range c[1 : len(c)-1] {
							pattern(o)
						}
					} else {
						pattern(s)
					}
				}
			case *ast.Every:
				if t.Key != nil {
					pattern(t.Key)
				}
				pattern(t.Value)
			case []*ast.Term:
				switch {
				case e.IsAssignment():
					pattern(t[1])
				case e.IsEquality():
					for _, o := range t[1:] {
						pattern(o)
					}
				}
			}
			return false
		})
	}
	return out
}

// nested rewrites the bodies of the comprehensions and every expressions
// in x, without descending into them further (body does).
func (h *hoister) nested(x any) {
	ast.NewGenericVisitor(func(x any) bool {
		var b *ast.Body
		switch c := x.(type) {
		case *ast.ArrayComprehension:
			b = &c.Body
		case *ast.SetComprehension:
			b = &c.Body
		case *ast.ObjectComprehension:
			b = &c.Body
		case *ast.Every:
			b = &c.Body
		default:
			return false
		}
		*b = h.body(*b, nil)
		return true
	}).Walk(x)
}

// hoistUse is a reference to input in a body: the term, the expression's
// index, the reference from input's root and how many of its terms are
// input and string keys.
type hoistUse struct {
	term   *ast.Term
	expr   int
	full   ast.Ref
	ground int
}

// hoistBinding is a variable bound before expression at to a prefix of
// input, or to a constant array, object or set.
type hoistBinding struct {
	at       int
	prefix   ast.Ref
	constant *ast.Term
	name     ast.Var
}

func (h *hoister) body(body ast.Body, args ast.VarSet) ast.Body {
	for _, e := range body {
		h.nested(e)
	}
	inPlace := h.inPlace(body, args)
	anchors := func(i int) bool { return inPlace[i] && h.anchors(body[i]) }
	errorFree := func(i int) bool { return inPlace[i] && h.errorFree(body[i]) }
	var uses []hoistUse
	for i, e := range body {
		if len(e.With) > 0 {
			continue
		}
		h.refs(e, func(t *ast.Term, full ast.Ref) {
			g := 1
			for g < len(full) {
				if _, ok := full[g].Value.(ast.String); !ok {
					break
				}
				g++
			}
			if g >= 2 {
				uses = append(uses, hoistUse{term: t, expr: i, full: full, ground: g})
			}
		})
	}
	// A prefix's anchor is the first expression that reads it and is
	// undefined without an error when it is: if the prefix is undefined,
	// the body fails there.
	anchorOf := map[string]int{}
	for _, u := range uses {
		if !anchors(u.expr) {
			continue
		}
		for n := 2; n <= u.ground; n++ {
			k := u.full[:n].String()
			if a, ok := anchorOf[k]; !ok || u.expr < a {
				anchorOf[k] = u.expr
			}
		}
	}
	// Each use reads through the longest prefix anchored at or before it.
	type group struct {
		prefix ast.Ref
		anchor int
		uses   []hoistUse
	}
	groups := map[string]*group{}
	var keys []string
	for _, u := range uses {
		for n := u.ground; n >= 2; n-- {
			k := u.full[:n].String()
			a, ok := anchorOf[k]
			if !ok || a > u.expr {
				continue
			}
			g := groups[k]
			if g == nil {
				g = &group{prefix: u.full[:n], anchor: a}
				groups[k] = g
				keys = append(keys, k)
			}
			g.uses = append(g.uses, u)
			break
		}
	}
	var bound []hoistBinding
	for _, k := range keys {
		g := groups[k]
		at, last := g.anchor, g.anchor
		for at > 0 && errorFree(at-1) {
			at--
		}
		for _, u := range g.uses {
			last = max(last, u.expr)
		}
		loops := false
		for _, e := range body[at:last] {
			loops = loops || iterates(e)
		}
		if len(g.uses) < 2 && !loops {
			continue
		}
		b := hoistBinding{at: at, prefix: g.prefix, name: h.fresh()}
		bound = append(bound, b)
		for _, u := range g.uses {
			u.term.Value = through(b.name, u.full[len(g.prefix):])
		}
	}
	// Constant arrays, objects and sets that a loop reads are built once,
	// in front of the body, not once per iteration (glob.match's ["/"]).
	consts := map[string]ast.Var{}
	looped := false
	for _, e := range body {
		if looped && len(e.With) == 0 {
			constants(e, func(t *ast.Term) {
				k := t.String()
				v, ok := consts[k]
				if !ok {
					v = h.fresh()
					consts[k] = v
					bound = append(bound, hoistBinding{constant: ast.NewTerm(t.Value), name: v})
				}
				t.Value = v
			})
		}
		looped = looped || iterates(e)
	}
	if len(bound) == 0 {
		return body
	}
	// Prefixes that two values bound at the same place share are bound
	// as well, and the values read through them.
	seen := map[string]bool{}
	for _, b := range bound {
		seen[b.prefix.String()] = true
	}
	for i := 0; i < len(bound); i++ {
		for j := i + 1; j < len(bound); j++ {
			a, b := bound[i], bound[j]
			n := 0
			for n < len(a.prefix) && n < len(b.prefix) && a.prefix[n].Equal(b.prefix[n]) {
				n++
			}
			if p := a.prefix[:n]; a.at == b.at && n >= 3 && !seen[p.String()] {
				seen[p.String()] = true
				bound = append(bound, hoistBinding{at: a.at, prefix: p, name: h.fresh()})
			}
		}
	}
	// Shorter prefixes first, so that a longer one bound at the same
	// place or later reads through the shorter one.
	slices.SortFunc(bound, func(a, b hoistBinding) int {
		if a.at != b.at {
			return a.at - b.at
		}
		return len(a.prefix) - len(b.prefix)
	})
	out := make(ast.Body, 0, len(body)+len(bound))
	next := 0
	for i, e := range body {
		for ; next < len(bound) && bound[next].at == i; next++ {
			b := bound[next]
			var value ast.Value = b.prefix
			if b.constant != nil {
				value = b.constant.Value
			}
			via := 0
			for _, o := range bound[:next] {
				if len(o.prefix) > via && len(o.prefix) < len(b.prefix) && o.prefix.Equal(b.prefix[:len(o.prefix)]) {
					value, via = through(o.name, b.prefix[len(o.prefix):]), len(o.prefix)
				}
			}
			a := ast.Assign.Expr(ast.VarTerm(string(b.name)), ast.NewTerm(value).Copy())
			a.SetLocation(e.Location)
			out = append(out, a)
		}
		out = append(out, e)
	}
	for i := range out {
		out[i].Index = i
	}
	return out
}

func (h *hoister) fresh() ast.Var {
	h.n++
	return ast.Var(fmt.Sprintf("%s%d__", hoistPrefix, h.n-1))
}

// refs calls f for each reference to input in x, outside comprehensions
// and every bodies, with the reference from input's root.
func (h *hoister) refs(x any, f func(*ast.Term, ast.Ref)) {
	ast.NewGenericVisitor(func(x any) bool {
		switch t := x.(type) {
		case *ast.ArrayComprehension, *ast.SetComprehension, *ast.ObjectComprehension, *ast.Every:
			return true
		case *ast.Expr:
			if c, ok := t.Terms.([]*ast.Term); ok && len(c) > 0 {
				for _, o := range c[1:] { // not the function called
					h.refs(o, f)
				}
				return true
			}
		case *ast.Term:
			if c, ok := t.Value.(ast.Call); ok {
				for _, o := range c[1:] {
					h.refs(o, f)
				}
				return true
			}
			ref, ok := t.Value.(ast.Ref)
			if !ok {
				return false
			}
			if head, ok := ref[0].Value.(ast.Var); ok {
				if root, ok := h.usable[head]; ok {
					f(t, root.Concat(ref[1:]))
				}
			}
			for _, o := range ref[1:] {
				h.refs(o, f)
			}
			return true
		}
		return false
	}).Walk(x)
}

// through is the value of variable v followed by the keys in rest.
func through(v ast.Var, rest ast.Ref) ast.Value {
	if len(rest) == 0 {
		return v
	}
	return append(ast.Ref{ast.VarTerm(string(v))}, rest...)
}

// inPlace reports, for each expression of body, whether OPA's compiler
// surely evaluates it where it is written. OPA reorders a body for safety:
// in passes over the body, it takes in order every expression whose
// variables are bound by then, so an expression that reads a variable a
// later expression binds moves behind the ones taken before. Here an
// expression is in place when every variable it reads is an argument
// (args) or bound by an expression in place before it: a subset of what
// OPA finds bound at that point, so that the expressions in place keep
// their order, ahead of any OPA moves. Negations, expressions with
// `with`, every, and expressions holding a closure are never in place.
func (h *hoister) inPlace(body ast.Body, args ast.VarSet) []bool {
	bound := ast.NewVarSet()
	bound.Update(args)
	out := make([]bool, len(body))
	for i, e := range body {
		reads, binds, ok := h.exprVars(e, bound)
		if ok && len(reads.Diff(bound)) == 0 {
			out[i] = true
			bound.Update(binds)
		}
	}
	return out
}

// exprVars are the local variables e reads and those it binds, given the
// variables bound before it; false when this cannot say.
func (h *hoister) exprVars(e *ast.Expr, bound ast.VarSet) (reads, binds ast.VarSet, ok bool) {
	reads, binds = ast.NewVarSet(), ast.NewVarSet()
	if e.Negated || len(e.With) > 0 {
		return reads, binds, false
	}
	read := func(t *ast.Term) bool {
		r, k, ok := h.termVars(t)
		reads.Update(r)
		binds.Update(k)
		return ok
	}
	switch t := e.Terms.(type) {
	case *ast.Term:
		return reads, binds, read(t)
	case []*ast.Term:
		if len(t) == 3 && (e.IsAssignment() || e.IsEquality()) {
			l, r := t[1], t[2]
			lr, _, lok := h.termVars(l)
			rr, _, rok := h.termVars(r)
			switch {
			case !lok || !rok:
				return reads, binds, false
			case isPattern(l) && len(rr.Diff(bound)) == 0:
				binds.Update(l.Vars())
				return reads, binds, read(r)
			case e.IsEquality() && isPattern(r) && len(lr.Diff(bound)) == 0:
				binds.Update(r.Vars())
				return reads, binds, read(l)
			}
			return reads, binds, false
		}
		for _, o := range t[1:] {
			if !read(o) {
				return reads, binds, false
			}
		}
		return reads, binds, true
	case *ast.SomeDecl:
		for _, s := range t.Symbols {
			c, isCall := s.Value.(ast.Call)
			if !isCall {
				continue // some x: declares, binds nothing
			}
			if len(c) < 3 || !read(c[len(c)-1]) {
				return reads, binds, false
			}
			for _, o := range c[1 : len(c)-1] {
				if !isPattern(o) {
					return reads, binds, false
				}
				binds.Update(o.Vars())
			}
		}
		return reads, binds, true
	}
	return reads, binds, false
}

// termVars are the local variables t reads and those its references'
// variable keys bind; false when t holds a closure (a comprehension).
func (h *hoister) termVars(t *ast.Term) (reads, keys ast.VarSet, ok bool) {
	reads, keys, ok = ast.NewVarSet(), ast.NewVarSet(), true
	var walk func(t *ast.Term)
	walk = func(t *ast.Term) {
		switch v := t.Value.(type) {
		case ast.Var:
			if !h.global(v) {
				reads.Add(v)
			}
		case ast.Ref:
			walk(v[0])
			for _, k := range v[1:] {
				if kv, isVar := k.Value.(ast.Var); isVar && !h.global(kv) {
					keys.Add(kv)
				} else {
					walk(k)
				}
			}
		case ast.Call:
			for _, o := range v[1:] {
				walk(o)
			}
		case *ast.ArrayComprehension, *ast.SetComprehension, *ast.ObjectComprehension:
			ok = false
		default:
			eachElem(v, walk)
		}
	}
	walk(t)
	return reads, keys, ok
}

// global reports whether v names a document rather than a local
// variable: input, data, an import, or a rule of the package, unless the
// rule declares a variable of that name.
func (h *hoister) global(v ast.Var) bool {
	if v == ast.InputRootDocument.Value || v == ast.DefaultRootDocument.Value {
		return true
	}
	if _, ok := h.usable[v]; ok {
		return true
	}
	return (h.rules[v] || h.others[v]) && !h.declared[v]
}

// isPattern reports whether t can receive values: a variable, a scalar,
// or a collection of those.
func isPattern(t *ast.Term) bool {
	switch v := t.Value.(type) {
	case ast.Var, ast.Null, ast.Boolean, ast.Number, ast.String:
		return true
	case *ast.Array:
		for i := range v.Len() {
			if !isPattern(v.Elem(i)) {
				return false
			}
		}
		return true
	case ast.Object:
		ok := true
		v.Foreach(func(k, x *ast.Term) { ok = ok && constant(k.Value) && isPattern(x) })
		return ok
	}
	return false
}

// anchors reports whether e is undefined, without an error, when a
// reference it reads is: its operands read values only, and a call (which
// may fail) is made only once they are all defined. Not a negation, an
// expression with `with`, or print (which prints undefined operands).
func (h *hoister) anchors(e *ast.Expr) bool {
	if e.Negated || len(e.With) > 0 {
		return false
	}
	switch t := e.Terms.(type) {
	case *ast.Term:
		return h.plain(t)
	case []*ast.Term:
		return len(t) > 0 && !e.Operator().Equal(ast.Print.Ref()) && h.allPlain(t[1:])
	case *ast.SomeDecl:
		for _, s := range t.Symbols {
			switch v := s.Value.(type) {
			case ast.Var:
			case ast.Call:
				if !hoistOps[v[0].Value.String()] || !h.allPlain(v[1:]) {
					return false
				}
			default:
				return false
			}
		}
		return true
	}
	return false
}

// errorFree reports whether e cannot fail with an error: it anchors, and
// it is a comparison, a membership test, a unification or a `some ... in`.
func (h *hoister) errorFree(e *ast.Expr) bool {
	if !h.anchors(e) {
		return false
	}
	if _, ok := e.Terms.([]*ast.Term); ok {
		return hoistOps[e.Operator().String()]
	}
	return true
}

func (h *hoister) allPlain(ts []*ast.Term) bool {
	for _, t := range ts {
		if !h.plain(t) {
			return false
		}
	}
	return true
}

// plain reports whether evaluating t reads values only: no call, no
// comprehension, no rule of the policy.
func (h *hoister) plain(t *ast.Term) bool {
	switch v := t.Value.(type) {
	case ast.Null, ast.Boolean, ast.Number, ast.String:
		return true
	case ast.Var:
		return !h.rules[v] && !h.others[v]
	case ast.Ref:
		head, ok := v[0].Value.(ast.Var)
		if !ok {
			return false
		}
		switch {
		case head == ast.DefaultRootDocument.Value:
			for _, p := range h.rulePaths {
				if overlaps(v, p) {
					return false
				}
			}
		case h.rules[head] || h.others[head]:
			return false
		}
		return h.allPlain(v[1:])
	}
	return all(t.Value, h.plain)
}

// overlaps reports whether a reference into data may read the document of
// the rule at path (both from data): one is a prefix of the other, a
// variable matching any key.
func overlaps(ref, path ast.Ref) bool {
	for i := 1; i < len(ref) && i < len(path); i++ {
		if !constant(ref[i].Value) || !constant(path[i].Value) {
			return true
		}
		if !ref[i].Equal(path[i]) {
			return false
		}
	}
	return true
}

// constants calls f for each constant array, object or set in e (not
// within another), outside comprehensions and every bodies, and outside
// the patterns `some ... in` declares (some [1, 2] in pairs).
func constants(e *ast.Expr, f func(*ast.Term)) {
	xs := []any{e}
	if d, ok := e.Terms.(*ast.SomeDecl); ok {
		xs = nil
		for _, s := range d.Symbols {
			if c, ok := s.Value.(ast.Call); ok && len(c) > 2 {
				xs = append(xs, c[len(c)-1])
			}
		}
	}
	v := ast.NewGenericVisitor(func(x any) bool {
		switch t := x.(type) {
		case *ast.ArrayComprehension, *ast.SetComprehension, *ast.ObjectComprehension, *ast.Every:
			return true
		case *ast.Term:
			switch v := t.Value.(type) {
			case *ast.Array, ast.Object, ast.Set:
				if v.(interface{ Len() int }).Len() > 0 && constant(v) {
					f(t)
					return true
				}
			}
		}
		return false
	})
	for _, x := range xs {
		v.Walk(x)
	}
}

// constant reports whether v is made of scalars only (OPA's IsGround also
// holds for a reference from a variable, r.kind).
func constant(v ast.Value) bool {
	switch v.(type) {
	case ast.Null, ast.Boolean, ast.Number, ast.String:
		return true
	}
	return all(v, func(t *ast.Term) bool { return constant(t.Value) })
}

// eachElem calls f on each element of a collection (an array's or a set's
// elements, an object's keys and values); false when v is not one.
func eachElem(v ast.Value, f func(*ast.Term)) bool {
	switch c := v.(type) {
	case *ast.Array:
		for i := range c.Len() {
			f(c.Elem(i))
		}
	case ast.Object:
		c.Foreach(func(k, x *ast.Term) { f(k); f(x) })
	case ast.Set:
		c.Foreach(f)
	default:
		return false
	}
	return true
}

// all reports whether v is a collection whose every element holds ok.
func all(v ast.Value, ok func(*ast.Term) bool) bool {
	holds := true
	return eachElem(v, func(t *ast.Term) { holds = holds && ok(t) }) && holds
}

// iterates reports whether e may bind its variables more than once: a
// `some ... in`, or a reference with a variable key.
func iterates(e *ast.Expr) bool {
	if _, ok := e.Terms.(*ast.SomeDecl); ok {
		return true
	}
	found := false
	ast.WalkRefs(e, func(r ast.Ref) bool {
		found = found || !r[1:].IsGround()
		return found
	})
	return found
}
