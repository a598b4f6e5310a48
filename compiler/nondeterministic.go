package compiler

import (
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// nondeterministic returns, for each entrypoint, the sorted names of the
// non-deterministic builtins (those the capabilities mark so: time.now_ns,
// rand.intn, uuid.rfc4122, http.send, opa.runtime, io.jwt.decode_verify,
// ... and host builtins declared so) that its rules can reach. c holds
// the modules compiled on their own (imports and refs resolved, locals
// renamed). An entrypoint that is not a data path is left out (unknown).
//
// The walk follows every rule the entrypoint's rules refer to: rules of
// other packages, functions, rules named in a `with` (target or value),
// and all rules when a reference is dynamic (data[x]) or names data as a
// whole. It is conservative: a builtin counts wherever it is called, even
// in a branch the optimiser would remove or under a `with` that replaces
// it; a builtin that replaces another with `with` counts too. One call
// does not count: http.send whose request object says "cache": true or
// "force_cache": true as a constant, the policy author's opt-in to reuse
// a response, as in OPA.
func nondeterministic(c *ast.Compiler, caps *ast.Capabilities, entrypoints []string) map[string][]string {
	nd := map[string]bool{}
	for _, b := range caps.Builtins {
		if b.Nondeterministic {
			nd[b.Name] = true
		}
	}
	out := make(map[string][]string, len(entrypoints))
	for _, ep := range entrypoints {
		ref, ok := dataPath(ep)
		if !ok {
			continue
		}
		out[ep] = reach(c, nd, ref)
	}
	return out
}

// reach walks the rules ref can refer to and those they refer to in turn,
// and returns the non-deterministic builtins they call.
func reach(c *ast.Compiler, nd map[string]bool, ref ast.Ref) []string {
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
	found := map[string]bool{}
	call := func(op ast.Ref, req *ast.Term, defs map[ast.Var]*ast.Term) {
		name := op.String()
		if nd[name] && (name != ast.HTTPSend.Name || !cachedRequest(req, defs)) {
			found[name] = true
		}
	}
	add(c.GetRulesDynamicWithOpts(ref, all))
	for len(queue) > 0 {
		r := queue[0]
		queue = queue[1:]
		defs := objectDefs(r)
		var vis *ast.GenericVisitor
		vis = ast.NewGenericVisitor(func(x any) bool {
			switch x := x.(type) {
			case *ast.Expr:
				if x.IsCall() {
					var req *ast.Term
					if ops := x.Operands(); len(ops) > 0 {
						req = ops[0]
					}
					call(x.Operator(), req, defs)
				}
			case ast.Call:
				if len(x) > 0 {
					if op, ok := x[0].Value.(ast.Ref); ok {
						var req *ast.Term
						if len(x) > 1 {
							req = x[1]
						}
						call(op, req, defs)
					}
				}
			case *ast.With:
				// `with f as g`: g is called wherever f was.
				if v, ok := x.Value.Value.(ast.Ref); ok && nd[v.String()] {
					found[v.String()] = true
				}
			case ast.Ref:
				if !x[0].Equal(ast.DefaultRootDocument) {
					return false
				}
				add(c.GetRulesDynamicWithOpts(x, all))
				// The head is not a bare use of data; terms inside the
				// ref (data.a[data.b]) are references of their own.
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
		vis.Walk(r)
	}
	names := make([]string, 0, len(found))
	for n := range found {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// cachedRequest reports whether req, the request object of an http.send
// call, is an object (written in the call or bound once to a local of the
// rule) that sets "cache" or "force_cache" to the constant true.
func cachedRequest(req *ast.Term, defs map[ast.Var]*ast.Term) bool {
	if req == nil {
		return false
	}
	if v, ok := req.Value.(ast.Var); ok {
		if req = defs[v]; req == nil {
			return false
		}
	}
	obj, ok := req.Value.(ast.Object)
	if !ok {
		return false
	}
	for _, key := range []string{"cache", "force_cache"} {
		if t := obj.Get(ast.StringTerm(key)); t != nil && t.Value.Compare(ast.Boolean(true)) == 0 {
			return true
		}
	}
	return false
}

// objectDefs maps the rule's locals that are bound exactly once, to an
// object (`__local0__ = {...}`, the compiler's form of `req := {...}`), to
// that object.
func objectDefs(r *ast.Rule) map[ast.Var]*ast.Term {
	defs := map[ast.Var]*ast.Term{}
	count := map[ast.Var]int{}
	ast.NewGenericVisitor(func(x any) bool {
		e, ok := x.(*ast.Expr)
		if !ok || !(e.IsEquality() || e.IsAssignment()) {
			return false
		}
		ops := e.Operands()
		for i := range 2 {
			v, ok := ops[i].Value.(ast.Var)
			if !ok {
				continue
			}
			count[v]++
			if _, ok := ops[1-i].Value.(ast.Object); ok {
				defs[v] = ops[1-i]
			}
		}
		return false
	}).Walk(r)
	for v, n := range count {
		if n != 1 {
			delete(defs, v)
		}
	}
	return defs
}

// dataPath is the reference an entrypoint names ("a/b" is data.a.b), as
// OPA's compiler reads it.
func dataPath(ep string) (ast.Ref, bool) {
	parts := strings.Split(strings.TrimPrefix(ep, "/"), "/")
	ref := ast.Ref{ast.DefaultRootDocument}
	for _, p := range parts {
		if p == "" {
			return nil, false
		}
		ref = append(ref, ast.StringTerm(p))
	}
	return ref, true
}
