package compiler

import (
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/nexuspdp/nexus/bundle"
)

// hostAliases maps an OPA builtin's name to the alias the host runs
// (bundle.OPAHostAliases, inverted).
var hostAliases = func() map[string]ast.Ref {
	m := make(map[string]ast.Ref, len(bundle.OPAHostAliases))
	for alias, name := range bundle.OPAHostAliases {
		m[name] = ast.MustParseRef(alias)
	}
	return m
}()

// withHostAliases returns caps with bundle.OPAHostAliases declared as the
// builtins they stand for.
func withHostAliases(caps *ast.Capabilities) *ast.Capabilities {
	c := *caps
	c.Builtins = append([]*ast.Builtin(nil), caps.Builtins...)
	for _, b := range caps.Builtins {
		if alias, ok := hostAliases[b.Name]; ok {
			a := *b
			a.Name = alias.String()
			c.Builtins = append(c.Builtins, &a)
		}
	}
	return &c
}

// aliasHostBuiltins returns copies of the modules whose calls of the
// builtins in bundle.OPAHostAliases call their aliases instead, so that
// the compiled policy leaves them to the host, which answers as OPA's
// evaluator does. Four kinds of call keep the Wasm runtime's code:
//   - concat over an array literal, which the runtime joins in the
//     array's order as OPA does, without a call to the host;
//   - replace and indexof of a constant string that is not empty, which
//     the runtime answers as OPA does;
//   - json.marshal written as an argument of one of nexus' builtins
//     (nexus.envoy_decide(table, json.marshal([...]))): those parse the
//     JSON, so neither key order nor escaping changes their answer, and
//     such a policy keeps its speed (the default policy now passes the
//     array itself);
//   - every call of a builtin that a module replaces with `with` (tests
//     do), because OPA's Wasm planner applies a replacement of an alias
//     to some calls and not others; such a policy keeps the runtime's
//     answers, as before aliases existed.
func aliasHostBuiltins(mods []*ast.Module) []*ast.Module {
	replaced := map[string]bool{}
	for _, m := range mods {
		ast.WalkExprs(m, func(e *ast.Expr) bool {
			for _, w := range e.With {
				// A Var before the compiler resolves it, or a Ref.
				replaced[w.Target.Value.String()] = true
			}
			return false
		})
	}
	// The operators of json.marshal calls that are arguments of nexus'
	// builtins.
	parsed := map[*ast.Term]bool{}
	alias := func(t *ast.Term, operands []*ast.Term) {
		ref, ok := t.Value.(ast.Ref)
		if !ok {
			return
		}
		name := ref.String()
		if strings.HasPrefix(name, "nexus.") {
			for _, o := range operands {
				if c, ok := o.Value.(ast.Call); ok && len(c) > 0 && c[0].Value.String() == "json.marshal" {
					parsed[c[0]] = true
				}
			}
			return
		}
		a, ok := hostAliases[name]
		if !ok || replaced[name] || parsed[t] {
			return
		}
		switch name {
		case "concat":
			if len(operands) >= 2 {
				if _, ok := operands[1].Value.(*ast.Array); ok {
					return
				}
			}
		case "replace", "indexof":
			// The runtime answers as OPA does for a string it is given
			// to look for, unless that string is empty.
			if len(operands) >= 2 {
				if s, ok := operands[1].Value.(ast.String); ok && s != "" {
					return
				}
			}
		}
		t.Value = a.Copy()
	}
	out := make([]*ast.Module, len(mods))
	for i, m := range mods {
		if shadows(m) {
			out[i] = m // json, concat, glob or split names something of the policy's here
			continue
		}
		m = m.Copy()
		ast.WalkNodes(m, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.Expr:
				if terms, ok := x.Terms.([]*ast.Term); ok && len(terms) > 0 {
					alias(terms[0], terms[1:])
				}
			case *ast.Term:
				if c, ok := x.Value.(ast.Call); ok && len(c) > 0 {
					alias(c[0], c[1:])
				}
			}
			return false
		})
		out[i] = m
	}
	return out
}

// aliasRoots are the first names of the builtins the host runs (json,
// concat, glob, split).
var aliasRoots = func() map[ast.Var]bool {
	m := map[ast.Var]bool{}
	for _, name := range bundle.OPAHostAliases {
		m[ast.Var(strings.SplitN(name, ".", 2)[0])] = true
	}
	return m
}()

// shadows reports whether m binds the first name of a builtin the host
// runs itself, by an import (import data.lib as glob) or a rule (a
// function split): its calls then may name the policy's own functions,
// which keep their names.
func shadows(m *ast.Module) bool {
	bound := func(v ast.Var) bool { return aliasRoots[v] }
	for _, imp := range m.Imports {
		if bound(imp.Name()) {
			return true
		}
	}
	for _, r := range m.Rules {
		if len(r.Head.Ref()) > 0 {
			if v, ok := r.Head.Ref()[0].Value.(ast.Var); ok && bound(v) {
				return true
			}
		}
	}
	return false
}
