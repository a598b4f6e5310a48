package archtest

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// row is one line of ARCHITECTURE.md's table "Packages and what each may
// import": the packages it describes and what they may import.
type row struct {
	names []string // module-relative package paths; "x/..." for a subtree
	// allowed are the rows' names the packages may import; every means
	// the row allows any package of the module.
	allowed []string
	every   bool
}

var backticked = regexp.MustCompile("`([^`]+)`")

// readTable reads the import table from the markdown text of
// ARCHITECTURE.md. A row's first cell names its packages in backticks; a
// bare name after a path ("`forwardauth`" after
// "`extauthz/internal/envoygrpc`") is a sibling of that path. The third
// cell lists, in backticks before its first ";", the packages the row's
// packages may import; "everything" allows the whole module and
// "nothing of nexus" allows none.
func readTable(text string) ([]row, error) {
	_, after, ok := strings.Cut(text, "## Packages and what each may import")
	if !ok {
		return nil, errNoTable
	}
	var rows []row
	for _, line := range strings.Split(after, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "## ") {
			break
		}
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") || strings.HasPrefix(line, "| package ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 3 {
			continue
		}
		var r row
		dir := ""
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			n := m[1]
			if !strings.Contains(n, "/") && dir != "" {
				n = dir + "/" + n
			} else if i := strings.LastIndex(strings.TrimSuffix(n, "/..."), "/"); i > 0 {
				dir = n[:i]
			}
			r.names = append(r.names, n)
		}
		may, _, _ := strings.Cut(cells[2], ";")
		r.every = strings.TrimSpace(may) == "everything"
		for _, m := range backticked.FindAllStringSubmatch(may, -1) {
			r.allowed = append(r.allowed, m[1])
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, errNoTable
	}
	return rows, nil
}

type tableError string

func (e tableError) Error() string { return string(e) }

const errNoTable = tableError("ARCHITECTURE.md has no import table")

// rowOf returns the name and row that describe rel, a module-relative
// package path: the row whose name is rel itself or the longest of the
// names whose subtree holds rel ("x/..." names a subtree, and a plain
// "x" holds its subpackages that no row names).
func rowOf(rows []row, rel string) (string, *row) {
	best, bestLen := "", -1
	var bestRow *row
	for i := range rows {
		for _, n := range rows[i].names {
			base := strings.TrimSuffix(n, "/...")
			if (rel == base || strings.HasPrefix(rel, base+"/")) && len(base) > bestLen {
				best, bestLen, bestRow = n, len(base), &rows[i]
			}
		}
	}
	return best, bestRow
}

// TestArchitectureTable holds ARCHITECTURE.md's import table to the code:
// every package of the module has a row, every row names packages that
// exist, and every import between the module's packages is one the
// importing package's row allows (its own row, or a row its third cell
// names). A package may import its own subpackages.
func TestArchitectureTable(t *testing.T) {
	text, err := os.ReadFile("../../ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := readTable(string(text))
	if err != nil {
		t.Fatal(err)
	}
	pkgs := listPackages(t)
	rels := map[string]bool{}
	for _, p := range pkgs {
		rels[strings.TrimPrefix(p.ImportPath, module+"/")] = true
	}
	for _, r := range rows {
		for _, n := range r.names {
			base := strings.TrimSuffix(n, "/...")
			found := false
			for rel := range rels {
				if rel == base || strings.HasPrefix(rel, base+"/") {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("ARCHITECTURE.md names %q, which is no package of the module", n)
			}
		}
		for _, a := range r.allowed {
			if name, _ := rowOf(rows, strings.TrimSuffix(a, "/...")); name == "" {
				t.Errorf("ARCHITECTURE.md allows %q, which no row describes", a)
			}
		}
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(p.ImportPath, module+"/")
		name, r := rowOf(rows, rel)
		if r == nil {
			t.Errorf("package %s has no row in ARCHITECTURE.md's import table", rel)
			continue
		}
		if r.every {
			continue
		}
		for _, imp := range p.Imports {
			irel, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			iname, _ := rowOf(rows, irel)
			if base := strings.TrimSuffix(name, "/..."); strings.HasPrefix(irel, base+"/") {
				continue // its own subpackages
			}
			if iname == name || slices.Contains(r.names, iname) || slices.Contains(r.allowed, iname) {
				continue
			}
			t.Errorf("%s imports %s, which its row (%s) does not allow", rel, irel, name)
		}
	}
}

// TestReadTable holds the table reader to its meaning on a small table.
func TestReadTable(t *testing.T) {
	const md = "# A\n## Packages and what each may import\n\n| package | what | may import |\n|---|---|---|\n" +
		"| `a` | x | nothing of nexus |\n" +
		"| `x/internal/p`, `q` | y | `a`, `b/...`; never `c` |\n" +
		"| `cmd/z` | z | everything; nothing imports it |\n\n## Next\n| `no` | n | `a` |\n"
	rows, err := readTable(md)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("read %d rows, want 3: %+v", len(rows), rows)
	}
	if !slices.Equal(rows[1].names, []string{"x/internal/p", "x/internal/q"}) {
		t.Errorf("names = %q", rows[1].names)
	}
	if !slices.Equal(rows[1].allowed, []string{"a", "b/..."}) {
		t.Errorf("allowed = %q, want the names before ';'", rows[1].allowed)
	}
	if len(rows[0].allowed) != 0 || rows[0].every || !rows[2].every {
		t.Errorf("rows = %+v", rows)
	}
	if n, _ := rowOf(rows, "x/internal/q/sub"); n != "x/internal/q" {
		t.Errorf("rowOf(x/internal/q/sub) = %q", n)
	}
	if n, _ := rowOf(rows, "elsewhere"); n != "" {
		t.Errorf("rowOf(elsewhere) = %q, want none", n)
	}
	if _, err := readTable("# no table"); err == nil {
		t.Error("a text without the table was read")
	}
}
