package bundle_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies holds the bundle format to what it is: a leaf that reads
// and writes archives. It must not need OPA's parser, compiler, loader or
// bundle packages, nor any other nexus package.
func TestDependencies(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not found (%v): cannot list dependencies", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := []string{
		"github.com/open-policy-agent/opa/v1/ast",
		"github.com/open-policy-agent/opa/v1/compile",
		"github.com/open-policy-agent/opa/v1/loader",
		"github.com/open-policy-agent/opa/v1/bundle",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if dep == f {
				t.Errorf("bundle depends on %s", dep)
			}
		}
		if strings.HasPrefix(dep, "github.com/nexuspdp/nexus/") && dep != "github.com/nexuspdp/nexus/bundle" {
			t.Errorf("bundle depends on %s: it must be a leaf", dep)
		}
	}
}
