// Command nexus is the nexus policy decision point: it compiles Rego to
// WebAssembly, stores relationships, and answers authorization checks for
// Envoy, Istio, nginx and applications.
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
		fmt.Fprintln(os.Stderr, "nexus:", err)
		os.Exit(cli.ExitCode(err))
	}
}
