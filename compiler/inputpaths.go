package compiler

import (
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	opabundle "github.com/open-policy-agent/opa/v1/bundle"
)

// analysed compiles copies of the modules on their own, for the analyses
// of what the policy reads and calls (OPA's build rewrites the modules it
// is given). It returns nil when they do not compile so.
func analysed(files []opabundle.ModuleFile, caps *ast.Capabilities) *ast.Compiler {
	mods := make(map[string]*ast.Module, len(files))
	for _, f := range files {
		mods[f.Path] = f.Parsed.Copy()
	}
	c := ast.NewCompiler().WithCapabilities(caps)
	c.Compile(mods)
	if c.Failed() {
		return nil
	}
	return c
}

// inputPaths analyses the compiled modules (imports resolved) for the
// references to input: for each, the longest prefix of constant string
// keys, extended by one key taken from base data
// (input.headers[data.nexus.subject_header]) when no rule defines that
// part of data. It returns ok=false when some reference has no such prefix
// (input itself, or input[x]), when input is replaced with `with`, or when
// the modules did not compile on their own (c is nil). Each path's
// segments are JSON-shaped, as the manifest records them.
func inputPaths(c *ast.Compiler) ([][]any, bool) {
	if c == nil {
		return nil, false
	}
	nodes := make([]any, 0, len(c.Modules))
	for _, m := range c.Modules {
		nodes = append(nodes, m)
	}
	return inputPathsIn(c, nodes, nil, nil)
}

// inputPathsFor is inputPaths for the rules entrypoint ep can reach
// (reachable): what the other rules read does not count. It returns
// ok=false when ep is not a data path.
func inputPathsFor(c *ast.Compiler, ep string) ([][]any, bool) {
	if c == nil {
		return nil, false
	}
	ref, ok := dataPath(ep)
	if !ok {
		return nil, false
	}
	rules := reachable(c, ref)
	nodes := make([]any, len(rules))
	for i, r := range rules {
		nodes[i] = r
	}
	return inputPathsIn(c, nodes, inputAliases(c, rules), ref)
}

// inputPathsIn is inputPaths for the references inside nodes (modules or
// rules of c). A reference through one of aliases reads the part of input
// the alias names (data.p.http.method reads input.a.http.method when
// data.p.http names input.a.http); reading an alias whole reads all that
// part, and so does entrypoint ep, when it names an alias or a document
// that holds one. The aliases' own rules are not walked.
func inputPathsIn(c *ast.Compiler, nodes []any, aliases []inputAlias, ep ast.Ref) ([][]any, bool) {
	keys := dataKeys(c)
	var paths [][]any
	all := false
	// path returns the constant prefix of an input reference.
	path := func(r ast.Ref) []any {
		var p []any
		for _, t := range r[1:] {
			switch v := t.Value.(type) {
			case ast.String:
				p = append(p, string(v))
				continue
			case ast.Var:
				if k, ok := keys[v]; ok {
					p = append(p, k)
				}
			}
			break
		}
		if len(p) == 0 {
			all = true
		}
		return p
	}
	// data reads a reference to data (or data itself, a nil r) through
	// the aliases: a reference that extends an alias reads input there;
	// one that may hold an alias whole (a document above it, or a
	// dynamic key on the way) reads the alias' part whole.
	data := func(r ast.Ref) {
		for _, a := range aliases {
			switch {
			case r != nil && r.HasPrefix(a.ref):
				in := append(ast.Ref{ast.InputRootDocument}, a.input...)
				paths = append(paths, path(append(in, r[len(a.ref):]...)))
			case r == nil || a.ref.HasPrefix(r.GroundPrefix()):
				paths = append(paths, path(append(ast.Ref{ast.InputRootDocument}, a.input...)))
			}
		}
	}
	isAlias := make(map[*ast.Rule]bool, len(aliases))
	for _, a := range aliases {
		isAlias[a.rule] = true
	}
	if ep != nil {
		data(ep)
	}
	gets := objectGets(nodes)
	for _, m := range nodes {
		var vis *ast.GenericVisitor
		vis = ast.NewGenericVisitor(func(x any) bool {
			switch x := x.(type) {
			case *ast.Rule:
				return isAlias[x]
			case *ast.With:
				if r, ok := x.Target.Value.(ast.Ref); ok && r.HasPrefix(ast.InputRootRef) {
					all = true
				}
			case *ast.Expr:
				if v, _, ok := localBinding(x); ok && gets[v] != nil {
					for _, r := range gets[v] {
						vis.Walk(r)
					}
					return true
				}
				if terms, ok := x.Terms.([]*ast.Term); ok && walkObjectGet(vis, terms) {
					for _, w := range x.With {
						vis.Walk(w)
					}
					return true
				}
			case ast.Call:
				return walkObjectGet(vis, x)
			case ast.Ref:
				if aliases != nil && x[0].Equal(ast.DefaultRootDocument) {
					data(x)
					for _, t := range x[1:] {
						vis.Walk(t)
					}
					return true
				}
				if !x[0].Equal(ast.InputRootDocument) {
					return false
				}
				paths = append(paths, path(x))
				// Terms inside the ref (input.a[input.b]) are visited
				// below; the head is not a bare use of input.
				for _, t := range x[1:] {
					ast.NewGenericVisitor(func(y any) bool {
						if r, ok := y.(ast.Ref); ok && r[0].Equal(ast.InputRootDocument) {
							paths = append(paths, path(r))
							return true
						}
						if v, ok := y.(ast.Var); ok && v.Equal(ast.InputRootDocument.Value) {
							all = true
						}
						return false
					}).Walk(t)
				}
				return true
			case ast.Var:
				if x.Equal(ast.InputRootDocument.Value) {
					all = true
				}
				if x.Equal(ast.DefaultRootDocument.Value) {
					data(nil)
				}
			}
			return false
		})
		vis.Walk(m)
	}
	if all {
		return nil, false
	}
	if paths == nil {
		paths = [][]any{} // known: no input at all
	}
	return paths, true
}

