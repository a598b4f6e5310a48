package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// Profile sizes a generated data set. Every count is exact: the
// generator derives each tuple from its index, so nothing but the
// parameters is held in memory.
type Profile struct {
	// Name is "small" or "large".
	Name string `json:"name"`
	// Tenants is the number of tenants (t0, t1, ...).
	Tenants int `json:"tenants"`
	// Users is the number of users (u0, u1, ...); the first RBACUsers
	// hold tenant roles, the rest hold ReBAC viewer grants.
	Users     int `json:"users"`
	RBACUsers int `json:"rbac_users"`
	// Chains is the number of folder chains: three folders, one child
	// per parent (d{c}-3 > d{c}-2 > d{c}-1), in tenant c mod Tenants.
	Chains int `json:"chains"`
	// Files is the number of files; file f's parent is d{f mod Chains}-1.
	Files int `json:"files"`
	// RoleAssignments is the number of tenant role tuples
	// (tenant:t#admin|editor|viewer@user:u).
	RoleAssignments int `json:"role_assignments"`
	// Grants[k] is the number of viewer tuples placed k levels above a
	// file: on the file itself (0), or on its folder 1, 2 or 3 levels up.
	Grants [4]int `json:"grants"`
	// GroupsPerTenant and MembersPerGroup size the groups (g{t}-{k},
	// members drawn from the tenant's users). No permission reads them.
	GroupsPerTenant int `json:"groups_per_tenant"`
	MembersPerGroup int `json:"members_per_group"`
	// Classes partitions ReBAC users and chains: users of class m only
	// hold grants on chains of class m, which makes denials known by
	// construction.
	Classes int `json:"classes"`
}

// Profiles are the data sets of Permit's published Nexus PDP benchmark.
var Profiles = map[string]Profile{
	// small: 1,750 users, 12,610 resource instances (1,830 folders and
	// 10,780 files), 12,000 parent tuples, 2,223 role assignments
	// (1,000 tenant roles and 1,223 viewer grants), 11 tenants, and 220
	// group memberships: 14,443 tuples in all.
	"small": {
		Name: "small", Tenants: 11, Users: 1750, RBACUsers: 900, Chains: 610, Files: 10780,
		RoleAssignments: 1000, Grants: [4]int{600, 208, 208, 207},
		GroupsPerTenant: 2, MembersPerGroup: 10, Classes: 7,
	},
	// large: 20,000,000 tuples on the same types: 15,000,000 files in
	// 850,000 chains (16,700,000 parent tuples), 1,500,000 tenant roles,
	// 1,700,000 viewer grants and 100,000 group memberships.
	"large": {
		Name: "large", Tenants: 100, Users: 2_500_000, RBACUsers: 1_400_000, Chains: 850_000, Files: 15_000_000,
		RoleAssignments: 1_500_000, Grants: [4]int{800_000, 300_000, 300_000, 300_000},
		GroupsPerTenant: 20, MembersPerGroup: 50, Classes: 7,
	},
}

// Validate rejects parameters the construction cannot honour.
func (p Profile) Validate() error {
	switch {
	case p.Tenants < 2:
		return fmt.Errorf("%w: at least 2 tenants", ErrProfile)
	case p.RBACUsers < 1 || p.Users-p.RBACUsers < p.Classes:
		return fmt.Errorf("%w: need RBAC users and at least Classes ReBAC users", ErrProfile)
	case p.Classes < 2 || p.Chains < p.Classes:
		return fmt.Errorf("%w: need at least 2 classes and a chain per class", ErrProfile)
	case p.Files < p.Chains:
		return fmt.Errorf("%w: need at least one file per chain", ErrProfile)
	case p.RoleAssignments < p.RBACUsers/2 || p.RoleAssignments > p.RBACUsers*(p.Tenants-1):
		return fmt.Errorf("%w: role assignments out of range", ErrProfile)
	case (p.grantTotal()+p.Chains-1)/p.Chains > (p.Users-p.RBACUsers)/p.Classes:
		return fmt.Errorf("%w: too many grants per chain for the ReBAC users", ErrProfile)
	case p.Chains < p.Tenants:
		return fmt.Errorf("%w: need a chain per tenant", ErrProfile)
	case p.MembersPerGroup > p.Users/p.Tenants:
		return fmt.Errorf("%w: more group members than users per tenant", ErrProfile)
	}
	for _, g := range p.Grants {
		if g < 1 {
			return fmt.Errorf("%w: every depth needs grants", ErrProfile)
		}
	}
	return nil
}

