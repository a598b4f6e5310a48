package archtest

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/nexuspdp/nexus"

// rule forbids packages matching from to import (directly or through
// others when deep is set) packages matching any of not.
type rule struct {
	name string
	from string   // a package pattern: "engine" or "engine/..."
	not  []string // patterns of what it must not import (its own subtree aside)
	// except are patterns of packages the rule leaves alone.
	except []string
	deep   bool // the transitive dependencies, not only direct imports
	// tests adds the packages' test imports to what the rule checks.
	tests bool
}

var rules = []rule{
	{name: "nothing in the product or its tests imports the examples", from: "...", except: []string{"examples/..."}, not: []string{"examples/..."}, tests: true},
	{name: "the shared types are a leaf", from: "api/...", not: []string{"..."}},
	{name: "the collector's tuning is a leaf", from: "internal/gctune", not: []string{"..."}},
	{name: "the port chooser is a leaf", from: "internal/freeport", not: []string{"..."}},
	{name: "the bundle format is a leaf", from: "bundle/...", not: []string{"...", "opa:ast", "opa:compile", "opa:loader", "opa:bundle"}, deep: true},
	{name: "the engine links neither the compiler nor the store", from: "engine/...", not: []string{"compiler/...", "datastore/...", "pdp/...", "extauthz/...", "opa:compile", "opa:loader", "opa:bundle"}, deep: true},
	{name: "the store knows no engine, core or server", from: "datastore", not: []string{"engine/...", "pdp/...", "extauthz/...", "compiler/...", "cluster/..."}, deep: true},
	{name: "the schema language knows no store", from: "datastore/schema/...", not: []string{"datastore", "datastore/builtins/...", "datastore/internal/...", "engine/...", "pdp/...", "extauthz/...", "cluster/...", "compiler/..."}, deep: true},
	{name: "the file check is a leaf", from: "datastore/internal/filecheck", not: []string{"..."}},
	{name: "the index format knows no store, check or schema", from: "datastore/internal/index", not: []string{"datastore", "datastore/internal/check", "datastore/schema/...", "datastore/builtins/...", "engine/...", "pdp/...", "extauthz/...", "cluster/...", "compiler/..."}, deep: true},
	{name: "the checks know no store", from: "datastore/internal/check", not: []string{"datastore", "datastore/builtins/...", "engine/...", "pdp/...", "extauthz/...", "cluster/...", "compiler/..."}, deep: true},
	{name: "the cluster knows no engine, core or server", from: "cluster/...", not: []string{"engine/...", "pdp/...", "extauthz/...", "compiler/..."}, deep: true},
	{name: "the decision core links no NATS", from: "pdp/...", not: []string{"cluster/..."}, deep: true},
	{name: "the server links no NATS", from: "extauthz/...", not: []string{"cluster/..."}, deep: true},
	{name: "the decision core knows no transport", from: "pdp/...", not: []string{"extauthz/...", "cmd/..."}, deep: true},
	{name: "the decision core names no policy", from: "pdp/...", not: []string{"defaults/..."}, deep: true},
	{name: "transports do not import each other: envoygrpc", from: "extauthz/internal/envoygrpc", not: transportsBut("envoygrpc")},
	{name: "transports do not import each other: forwardauth", from: "extauthz/internal/forwardauth", not: transportsBut("forwardauth")},
	{name: "transports do not import each other: appapi", from: "extauthz/internal/appapi", not: transportsBut("appapi")},
	{name: "transports do not import each other: admin", from: "extauthz/internal/admin", not: transportsBut("admin")},
	{name: "the status reports know no bundle downloader", from: "opacompat/status", not: []string{"opacompat/bundles"}, deep: true},
	{name: "internal/ holds leaf helpers and test support", from: "internal/...", except: []string{"internal/fixture/...", "internal/archtest"}, not: outsideInternal()},
	{name: "only the command composes the whole", from: "...", except: []string{"cmd/..."}, not: []string{"cmd/..."}},
}