// localBinding returns the compiler's local variable that x binds to a
// reference (`__local1__ = input.headers`, which the compiler writes for
// a reference passed to a builtin), and the reference, if x is such a
// binding.
func localBinding(x *ast.Expr) (ast.Var, *ast.Term, bool) {
	if x.Negated || len(x.With) > 0 || !x.IsEquality() {
		return "", nil, false
	}
	ops := x.Operands()
	for i := range 2 {
		v, ok := ops[i].Value.(ast.Var)
		if !ok || !strings.HasPrefix(string(v), "__local") {
			continue
		}
		if _, ok := ops[1-i].Value.(ast.Ref); ok {
			return v, ops[1-i], true
		}
	}
	return "", nil, false
}

// objectGets finds the local variables of nodes bound once to a
// reference and used only as the object of object.get: for each, the
// references those calls read (keyRef), which is all that the binding
// reads.
func objectGets(nodes []any) map[ast.Var][]*ast.Term {
	bound := map[ast.Var]*ast.Term{}
	twice := map[ast.Var]bool{}
	uses := map[ast.Var]int{}
	keys := map[ast.Var][]*ast.Term{}
	for _, m := range nodes {
		ast.NewGenericVisitor(func(x any) bool {
			switch x := x.(type) {
			case *ast.Expr:
				if v, ref, ok := localBinding(x); ok {
					if _, seen := bound[v]; seen {
						twice[v] = true
					}
					bound[v] = ref
				}
				if terms, ok := x.Terms.([]*ast.Term); ok && isObjectGet(terms) {
					if v, ok := terms[1].Value.(ast.Var); ok {
						keys[v] = append(keys[v], terms[2])
					}
				}
			case ast.Var:
				uses[x]++
			}
			return false
		}).Walk(m)
	}
	gets := map[ast.Var][]*ast.Term{}
	for v, obj := range bound {
		if twice[v] || len(keys[v]) == 0 || uses[v] != 1+len(keys[v]) {
			continue
		}
		for _, k := range keys[v] {
			gets[v] = append(gets[v], keyRef(obj, k))
		}
	}
	return gets
}