// Counts are the sizes of a generated data set.
type Counts struct {
	Tenants           int   `json:"tenants"`
	Users             int   `json:"users"`
	Groups            int   `json:"groups"`
	Folders           int   `json:"folders"`
	Files             int   `json:"files"`
	ResourceInstances int   `json:"resource_instances"`
	ParentTuples      int64 `json:"parent_tuples"`
	RoleAssignments   int64 `json:"role_assignments"`
	TenantRoles       int64 `json:"tenant_roles"`
	ViewerGrants      int64 `json:"viewer_grants"`
	GroupMembers      int64 `json:"group_members"`
	Tuples            int64 `json:"tuples"`
}

// Counts returns the sizes Generate writes for p.
func (p Profile) Counts() Counts {
	c := Counts{
		Tenants: p.Tenants, Users: p.Users, Groups: p.Tenants * p.GroupsPerTenant,
		Folders: 3 * p.Chains, Files: p.Files,
		ParentTuples: int64(2*p.Chains + p.Files), TenantRoles: int64(p.RoleAssignments),
		ViewerGrants: int64(p.grantTotal()), GroupMembers: int64(p.Tenants * p.GroupsPerTenant * p.MembersPerGroup),
	}
	c.ResourceInstances = c.Folders + c.Files
	c.RoleAssignments = c.TenantRoles + c.ViewerGrants
	c.Tuples = c.ParentTuples + c.RoleAssignments + c.GroupMembers
	return c
}

func (p Profile) grantTotal() int { return p.Grants[0] + p.Grants[1] + p.Grants[2] + p.Grants[3] }

// GateProfiles are the check profiles, one gate file each.
var GateProfiles = []string{"rbac", "rebac0", "rebac1", "rebac2", "rebac3"}

// GateChecks is the number of checks in one gate file.
const GateChecks = 1000

// Manifest describes a generated directory (manifest.json).
type Manifest struct {
	Profile Profile           `json:"profile"`
	Seed    uint64            `json:"seed"`
	Counts  Counts            `json:"counts"`
	Files   map[string]string `json:"files"`
}

// Data set file names inside the output directory.
const (
	SchemaFile   = "schema.yaml"
	TuplesFile   = "tuples.txt"
	ManifestFile = "manifest.json"
)

// GateFile is the name of a profile's gate file.
func GateFile(profile string) string { return "gate-" + profile + ".ndjson" }

// Schema is the data sets' schema: the drive's without its tenancy keys.
// The data sets hold no resource's tenant (a check names it, as Permit's
// benchmark does), so files and folders are judged in the tenant a check
// names rather than denied for having none.
func Schema() []byte {
	var out []byte
	for _, line := range bytes.SplitAfter(driveSchema, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("tenancy:")) {
			out = append(out, line...)
		}
	}
	return out
}

// GenConfig configures Generate.
type GenConfig struct {
	// Profile is the data set; its zero value is rejected.
	Profile Profile
	// Seed makes the data set; the same seed gives the same bytes.
	Seed uint64
	// Out is the directory to write into (created if missing).
	Out string
}

