package engine_test

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDependencies holds the engine to running bundles: it reads them
// through package bundle and must not pull in nexus' compiler nor OPA's
// compiler, loader or bundle packages (with them, every binary that
// evaluates policies would carry the toolchain that builds them).
func TestDependencies(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not found (%v): cannot list dependencies", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := regexp.MustCompile(`^github\.com/nexuspdp/nexus/compiler$|^github\.com/open-policy-agent/opa/v1/(compile|loader|bundle)$`)
	deps := strings.Fields(string(out))
	for _, dep := range deps {
		if forbidden.MatchString(dep) {
			t.Errorf("engine depends on %s", dep)
		}
	}
	if !slices.Contains(deps, "github.com/nexuspdp/nexus/bundle") {
		t.Errorf("engine does not depend on package bundle: is go list listing the right package?\n%s", out)
	}
}
