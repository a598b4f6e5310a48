package lab

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
)

// ZipfConfig describes a realistic workload: many distinct checks whose
// users and resources are drawn with a Zipf distribution, so that a few
// users and files are asked about often and most rarely, as in a real
// application.
type ZipfConfig struct {
	// S is the skew of the Zipf distribution (P(rank k) ∝ k^-S); it must
	// be above 1. Zero means DefaultZipfS.
	S float64
	// Distinct is the number of distinct checks to draw; zero means
	// DefaultZipfDistinct.
	Distinct int
	// Seed makes the workload; the same seed and data set give the same
	// checks. Zero means the data set's seed.
	Seed uint64
}

// Defaults of the Zipf workload.
const (
	DefaultZipfS        = 1.1
	DefaultZipfDistinct = 100_000
)

// Validate fills defaults and rejects nonsense.
func (c *ZipfConfig) Validate() error {
	if c.S == 0 {
		c.S = DefaultZipfS
	}
	if c.Distinct == 0 {
		c.Distinct = DefaultZipfDistinct
	}
	if !(c.S > 1) || c.S > 10 {
		return fmt.Errorf("%w: Zipf skew %v: want above 1 and at most 10", ErrConfig, c.S)
	}
	if c.Distinct < 1 {
		return fmt.Errorf("%w: Zipf workload needs at least one check", ErrConfig)
	}
	return nil
}

// ZipfFile is the name of the Zipf workload file for skew s.
func ZipfFile(s float64) string {
	return "zipf-s" + strconv.FormatFloat(s, 'f', -1, 64) + ".ndjson"
}

// GenerateZipf draws the Zipf workload of the data set in dir (written by
// Generate with the same profile) and writes it into dir as ZipfFile. It
// returns the file's path. Each line is a distinct check with its
// expected decision and N, the number of times it was drawn: the load
// generator draws checks in proportion to N, which reproduces the Zipf
// distribution of the draw.
func GenerateZipf(ctx context.Context, dir string, cfg ZipfConfig) (string, error) {
	if err := cfg.Validate(); err != nil {
		return "", err
	}
	m, err := ReadManifest(dir)
	if err != nil {
		return "", err
	}
	if cfg.Seed == 0 {
		cfg.Seed = m.Seed
	}
	g, err := newGen(m.Profile, m.Seed)
	if err != nil {
		return "", err
	}
	checks, err := g.zipf(ctx, cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, ZipfFile(cfg.S))
	err = writeFileAtomic(path, func(w io.Writer) error { return WriteChecks(w, checks) })
	return path, err
}

// Shares of the Zipf workload's draws.
const (
	// zipfGrounded is the share of draws on a resource the user may
	// reach: a tenant where the user holds a role, or a file under one
	// of the user's grants. The others pick a tenant or file at random,
	// and are mostly denied.
	zipfGrounded = 0.8
	// zipfMaxDraws bounds the draws per distinct check wanted.
	zipfMaxDraws = 200
)

// grantRef is one viewer grant as the Zipf workload needs it.
type grantRef struct {
	user, depth, file int
}

// perm is a seeded permutation of [0, n): popularity rank to index.
type perm struct{ n, stride, off uint64 }

func newPerm(n int, a, b uint64) perm {
	p := perm{n: uint64(n), off: b % uint64(n)}
	p.stride = (a % uint64(n)) | 1
	for gcd(int(p.stride), n) != 1 {
		p.stride += 2
	}
	return p
}

func (p perm) at(k uint64) int { return int((k%p.n*p.stride + p.off) % p.n) }