// Generate writes the schema, the tuples (text syntax, streamed), one
// gate file per check profile and manifest.json into cfg.Out.
func Generate(ctx context.Context, cfg GenConfig) (Manifest, error) {
	g, err := newGen(cfg.Profile, cfg.Seed)
	if err != nil {
		return Manifest{}, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return Manifest{}, fmt.Errorf("bench: %w", err)
	}
	m := Manifest{Profile: cfg.Profile, Seed: cfg.Seed, Counts: cfg.Profile.Counts(), Files: map[string]string{
		"schema": SchemaFile, "tuples": TuplesFile,
	}}
	if err := writeFileAtomic(filepath.Join(cfg.Out, SchemaFile), func(w io.Writer) error {
		_, err := w.Write(Schema())
		return err
	}); err != nil {
		return m, err
	}
	var n int64
	if err := writeFileAtomic(filepath.Join(cfg.Out, TuplesFile), func(w io.Writer) error {
		var err error
		n, err = g.writeTuples(ctx, w)
		return err
	}); err != nil {
		return m, err
	}
	if n != m.Counts.Tuples {
		return m, fmt.Errorf("bench: wrote %d tuples, expected %d", n, m.Counts.Tuples)
	}
	for _, prof := range GateProfiles {
		checks := g.gate(prof)
		name := GateFile(prof)
		m.Files["gate-"+prof] = name
		if err := writeFileAtomic(filepath.Join(cfg.Out, name), func(w io.Writer) error { return WriteChecks(w, checks) }); err != nil {
			return m, err
		}
	}
	err = writeFileAtomic(filepath.Join(cfg.Out, ManifestFile), func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(m)
	})
	return m, err
}