// objectGetRef is object.get's name as a call's operator.
var objectGetRef = ast.ObjectGet.Ref()

// isObjectGet reports whether call (operator, then operands) is
// object.get(obj, key, default).
func isObjectGet(call []*ast.Term) bool {
	return len(call) >= 4 && call[0].Value.Compare(objectGetRef) == 0
}

// walkObjectGet walks, when call is object.get(obj, key, default) with
// obj a reference, what the call reads (keyRef) and its other operands,
// and reports whether it did.
func walkObjectGet(vis *ast.GenericVisitor, call []*ast.Term) bool {
	if !isObjectGet(call) {
		return false
	}
	if _, ok := call[1].Value.(ast.Ref); !ok {
		return false
	}
	vis.Walk(keyRef(call[1], call[2]))
	for _, t := range call[3:] {
		vis.Walk(t)
	}
	return true
}

// keyRef returns the reference object.get(obj, key, _) reads: obj[key]
// for a constant string key, obj followed by the leading constant strings
// of a constant path, else obj itself. Its answer depends on nothing else
// under obj (whether key is there, and its value), and obj's presence
// stays as it is, so the rest of obj may be pruned.
func keyRef(obj, key *ast.Term) *ast.Term {
	r := obj.Value.(ast.Ref)
	switch k := key.Value.(type) {
	case ast.String:
		return ast.NewTerm(append(slices.Clip(r), key))
	case *ast.Array:
		for i := range k.Len() {
			if _, ok := k.Elem(i).Value.(ast.String); !ok {
				break
			}
			r = append(slices.Clip(r), k.Elem(i))
		}
	}
	return ast.NewTerm(r)
}

// inputAlias is a rule that names a constant part of input and does
// nothing else (`http := input.attributes.request.http`), or a constant
// part of another alias: its value is that part of input whenever it is
// defined.
type inputAlias struct {
	rule  *ast.Rule
	ref   ast.Ref     // the rule's path: data.p.http
	input []*ast.Term // the part of input it names, string keys
}

// inputAliases returns the aliases among rules: complete rules, the only
// rule any reference to their path can refer to (no default, else,
// partial or deeper rule), whose body binds their value to input or an
// alias followed by constant string keys, and does nothing else.
func inputAliases(c *ast.Compiler, rules []*ast.Rule) []inputAlias {
	all := ast.RulesOptions{IncludeHiddenModules: true}
	var found []inputAlias
	pending := map[*ast.Rule]ast.Ref{}
	for _, r := range rules {
		target, ok := aliasTarget(r)
		if !ok || len(c.GetRulesDynamicWithOpts(r.Ref(), all)) != 1 {
			continue
		}
		for _, t := range target[1:] {
			if _, ok := t.Value.(ast.String); !ok {
				target = nil
				break
			}
		}
		switch {
		case target == nil:
		case target[0].Equal(ast.InputRootDocument):
			found = append(found, inputAlias{rule: r, ref: r.Ref(), input: target[1:]})
		case target[0].Equal(ast.DefaultRootDocument):
			pending[r] = target
		}
	}
	// An alias of an alias names what the first names, extended.
	for progress := true; progress; {
		progress = false
		for r, target := range pending {
			for _, a := range found {
				if target.HasPrefix(a.ref) {
					in := append(slices.Clip(a.input), target[len(a.ref):]...)
					found = append(found, inputAlias{rule: r, ref: r.Ref(), input: in})
					delete(pending, r)
					progress = true
					break
				}
			}
		}
	}
	return found
}

// aliasTarget returns the reference a complete rule's value is, as OPA's
// compiler writes it (`v := __local0__ if __local0__ = input.a`), and
// whether r is such a rule.
func aliasTarget(r *ast.Rule) (ast.Ref, bool) {
	h := r.Head
	if len(h.Args) > 0 || h.Key != nil || r.Default || r.Else != nil || len(r.Body) != 1 {
		return nil, false
	}
	e := r.Body[0]
	if e.Negated || len(e.With) > 0 || !e.IsEquality() {
		return nil, false
	}
	v, ok := h.Value.Value.(ast.Var)
	if !ok {
		return nil, false
	}
	ops := e.Operands()
	for i := range 2 {
		if ops[i].Value.Compare(v) != 0 {
			continue
		}
		switch t := ops[1-i].Value.(type) {
		case ast.Ref:
			return t, true
		case ast.Var:
			if t.Equal(ast.InputRootDocument.Value) {
				return ast.InputRootRef, true
			}
		}
	}
	return nil, false
}

