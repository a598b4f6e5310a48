package main

import (
	"fmt"

	"github.com/nexuspdp/nexus/internal/cli"
)

// denied is the error of a deny under --fail-deny (exit 3).
func denied(format string, args ...any) error {
	return cli.WithExit(cli.ExitDenied, fmt.Errorf(format, args...))
}
