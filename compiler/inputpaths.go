package compiler

import (
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
	return inputPathsIn(c, nodes)
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
	return inputPathsIn(c, nodes)
}

// inputPathsIn is inputPaths for the references inside nodes (modules or
// rules of c).
func inputPathsIn(c *ast.Compiler, nodes []any) ([][]any, bool) {
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
	for _, m := range nodes {
		vis := ast.NewGenericVisitor(func(x any) bool {
			switch x := x.(type) {
			case *ast.With:
				if r, ok := x.Target.Value.(ast.Ref); ok && r.HasPrefix(ast.InputRootRef) {
					all = true
				}
			case ast.Ref:
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
