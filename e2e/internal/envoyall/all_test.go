package envoyall

import (
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestAllPackages fails when all.go is stale: every package of the
// go-control-plane version in go.mod must be imported, so that a typed_config
// of any Envoy extension resolves. Fix with `go generate ./internal/envoyall`.
func TestAllPackages(t *testing.T) {
	const mod = "github.com/envoyproxy/go-control-plane/envoy"
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod).Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	root := strings.TrimSpace(string(out))
	// Every folder below the module root with a non-test Go file is a
	// package, as gen.sh counts them.
	seen := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		dir := filepath.Dir(path)
		if dir != root {
			rel, _ := filepath.Rel(root, dir)
			seen[mod+"/"+filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Collect(maps.Keys(seen))
	f, err := parser.ParseFile(token.NewFileSet(), "all.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, im := range f.Imports {
		p, err := strconv.Unquote(im.Path.Value)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p)
	}
	slices.Sort(want)
	slices.Sort(got)
	if len(want) < 100 {
		t.Fatalf("go list found only %d packages", len(want))
	}
	for _, p := range want {
		if _, found := slices.BinarySearch(got, p); !found {
			t.Errorf("all.go does not import %s (run go generate)", p)
		}
	}
	for _, p := range got {
		if _, found := slices.BinarySearch(want, p); !found {
			t.Errorf("all.go imports %s, which the module no longer has", p)
		}
	}
}