// zipf draws distinct checks until cfg.Distinct are found. Users are
// ranked by a seeded permutation and drawn with Zipf(S); for an RBAC user
// the tenant is one where the user holds a role (zipfGrounded of the
// draws) or any tenant, for a ReBAC user the file is under one of the
// user's grants (zipfGrounded) or anywhere; the chain within a tenant and
// the file within a chain are drawn with Zipf(S) over seeded ranks too.
// The expected decision is computed from the generator's construction:
// RBAC users hold tenant roles and no relationships, ReBAC users hold
// viewer grants and no roles, so a check is allowed exactly when the
// user's role in the tenant grants the action, or the action is read and
// the user holds a viewer grant on the file or a folder above it.
func (g *gen) zipf(ctx context.Context, cfg ZipfConfig) ([]Check, error) {
	p := g.p
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x7a697066))
	// Zipf samplers per size, built once (NewZipf precomputes constants).
	zs := map[int]*rand.Zipf{}
	draw := func(n int) uint64 {
		if n <= 1 {
			return 0
		}
		s := zs[n]
		if s == nil {
			s = rand.NewZipf(rng, cfg.S, 1, uint64(n-1))
			zs[n] = s
		}
		return s.Uint64()
	}
	users := newPerm(p.Users, g.mix(tagZipf, 1), g.mix(tagZipf, 2))
	chains := newPerm(p.Chains, g.mix(tagZipf, 3), g.mix(tagZipf, 4))
	// grants by ReBAC user and by chain
	byUser := make(map[int][]int, g.nr)
	byChain := make([][]grantRef, p.Chains)
	for j := 0; j < p.grantTotal(); j++ {
		if j%65536 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		d, c, u, f := g.grant(j)
		byUser[u] = append(byUser[u], j)
		byChain[c] = append(byChain[c], grantRef{user: u, depth: d, file: f})
	}
	readable := func(r, c, f int) bool {
		for _, gr := range byChain[c] {
			if gr.user == r && (gr.depth > 0 || gr.file == f) {
				return true
			}
		}
		return false
	}
	// fileIn draws a file of chain c by popularity.
	fileIn := func(c int) int {
		n := g.filesIn(c)
		k := newPerm(n, g.mix(tagZipf, uint64(5+c)), uint64(c)).at(draw(n))
		return c + p.Chains*k
	}
	// chainIn draws a chain of tenant t by popularity.
	chainIn := func(t int) int {
		n := (p.Chains - t + p.Tenants - 1) / p.Tenants
		k := newPerm(n, g.mix(tagZipf, uint64(1<<40+t)), uint64(t)).at(draw(n))
		return t + p.Tenants*k
	}
	action := func(read, write float64) string {
		x := rng.Float64()
		switch {
		case x < read:
			return "read"
		case x < read+write:
			return "write"
		}
		return "delete"
	}
	type key struct {
		user, file int
		action     string
		tenant     int
	}
	index := make(map[key]int, cfg.Distinct)
	out := make([]Check, 0, cfg.Distinct)
	for draws := 0; len(out) < cfg.Distinct; draws++ {
		if draws >= zipfMaxDraws*cfg.Distinct {
			return nil, fmt.Errorf("%w: only %d distinct checks in %d draws: the data set is too small for %d", ErrConfig, len(out), draws, cfg.Distinct)
		}
		if draws%65536 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		u := users.at(draw(p.Users))
		var c Check
		var k key
		if u < p.RBACUsers {
			roles := g.rolesOf(u)
			t := rng.IntN(p.Tenants)
			if len(roles) > 0 && rng.Float64() < zipfGrounded {
				ts := make([]int, 0, len(roles))
				for t := range roles {
					ts = append(ts, t)
				}
				slices.Sort(ts)
				t = ts[rng.IntN(len(ts))]
			}
			f := fileIn(chainIn(t))
			act := action(0.7, 0.2)
			allow := slices.Contains(roleActions[roles[t]], act)
			c = Check{User: userID(u), Action: act, Type: "file", ID: fileID(f), Tenant: tenantID(t), Allow: allow}
			k = key{user: u, file: f, action: act, tenant: t}
		} else {
			r := u - p.RBACUsers
			var ch, f int
			if js := byUser[r]; len(js) > 0 && rng.Float64() < zipfGrounded {
				d, gc, _, gf := g.grant(js[rng.IntN(len(js))])
				ch, f = gc, gf
				if d > 0 {
					f = fileIn(gc)
				}
			} else {
				ch = chains.at(draw(p.Chains))
				f = fileIn(ch)
			}
			act := action(0.8, 0.15)
			allow := act == "read" && readable(r, ch, f)
			t := tenantOfChain(p, ch)
			c = Check{User: userID(u), Action: act, Type: "file", ID: fileID(f), Tenant: tenantID(t), Allow: allow}
			k = key{user: u, file: f, action: act, tenant: t}
		}
		if i, ok := index[k]; ok {
			out[i].N++
			continue
		}
		c.N = 1
		index[k] = len(out)
		out = append(out, c)
	}
	return out, nil
}