// writeFileAtomic writes path through a temporary file renamed into place.
func writeFileAtomic(path string, fill func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("bench: %w", err)
	}
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := fill(bw); err != nil {
		tmp.Close()
		return fmt.Errorf("bench: writing %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		tmp.Close()
		return fmt.Errorf("bench: writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// gen derives every object and tuple of a data set from its index.
type gen struct {
	p    Profile
	seed uint64
	nr   int // ReBAC users
}

func newGen(p Profile, seed uint64) (*gen, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &gen{p: p, seed: seed, nr: p.Users - p.RBACUsers}, nil
}

// mix is splitmix64 over the seed, a stream tag and an index: the
// deterministic randomness of the generator.
func (g *gen) mix(tag, i uint64) uint64 {
	z := g.seed ^ (tag * 0x9e3779b97f4a7c15) ^ (i * 0xbf58476d1ce4e5b9)
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

const (
	tagRole = iota + 1
	tagGrantChain
	tagGrantUser
	tagGrantFile
	tagGroup
	tagZipf
)

var roleNames = [3]string{"admin", "editor", "viewer"}

// roleActions are the file actions each role's grant allows (schema.yaml).
var roleActions = map[string][]string{
	"admin":  {"read", "write", "delete"},
	"editor": {"read", "write"},
	"viewer": {"read"},
}

func tenantOfChain(p Profile, c int) int { return c % p.Tenants }

// assignment returns role assignment j: user, tenant and role. Users get
// their first role in their home tenant (user mod Tenants), further ones
// in the following tenants.
func (g *gen) assignment(j int) (user, tenant int, role string) {
	user = j % g.p.RBACUsers
	round := j / g.p.RBACUsers
	tenant = (user + round) % g.p.Tenants
	return user, tenant, roleNames[g.mix(tagRole, uint64(j))%3]
}

// rolesOf returns the tenant roles of RBAC user u by tenant.
func (g *gen) rolesOf(u int) map[int]string {
	out := map[int]string{}
	for j := u; j < g.p.RoleAssignments; j += g.p.RBACUsers {
		_, t, r := g.assignment(j)
		out[t] = r
	}
	return out
}

// classSize returns how many ReBAC users have class m.
func (g *gen) classSize(m int) int {
	return (g.nr - m + g.p.Classes - 1) / g.p.Classes
}

// filesIn returns how many files chain c holds.
func (g *gen) filesIn(c int) int { return (g.p.Files - c + g.p.Chains - 1) / g.p.Chains }

// grant returns viewer grant j: its depth, chain, user (a ReBAC user
// index) and, for depth 0, the file. Grants walk the chains in a seeded
// order; the r-th grant on a chain goes to the r-th user after a seeded
// offset in the chain's class, so no user holds two grants on one chain.
func (g *gen) grant(j int) (depth, chain, user, file int) {
	k := j
	for depth = 0; depth < 3 && k >= g.p.Grants[depth]; depth++ {
		k -= g.p.Grants[depth]
	}
	C := g.p.Chains
	round := j / C
	// a seeded rotation of the chains: stride coprime with C
	stride := int(g.mix(tagGrantChain, 0)%uint64(C)) | 1
	for gcd(stride, C) != 1 {
		stride += 2
	}
	off := int(g.mix(tagGrantChain, 1) % uint64(C))
	chain = int((int64(j%C)*int64(stride) + int64(off)) % int64(C))
	m := chain % g.p.Classes
	size := g.classSize(m)
	idx := (int(g.mix(tagGrantUser, uint64(chain))%uint64(size)) + round) % size
	user = m + g.p.Classes*idx
	file = -1
	if depth == 0 {
		file = chain + C*int(g.mix(tagGrantFile, uint64(j))%uint64(g.filesIn(chain)))
	}
	return depth, chain, user, file
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func userID(i int) string      { return "u" + strconv.Itoa(i) }
func tenantID(i int) string    { return "t" + strconv.Itoa(i) }
func fileID(i int) string      { return "f" + strconv.Itoa(i) }
func folderID(c, k int) string { return "d" + strconv.Itoa(c) + "-" + strconv.Itoa(k) }

// rebacUser is the global index of ReBAC user index r.
func (g *gen) rebacUser(r int) int { return g.p.RBACUsers + r }

// writeTuples streams every tuple in the text syntax.
func (g *gen) writeTuples(ctx context.Context, w io.Writer) (int64, error) {
	var n int64
	buf := make([]byte, 0, 128)
	line := func(parts ...string) error {
		buf = buf[:0]
		for _, s := range parts {
			buf = append(buf, s...)
		}
		buf = append(buf, '\n')
		n++
		_, err := w.Write(buf)
		return err
	}
	p := g.p
	if err := line("# nexus bench data set: profile ", p.Name, ", seed ", strconv.FormatUint(g.seed, 10)); err != nil {
		return 0, err
	}
	n = 0
	for c := 0; c < p.Chains; c++ {
		if c%4096 == 0 && ctx.Err() != nil {
			return n, ctx.Err()
		}
		if err := line("folder:", folderID(c, 1), "#parent@folder:", folderID(c, 2)); err != nil {
			return n, err
		}
		if err := line("folder:", folderID(c, 2), "#parent@folder:", folderID(c, 3)); err != nil {
			return n, err
		}
	}
	for f := 0; f < p.Files; f++ {
		if f%4096 == 0 && ctx.Err() != nil {
			return n, ctx.Err()
		}
		if err := line("file:", fileID(f), "#parent@folder:", folderID(f%p.Chains, 1)); err != nil {
			return n, err
		}
	}
	for j := 0; j < p.RoleAssignments; j++ {
		u, t, r := g.assignment(j)
		if err := line("tenant:", tenantID(t), "#", r, "@user:", userID(u)); err != nil {
			return n, err
		}
	}
	for j := 0; j < p.grantTotal(); j++ {
		if j%4096 == 0 && ctx.Err() != nil {
			return n, ctx.Err()
		}
		d, c, u, f := g.grant(j)
		obj := "file:" + fileID(f)
		if d > 0 {
			obj = "folder:" + folderID(c, d)
		}
		if err := line(obj, "#viewer@user:", userID(g.rebacUser(u))); err != nil {
			return n, err
		}
	}
	for t := 0; t < p.Tenants; t++ {
		// members: users of the tenant (u mod Tenants == t), spread by seed
		home := (p.Users - t + p.Tenants - 1) / p.Tenants
		for k := 0; k < p.GroupsPerTenant; k++ {
			gid := "g" + strconv.Itoa(t) + "-" + strconv.Itoa(k)
			start := int(g.mix(tagGroup, uint64(t*p.GroupsPerTenant+k)) % uint64(home))
			for i := 0; i < p.MembersPerGroup; i++ {
				u := t + p.Tenants*((start+i)%home)
				if err := line("group:", gid, "#member@user:", userID(u)); err != nil {
					return n, err
				}
			}
		}
	}
	return n, nil
}
