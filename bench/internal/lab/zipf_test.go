package lab

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
)

func zipfChecks(t *testing.T, dir string, cfg ZipfConfig) ([]Check, []byte) {
	t.Helper()
	path, err := GenerateZipf(context.Background(), dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := ReadChecks(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return cs, b
}

// TestZipfWorkload checks the size, the determinism per seed and the skew
// of the workload, and every expected decision against the real store:
// the data set imported into bbolt, each check answered as the default
// policy answers it (a tenant role granting the action, or the store's
// check of the permission).
func TestZipfWorkload(t *testing.T) {
	dir, _ := genSmall(t, 1)
	const distinct = 100_000
	cs, b1 := zipfChecks(t, dir, ZipfConfig{S: 1.1, Distinct: distinct})
	if len(cs) != distinct {
		t.Fatalf("%d checks, want %d", len(cs), distinct)
	}
	_, b2 := zipfChecks(t, dir, ZipfConfig{S: 1.1, Distinct: distinct})
	if !bytes.Equal(b1, b2) {
		t.Fatal("two draws with the same seed differ")
	}
	other, _ := zipfChecks(t, dir, ZipfConfig{S: 1.1, Distinct: 2000, Seed: 99})
	if slices.Equal(other, cs[:2000]) {
		t.Fatal("seeds 1 and 99 drew the same checks")
	}

	// Distinct, and skewed: a Zipf draw puts a large share of the draws
	// on few users and few checks; a uniform one would not.
	seen := map[Check]bool{}
	byUser := map[string]int{}
	var draws int
	counts := make([]int, 0, len(cs))
	allowed := 0
	for _, c := range cs {
		k := c
		k.N = 0
		if seen[k] {
			t.Fatalf("check %+v appears twice", c)
		}
		seen[k] = true
		if c.N < 1 {
			t.Fatalf("check %+v has no draw count", c)
		}
		draws += c.N
		byUser[c.User] += c.N
		counts = append(counts, c.N)
		if c.Allow {
			allowed++
		}
	}
	users := make([]int, 0, len(byUser))
	for _, n := range byUser {
		users = append(users, n)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(users)))
	top := 0
	for _, n := range users[:17] { // the top 1% of 1,750 users
		top += n
	}
	if share := float64(top) / float64(draws); share < 0.3 {
		t.Errorf("the top 1%% of users got %.0f%% of the draws; a Zipf(1.1) draw gives them far more than a uniform one", 100*share)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(counts)))
	t.Logf("%d draws for %d distinct checks; top 1%% of users: %.0f%% of the draws; most drawn check %d times; %d allowed",
		draws, len(cs), 100*float64(top)/float64(draws), counts[0], allowed)
	if counts[0] < 100*counts[len(counts)/2] {
		t.Errorf("most drawn check %d times, median %d: not skewed", counts[0], counts[len(counts)/2])
	}
	if allowed < len(cs)/5 || allowed > len(cs)*9/10 {
		t.Errorf("%d of %d checks allowed: want both decisions well represented", allowed, len(cs))
	}
	// A steeper skew concentrates the draws more.
	steep, _ := zipfChecks(t, dir, ZipfConfig{S: 2, Distinct: 2000})
	var steepDraws int
	for _, c := range steep {
		steepDraws += c.N
	}
	if steepDraws <= 2000*draws/distinct {
		t.Errorf("skew 2 took %d draws for 2,000 distinct checks; skew 1.1 about %d: want more", steepDraws, 2000*draws/distinct)
	}

	// The expected decisions, against the store.
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "nexus.db")
	if _, err := ImportData(ctx, dir, db, nil); err != nil {
		t.Fatal(err)
	}
	s, err := datastore.Open(ctx, datastore.Config{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var roles []string
	wrong := 0
	for _, c := range cs {
		sub := api.Subject{Type: "user", ID: c.User}
		roles, err = s.AppendRoles(ctx, roles[:0], sub, c.Tenant)
		if err != nil {
			t.Fatal(err)
		}
		got := false
		for _, r := range roles {
			got = got || slices.Contains(roleActions[r], c.Action)
		}
		if !got {
			res, err := s.Check(ctx, datastore.CheckRequest{Object: api.Object{Type: c.Type, ID: c.ID}, Permission: c.Action, Subject: sub})
			if err != nil {
				t.Fatal(err)
			}
			got = res.Allowed
		}
		if got != c.Allow {
			if wrong++; wrong <= 5 {
				t.Errorf("%+v: the store says %v", c, got)
			}
		}
	}
	if wrong > 0 {
		t.Fatalf("%d of %d expected decisions wrong", wrong, len(cs))
	}
}

func TestZipfConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  ZipfConfig
		ok   bool
	}{
		{"defaults", ZipfConfig{}, true},
		{"skew 1", ZipfConfig{S: 1}, false},
		{"skew below 1", ZipfConfig{S: 0.5}, false},
		{"negative size", ZipfConfig{Distinct: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// TestPickerFollowsWeights checks that the load generator draws workload
// checks in proportion to their N.
func TestPickerFollowsWeights(t *testing.T) {
	reqs := []Request{{check: Check{N: 90}}, {check: Check{N: 9}}, {check: Check{N: 1}}}
	pick := picker(reqs)
	rng := newTestRand()
	var got [3]int
	for range 100_000 {
		got[pick(rng)]++
	}
	if got[0] < 88_000 || got[0] > 92_000 || got[1] < 8_000 || got[1] > 10_000 || got[2] < 700 || got[2] > 1_300 {
		t.Fatalf("draws %v, want about 90,000 / 9,000 / 1,000", got)
	}
}

func newTestRand() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }
