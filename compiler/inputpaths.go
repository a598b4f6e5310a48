package compiler

import (
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
)

// MetadataInputPaths is the manifest metadata key under which Compile
// records the paths of the input document the policy reads (see
// Manifest.InputPaths).
const MetadataInputPaths = "nexus_input_paths"

// InputPaths returns the paths under input that the policy reads, as
// recorded at compile time, and whether they are known. A path means the
// whole subtree under it may be read; unknown (false) means the policy may
// read anything (a bundle built elsewhere, or a policy that reads input as a
// whole, iterates over its keys or replaces it with `with`).
func (m *Manifest) InputPaths() ([][]string, bool) {
	raw, ok := m.Metadata[MetadataInputPaths].([]any)
	if !ok {
		return nil, false
	}
	out := make([][]string, 0, len(raw))
	for _, r := range raw {
		segs, ok := r.([]any)
		if !ok {
			return nil, false
		}
		p := make([]string, 0, len(segs))
		for _, s := range segs {
			str, ok := s.(string)
			if !ok {
				return nil, false
			}
			p = append(p, str)
		}
		if len(p) == 0 {
			return nil, false
		}
		out = append(out, p)
	}
	return out, true
}

// inputPaths analyses the modules (imports resolved) for the references to
// input: for each, the longest prefix of constant string keys. It returns
// ok=false when some reference has no such prefix (input itself, or
// input[x]), when input is replaced with `with`, or when the modules do not
// compile on their own.
func inputPaths(files []bundle.ModuleFile, caps *ast.Capabilities) ([][]string, bool) {
	mods := make(map[string]*ast.Module, len(files))
	for _, f := range files {
		mods[f.Path] = f.Parsed.Copy()
	}
	c := ast.NewCompiler().WithCapabilities(caps)
	c.Compile(mods)
	if c.Failed() {
		return nil, false
	}
	var paths [][]string
	all := false
	for _, m := range c.Modules {
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
				var p []string
				for _, t := range x[1:] {
					s, ok := t.Value.(ast.String)
					if !ok {
						break
					}
					p = append(p, string(s))
				}
				if len(p) == 0 {
					all = true
				}
				paths = append(paths, p)
				// Terms inside the ref (input.a[input.b]) are visited
				// below; the head is not a bare use of input.
				for _, t := range x[1:] {
					ast.NewGenericVisitor(func(y any) bool {
						if r, ok := y.(ast.Ref); ok && r[0].Equal(ast.InputRootDocument) {
							var q []string
							for _, t := range r[1:] {
								s, ok := t.Value.(ast.String)
								if !ok {
									break
								}
								q = append(q, string(s))
							}
							if len(q) == 0 {
								all = true
							}
							paths = append(paths, q)
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
	return paths, true
}
