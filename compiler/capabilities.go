package compiler

import (
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/nexuspdp/nexus/bundle"
)

var (
	capsOnce sync.Once
	capsVal  *ast.Capabilities
)

// Capabilities returns the capabilities policies compile against: every
// builtin of OPA (those OPA's Wasm runtime implements natively and those it
// leaves to the host, which the engine backs with OPA's Go implementations)
// plus [bundle.NexusBuiltins]. The returned value is shared: do not modify
// it.
func Capabilities() *ast.Capabilities {
	capsOnce.Do(func() {
		c := ast.CapabilitiesForThisVersion()
		for _, hb := range bundle.NexusBuiltins {
			c.Builtins = append(c.Builtins, &ast.Builtin{
				Name:        hb.Name,
				Decl:        hb.Decl,
				Description: hb.Description,
				// false for nexus' relationship builtins: they read
				// the store at the data revision that keys the cache.
				Nondeterministic: hb.Nondeterministic,
			})
		}
		capsVal = c
	})
	return capsVal
}
