//go:build wasip1

package main

import (
	"github.com/nexuspdp/nexus/plugin/internal/edge"
	"github.com/nexuspdp/nexus/plugin/internal/proxywasm"
)

func init() {
	proxywasm.SetHandler(edge.NewFilter(proxywasm.WasmHost{}))
}
