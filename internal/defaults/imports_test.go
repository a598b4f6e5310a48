package defaults_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNothingImportsExamples keeps examples/ what users copy: no package
// of the module, nor its tests, may import a package under examples/.
func TestNothingImportsExamples(t *testing.T) {
	const module = "github.com/nexuspdp/nexus"
	out, err := exec.Command("go", "list", "-f",
		"{{.ImportPath}}{{range .Imports}} {{.}}{{end}}{{range .TestImports}} {{.}}{{end}}{{range .XTestImports}} {{.}}{{end}}",
		module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		if strings.HasPrefix(pkg, module+"/examples/") {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			if imp == module+"/examples" || strings.HasPrefix(imp, module+"/examples/") {
				t.Errorf("%s imports %s: what the product needs belongs in internal/defaults", pkg, imp)
			}
		}
	}
}