// outsideInternal is every top-level directory of the product module but
// internal/ (other modules and hidden directories left out): the helpers
// in internal/ may import one another but nothing above them.
func outsideInternal() []string {
	entries, err := os.ReadDir("../..")
	if err != nil {
		panic(err)
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || name == "internal" || strings.HasPrefix(name, ".") {
			continue
		}
		if _, err := os.Stat(filepath.Join("../..", name, "go.mod")); err == nil {
			continue
		}
		out = append(out, name+"/...")
	}
	return out
}

func transportsBut(self string) []string {
	var out []string
	for _, t := range []string{"envoygrpc", "forwardauth", "appapi", "admin"} {
		if t != self {
			out = append(out, "extauthz/internal/"+t)
		}
	}
	return out
}

// opaPkgs names the OPA packages the engine must not link.
var opaPkgs = map[string]string{
	"opa:compile": "github.com/open-policy-agent/opa/v1/compile",
	"opa:loader":  "github.com/open-policy-agent/opa/v1/loader",
	"opa:bundle":  "github.com/open-policy-agent/opa/v1/bundle",
	"opa:ast":     "github.com/open-policy-agent/opa/v1/ast",
}

// match reports whether the import path p matches pattern, a path below
// the module ("engine", "engine/...", "..." for every package of the
// module) or an opaPkgs name.
func match(pattern, p string) bool {
	if full, ok := opaPkgs[pattern]; ok {
		return p == full
	}
	rel, ok := strings.CutPrefix(p, module+"/")
	if !ok {
		return false
	}
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == base || strings.HasPrefix(rel, base+"/")
	}
	return rel == pattern
}

type pkg struct {
	ImportPath   string
	Imports      []string
	Deps         []string
	TestImports  []string
	XTestImports []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH; the import rules cannot be read")
	}
	cmd := exec.Command(goTool, "list", "-deps=false", "-json", "./...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages; the module has more", len(pkgs))
	}
	return pkgs
}

func TestImportRules(t *testing.T) {
	pkgs := listPackages(t)
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			matched := 0
			for _, p := range pkgs {
				if !match(r.from, p.ImportPath) {
					continue
				}
				if slices.ContainsFunc(r.except, func(e string) bool { return match(e, p.ImportPath) }) {
					continue
				}
				matched++
				deps := p.Imports
				if r.deep {
					deps = p.Deps
				}
				if r.tests {
					deps = append(append(slices.Clone(deps), p.TestImports...), p.XTestImports...)
				}
				for _, d := range deps {
					if r.from != "..." && match(r.from, d) {
						continue // its own subtree
					}
					for _, n := range r.not {
						if match(n, d) {
							t.Errorf("%s imports %s", strings.TrimPrefix(p.ImportPath, module+"/"), d)
						}
					}
				}
			}
			if matched == 0 {
				t.Fatalf("no package matches %q: the rule checks nothing", r.from)
			}
		})
	}
}

// TestMatch holds the pattern matcher to its meaning, so that a rule
// cannot pass by matching nothing.
func TestMatch(t *testing.T) {
	tests := []struct {
		name, pattern, path string
		want                bool
	}{
		{"exact", "engine", module + "/engine", true},
		{"exact-not-child", "engine", module + "/engine/internal/wasmbin", false},
		{"subtree-root", "engine/...", module + "/engine", true},
		{"subtree-child", "engine/...", module + "/engine/internal/wasmbin", true},
		{"subtree-prefix-only", "engine/...", module + "/enginex", false},
		{"module", "...", module + "/api", true},
		{"outside-module", "...", "github.com/other/x", false},
		{"opa", "opa:compile", "github.com/open-policy-agent/opa/v1/compile", true},
		{"opa-other", "opa:compile", "github.com/open-policy-agent/opa/v1/ast", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := match(tt.pattern, tt.path); got != tt.want {
				t.Fatalf("match(%q, %q) = %v, want %v", tt.pattern, path.Base(tt.path), got, tt.want)
			}
		})
	}
}
