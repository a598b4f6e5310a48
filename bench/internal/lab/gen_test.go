package lab

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/api"
)

func genSmall(t *testing.T, seed uint64) (string, Manifest) {
	t.Helper()
	dir := t.TempDir()
	m, err := Generate(context.Background(), GenConfig{Profile: Profiles["small"], Seed: seed, Out: dir})
	if err != nil {
		t.Fatal(err)
	}
	return dir, m
}

func readAll(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

func TestGenerateDeterministic(t *testing.T) {
	a, _ := genSmall(t, 7)
	b, _ := genSmall(t, 7)
	c, _ := genSmall(t, 8)
	fa, fb, fc := readAll(t, a), readAll(t, b), readAll(t, c)
	if len(fa) != 3+len(GateProfiles) {
		t.Fatalf("files = %d, want %d", len(fa), 3+len(GateProfiles))
	}
	for name, ba := range fa {
		if !bytes.Equal(ba, fb[name]) {
			t.Errorf("%s differs between two runs with seed 7", name)
		}
	}
	for _, name := range []string{TuplesFile, GateFile("rbac"), GateFile("rebac3")} {
		if bytes.Equal(fa[name], fc[name]) {
			t.Errorf("%s is the same with seeds 7 and 8", name)
		}
	}
}

func TestGenerateCounts(t *testing.T) {
	dir, m := genSmall(t, 1)
	want := Counts{
		Tenants: 11, Users: 1750, Groups: 22, Folders: 1830, Files: 10780, ResourceInstances: 12610,
		ParentTuples: 12000, RoleAssignments: 2223, TenantRoles: 1000, ViewerGrants: 1223, GroupMembers: 220, Tuples: 14443,
	}
	if m.Counts != want {
		t.Fatalf("counts = %+v, want %+v", m.Counts, want)
	}
	f, err := os.Open(filepath.Join(dir, TuplesFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	var byRel = map[string]int64{}
	users, objects := map[string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			continue
		}
		tp, err := api.ParseTuple(l)
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if seen[l] {
			t.Fatalf("duplicate tuple %s", l)
		}
		seen[l] = true
		byRel[tp.Object.Type+"#"+tp.Relation]++
		if tp.Subject.Type == "user" {
			users[tp.Subject.ID] = true
		}
		if tp.Object.Type == "file" || tp.Object.Type == "folder" {
			objects[tp.Object.Type+":"+tp.Object.ID] = true
		}
		if tp.Subject.Type == "folder" {
			objects["folder:"+tp.Subject.ID] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if int64(len(seen)) != want.Tuples {
		t.Errorf("tuples = %d, want %d", len(seen), want.Tuples)
	}
	if got := byRel["file#parent"] + byRel["folder#parent"]; got != want.ParentTuples {
		t.Errorf("parent tuples = %d, want %d", got, want.ParentTuples)
	}
	if got := byRel["tenant#admin"] + byRel["tenant#editor"] + byRel["tenant#viewer"]; got != want.TenantRoles {
		t.Errorf("tenant roles = %d, want %d", got, want.TenantRoles)
	}
	if got := byRel["file#viewer"] + byRel["folder#viewer"]; got != want.ViewerGrants {
		t.Errorf("viewer grants = %d, want %d", got, want.ViewerGrants)
	}
	if len(objects) != want.ResourceInstances {
		t.Errorf("resource instances = %d, want %d", len(objects), want.ResourceInstances)
	}
	if len(users) > want.Users || len(users) < want.Users*85/100 {
		t.Errorf("users in tuples = %d, want about %d", len(users), want.Users)
	}
	// gate files: 1,000 checks each, half allowed
	for _, p := range GateProfiles {
		cs, err := ReadChecksFile(filepath.Join(dir, GateFile(p)))
		if err != nil {
			t.Fatal(err)
		}
		allowed := 0
		for _, c := range cs {
			if c.Allow {
				allowed++
			}
		}
		if len(cs) != GateChecks || allowed != GateChecks/2 {
			t.Errorf("%s: %d checks, %d allowed; want %d and %d", p, len(cs), allowed, GateChecks, GateChecks/2)
		}
	}
}

func TestLargeProfileCounts(t *testing.T) {
	p := Profiles["large"]
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if c := p.Counts(); c.Tuples != 20_000_000 {
		t.Fatalf("large: %d tuples, want 20,000,000", c.Tuples)
	}
}

func TestProfileValidate(t *testing.T) {
	good := Profiles["small"]
	tests := []struct {
		name   string
		mutate func(*Profile)
	}{
		{"one tenant", func(p *Profile) { p.Tenants = 1 }},
		{"no rbac users", func(p *Profile) { p.RBACUsers = 0 }},
		{"no rebac users", func(p *Profile) { p.RBACUsers = p.Users }},
		{"fewer files than chains", func(p *Profile) { p.Files = p.Chains - 1 }},
		{"too many roles", func(p *Profile) { p.RoleAssignments = p.RBACUsers * p.Tenants }},
		{"too many grants", func(p *Profile) { p.Grants[0] = 1_000_000 }},
		{"no depth-2 grants", func(p *Profile) { p.Grants[2] = 0 }},
		{"too many members", func(p *Profile) { p.MembersPerGroup = p.Users }},
		{"one class", func(p *Profile) { p.Classes = 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := good
			tt.mutate(&p)
			if _, err := Generate(context.Background(), GenConfig{Profile: p, Out: t.TempDir()}); err == nil {
				t.Fatal("Generate accepted an invalid profile")
			}
		})
	}
}

// TestGrantsByConstruction checks the invariants the gate's expected
// decisions rest on, on the small profile and on a sample of the large
// one: no user holds two grants on one chain, grants stay in their
// class, and depths follow the counts.
func TestGrantsByConstruction(t *testing.T) {
	for _, name := range []string{"small", "large"} {
		t.Run(name, func(t *testing.T) {
			g, err := newGen(Profiles[name], 3)
			if err != nil {
				t.Fatal(err)
			}
			n := g.p.grantTotal()
			step := 1
			if n > 200_000 {
				step = n / 200_000
			}
			type uc struct{ u, c int }
			held := map[uc]int{}
			depths := [4]int{}
			for j := 0; j < n; j += step {
				d, c, u, f := g.grant(j)
				depths[d]++
				if c%g.p.Classes != u%g.p.Classes {
					t.Fatalf("grant %d: user class %d on chain class %d", j, u%g.p.Classes, c%g.p.Classes)
				}
				if u < 0 || u >= g.nr {
					t.Fatalf("grant %d: ReBAC user %d out of range", j, u)
				}
				if d == 0 && (f%g.p.Chains != c || f >= g.p.Files) {
					t.Fatalf("grant %d: file %d not in chain %d", j, f, c)
				}
				if prev, ok := held[uc{u, c}]; ok {
					t.Fatalf("grants %d and %d give user %d two grants on chain %d", prev, j, u, c)
				}
				held[uc{u, c}] = j
			}
			if step == 1 && depths != g.p.Grants {
				t.Fatalf("depths = %v, want %v", depths, g.p.Grants)
			}
		})
	}
}

func FuzzReadChecks(f *testing.F) {
	f.Add([]byte(`{"user":"u1","action":"read","type":"file","id":"f1","tenant":"t0","allow":true}` + "\n"))
	f.Add([]byte("{}\n"))
	f.Add([]byte(`{"user":"u1","action":"fly","type":"file","id":"f1","tenant":"t0"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cs, err := ReadChecks(bytes.NewReader(b))
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := WriteChecks(&buf, cs); err != nil {
			t.Fatal(err)
		}
		again, err := ReadChecks(&buf)
		if err != nil || len(again) != len(cs) {
			t.Fatalf("round trip: %v, %d checks, want %d", err, len(again), len(cs))
		}
		for i := range cs {
			if cs[i] != again[i] {
				t.Fatalf("check %d: %+v became %+v", i, cs[i], again[i])
			}
		}
	})
}