// reachable returns the rules ref can refer to and those they refer to in
// turn, in a stable order: rules of other packages, functions, rules
// named in a `with` (target or value), and every rule when a reference is
// dynamic (data[x]) or names data as a whole. Like nondeterministic's
// walk it is conservative: a rule counts wherever it is referred to, even
// in a branch that can never be taken.
func reachable(c *ast.Compiler, ref ast.Ref) []*ast.Rule {
	all := ast.RulesOptions{IncludeHiddenModules: true}
	seen := map[*ast.Rule]bool{}
	var queue []*ast.Rule
	add := func(rules []*ast.Rule) {
		for _, r := range rules {
			if !seen[r] {
				seen[r] = true
				queue = append(queue, r)
			}
		}
	}
	add(c.GetRulesDynamicWithOpts(ref, all))
	var vis *ast.GenericVisitor
	vis = ast.NewGenericVisitor(func(x any) bool {
		switch x := x.(type) {
		case ast.Ref:
			if x[0].Equal(ast.DefaultRootDocument) {
				add(c.GetRulesDynamicWithOpts(x, all))
			}
			// The head is not a bare use of data; terms inside the ref
			// (data.a[data.b], input[data.k]) are references of their own.
			if _, ok := x[0].Value.(ast.Var); !ok {
				vis.Walk(x[0])
			}
			for _, t := range x[1:] {
				vis.Walk(t)
			}
			return true
		case ast.Var:
			if x.Equal(ast.DefaultRootDocument.Value) {
				add(c.GetRulesDynamicWithOpts(ast.DefaultRootRef, all))
			}
		}
		return false
	})
	for i := 0; i < len(queue); i++ {
		vis.Walk(queue[i])
	}
	return queue
}

// dataKeys finds the compiler's local variables bound to a constant path
// of base data (`__local1__ = data.nexus.subject_header`, which the
// compiler writes for a data reference nested in an input reference). A
// variable bound twice, a path some rule defines (virtual documents are not
// in the bundle's data) and any policy that replaces data with `with` are
// left out, so the key stays unknown.
//
// Each key is the segment the manifest records: {"data": [path...]}.
func dataKeys(c *ast.Compiler) map[ast.Var]map[string]any {
	keys := map[ast.Var]map[string]any{}
	twice := map[ast.Var]bool{}
	withData := false
	for _, m := range c.Modules {
		ast.NewGenericVisitor(func(x any) bool {
			switch x := x.(type) {
			case *ast.With:
				if r, ok := x.Target.Value.(ast.Ref); ok && r.HasPrefix(ast.DefaultRootRef) {
					withData = true
				}
			case *ast.Expr:
				if !x.IsEquality() {
					return false
				}
				ts := x.Operands()
				for i := range 2 {
					v, ok := ts[i].Value.(ast.Var)
					if !ok || !strings.HasPrefix(string(v), "__local") {
						continue
					}
					r, ok := ts[1-i].Value.(ast.Ref)
					if !ok || !r.HasPrefix(ast.DefaultRootRef) || len(r) < 2 || len(c.GetRules(r)) > 0 {
						continue
					}
					k := make([]any, 0, len(r)-1)
					for _, t := range r[1:] {
						s, ok := t.Value.(ast.String)
						if !ok {
							break
						}
						k = append(k, string(s))
					}
					if len(k) != len(r)-1 {
						continue
					}
					if _, seen := keys[v]; seen {
						twice[v] = true
					}
					keys[v] = map[string]any{"data": k}
				}
			}
			return false
		}).Walk(m)
	}
	if withData {
		return nil
	}
	for v := range twice {
		delete(keys, v)
	}
	return keys
}
