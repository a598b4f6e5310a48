// Command nexus-bench is the benchmark lab of nexus: it generates data
// sets with known answers, starts nexus (the binary --nexus names), an
// allow-only nexus, OPA, OpenFGA, nginx and Caddy, gates them, measures
// latency and capacity, and writes reports. It is a module of its own
// (github.com/nexuspdp/nexus/bench), so none of it is linked into nexus.
//
//	nexus-bench run --nexus bin/nexus --profile small --out bench-out
//	nexus-bench gate --target 127.0.0.1:9191 --file bench-out/data/gate-rbac.ndjson
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nexuspdp/nexus/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "nexus-bench:", err)
		os.Exit(cli.ExitCode(err))
	}
}
