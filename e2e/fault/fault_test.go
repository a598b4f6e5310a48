package fault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/e2e/internal/faultcheck"
	"github.com/nexuspdp/nexus/e2e/internal/natsproc"
	"github.com/nexuspdp/nexus/e2e/internal/nexusproc"
)

const (
	adminToken = "e2e-fault-admin-token"
	appKey     = "e2e-fault-app-key"
)

// setup is a 3-node NATS JetStream cluster and three nexus replicas on a
// stream of three replicas; natsOf(i) gives the NATS URLs replica i uses.
type setup struct {
	nats     *natsproc.Cluster
	replicas []*nexusproc.Replica
	client   *faultcheck.Client
}

func start(t *testing.T, o natsproc.Options, natsOf func(c *natsproc.Cluster, i int) []string) *setup {
	t.Helper()
	natsproc.Require(t)
	s := &setup{nats: natsproc.StartWith(t, 3, o), client: faultcheck.NewClient(adminToken, appKey, 30*time.Second)}
	conf := filepath.Join(t.TempDir(), "nexus.yaml")
	if err := os.WriteFile(conf, []byte("cluster:\n  stream_replicas: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var extra []string
	// Flags of the newer write path, when the binary has them.
	if nexusproc.HasFlag(t, "--write-timeout") {
		extra = append(extra, "--write-timeout", "3s")
	}
	if nexusproc.HasFlag(t, "--stream-replicas") {
		extra = append(extra, "--stream-replicas", "3")
	}
	for i, name := range []string{"A", "B", "C"} {
		s.replicas = append(s.replicas, nexusproc.StartReplica(t, nexusproc.ReplicaConfig{
			Name: name, ConfigFile: conf, NATS: natsOf(s.nats, i), Cluster: "fault",
			AdminToken: adminToken, AppKey: appKey, Extra: extra,
		}))
	}
	// The first replica wrote the demo data through the log.
	ctx := context.Background()
	waitFor(t, 60*time.Second, "demo data on every replica", func() bool {
		var revs []uint64
		for _, r := range s.replicas {
			rev, err := s.client.Revision(ctx, r.Admin)
			if err != nil {
				return false
			}
			revs = append(revs, rev)
		}
		return revs[0] > 0 && revs[1] == revs[0] && revs[2] == revs[0]
	})
	return s
}

func waitFor(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writeUntilAcked writes on r until it is acknowledged.
func (s *setup) writeUntilAcked(t *testing.T, r *nexusproc.Replica, grant bool, tuple string, d time.Duration) faultcheck.Answer {
	t.Helper()
	var a faultcheck.Answer
	waitFor(t, d, fmt.Sprintf("%s %s acknowledged on %s", map[bool]string{true: "grant", false: "revoke"}[grant], tuple, r.Name), func() bool {
		a = s.client.Write(context.Background(), r.Admin, grant, tuple, "", "")
		return a.Outcome == faultcheck.Written
	})
	return a
}

// converge waits until one write is acknowledged, every replica applied
// it and all hold the same tuples at the same revision; it returns the
// listings.
func (s *setup) converge(t *testing.T, marker string) map[string][]string {
	t.Helper()
	ctx := context.Background()
	var rev uint64
	waitFor(t, 90*time.Second, "a write acknowledged after the faults", func() bool {
		for _, r := range s.replicas {
			if a := s.client.Write(ctx, r.Admin, true, marker, "", ""); a.Outcome == faultcheck.Written {
				rev = a.Revision
				return true
			}
		}
		return false
	})
	var listings map[string][]string
	same := func() bool {
		listings = map[string][]string{}
		var revs []uint64
		for _, r := range s.replicas {
			got, err := s.client.Revision(ctx, r.Admin)
			if err != nil || got < rev {
				return false
			}
			revs = append(revs, got)
			l, err := s.client.Listing(ctx, r.Admin)
			if err != nil {
				return false
			}
			listings[r.Name] = l
		}
		first := listings[s.replicas[0].Name]
		for _, r := range s.replicas[1:] {
			if revs[0] != revs[1] || revs[0] != revs[2] || !slices.Equal(listings[r.Name], first) {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(90 * time.Second)
	for !same() {
		if time.Now().After(deadline) {
			t.Logf("replicas did not converge within 90s; comparing what they hold")
			return listings
		}
		time.Sleep(100 * time.Millisecond)
	}
	return listings
}

// healAll continues and starts every NATS node and replica.
func (s *setup) healAll(t *testing.T) {
	t.Helper()
	for i := range s.nats.Len() {
		s.nats.Cont(i)
		s.nats.Restart(i)
	}
	s.nats.WaitHealthy(60 * time.Second)
	for _, r := range s.replicas {
		r.Cont()
		if err := r.Start(60 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

func envInt(t *testing.T, name string, def int64) int64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// TestFaultNemesis runs clients that grant, revoke and check (with the
// consistency tokens of their acknowledged writes) against three nexus
// replicas while a nemesis kills (SIGKILL), stalls (SIGSTOP, SIGCONT) and
// restarts NATS nodes and replicas, one at a time. Afterwards every
// process is healed and the history is checked: acknowledged writes
// present and acknowledged deletes absent on every replica, no write
// answered "not written" applied, no check with a token answered from
// older data, replicas identical. NEXUS_FAULT_SEED picks the faults
// (default: from the clock, logged), NEXUS_FAULT_DURATION how long they
// go on (default 40s).
func TestFaultNemesis(t *testing.T) {
	seed := envInt(t, "NEXUS_FAULT_SEED", time.Now().UnixNano()%1_000_000)
	dur := 40 * time.Second
	if v := os.Getenv("NEXUS_FAULT_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("NEXUS_FAULT_DURATION=%q: %v", v, err)
		}
		dur = d
	}
	t.Logf("NEXUS_FAULT_SEED=%d NEXUS_FAULT_DURATION=%v", seed, dur)
	s := start(t, natsproc.Options{}, func(c *natsproc.Cluster, _ int) []string { return strings.Split(c.URLs(), ",") })
	ctx := context.Background()
	idempotent := false // whether the server names outcomes (and so honours Idempotency-Key)
	// Conditional writes, where the admin API takes preconditions.
	probe := "file:ft-probe#viewer@user:fu-probe"
	conditional := s.client.Write(ctx, s.replicas[0].Admin, true, probe, "", "must_not_exist").Outcome == faultcheck.Written

	var h faultcheck.History
	begin := time.Now()
	stopAt := begin.Add(dur)
	var wg sync.WaitGroup
	var idemMu sync.Mutex
	const clients = 4
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(c)+1))
			type slot struct {
				file, user string
				n          int // acknowledged ops so far: even means absent
			}
			var active []*slot
			next := 0
			for time.Now().Before(stopAt) {
				for len(active) < 3 {
					active = append(active, &slot{file: fmt.Sprintf("ft-%d-%d", c, next), user: fmt.Sprintf("fu-%d-%d", c, next)})
					next++
				}
				k := rng.IntN(len(active))
				sl := active[k]
				tuple := "file:" + sl.file + "#viewer@user:" + sl.user
				grant := sl.n%2 == 0
				key := fmt.Sprintf("fault-%d-%s-%d", seed, tuple, sl.n)
				pre := ""
				if conditional && rng.IntN(2) == 0 {
					pre = map[bool]string{true: "must_not_exist", false: "must_exist"}[grant]
				}
				op := faultcheck.Op{Tuple: tuple, Grant: grant, Conditional: pre != "", Start: time.Now()}
				// A request refused at connect never left: send it to
				// another replica.
				r := s.replicas[rng.IntN(len(s.replicas))]
				for {
					op.Answer = s.client.Write(ctx, r.Admin, grant, tuple, key, pre)
					if op.Answer.Outcome != faultcheck.NotSent {
						break
					}
					h.AddNotSent()
					r = s.replicas[rng.IntN(len(s.replicas))]
					time.Sleep(100 * time.Millisecond)
				}
				op.Replica = r.Name
				if op.Answer.Outcome == faultcheck.Written && op.Answer.WriteID != "" {
					idemMu.Lock()
					idempotent = true
					idemMu.Unlock()
				}
				// A server that names outcomes takes the same key again and
				// answers the first outcome: ask it a few times, on the
				// same replica.
				op.First = op.Answer
				for op.Answer.Outcome == faultcheck.Unknown && op.Answer.WriteID != "" && op.Retries < 5 {
					h.AddUnknown()
					op.Retries++
					time.Sleep(time.Second)
					a := s.client.Write(ctx, r.Admin, grant, tuple, key, pre)
					if a.Outcome != faultcheck.NotSent {
						op.Answer = a
					}
				}
				if op.Answer.Outcome == faultcheck.Unknown {
					h.AddUnknown()
				}
				op.End = time.Now()
				h.AddOp(op)
				if op.Answer.Outcome != faultcheck.Written {
					// Its outcome decides the tuple's state: never touch it
					// again. Pause: a refused write comes back at once.
					active = slices.Delete(active, k, k+1)
					time.Sleep(100 * time.Millisecond)
					continue
				}
				sl.n++
				if op.Answer.Revision == 0 {
					continue
				}
				cr := s.replicas[rng.IntN(len(s.replicas))]
				h.AddCheck(faultcheck.CheckRec{
					Tuple: tuple, Replica: cr.Name, Token: op.Answer.Revision, Want: grant, Time: time.Now(),
					Answer: s.client.Check(ctx, cr.HTTP, sl.user, sl.file, op.Answer.Revision),
				})
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			}
		})
	}

	// The nemesis: one fault at a time, held 1-4s (a stall up to 8s), then
	// healed.
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	var faultLog []string
	for time.Now().Before(stopAt) {
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		if !time.Now().Before(stopAt) {
			break
		}
		i := rng.IntN(3)
		hold := time.Duration(1000+rng.IntN(3000)) * time.Millisecond
		kind := []string{"kill", "stall", "restart"}[rng.IntN(3)]
		if kind == "stall" {
			// Up to 8s: past a write's deadline and the log consumer's
			// heartbeat, where a stalled node's buffered writes matter.
			hold += time.Duration(rng.IntN(4000)) * time.Millisecond
		}
		var what string
		var inject, heal func()
		if rng.IntN(2) == 0 {
			what = fmt.Sprintf("%s nats n%d", kind, i+1)
			switch kind {
			case "kill":
				inject, heal = func() { s.nats.Kill(i) }, func() { s.nats.Restart(i) }
			case "stall":
				inject, heal = func() { s.nats.Pause(i) }, func() { s.nats.Cont(i) }
			default:
				inject, heal = func() { s.nats.Stop(i); s.nats.Restart(i) }, func() {}
			}
		} else {
			r := s.replicas[i]
			what = fmt.Sprintf("%s nexus %s", kind, r.Name)
			start := func() {
				if err := r.Start(60 * time.Second); err != nil {
					t.Errorf("%s: %v", what, err)
				}
			}
			switch kind {
			case "kill":
				inject, heal = r.Kill, start
			case "stall":
				inject, heal = r.Pause, r.Cont
			default:
				inject, heal = func() {
					if err := r.Stop(15 * time.Second); err != nil {
						t.Errorf("%s: %v", what, err)
					}
					start()
				}, func() {}
			}
		}
		h.AddEvent(faultcheck.Event{Time: time.Now(), What: what, Fault: true})
		faultLog = append(faultLog, fmt.Sprintf("%5.1fs %s (%v)", time.Since(begin).Seconds(), what, hold.Round(100*time.Millisecond)))
		inject()
		time.Sleep(hold)
		heal()
		h.AddEvent(faultcheck.Event{Time: time.Now(), What: "heal " + what})
		// One fault at a time: the next waits until this node is back.
		if strings.Contains(what, "nats") {
			if err := s.nats.WaitNode(i, 60*time.Second); err != nil {
				t.Errorf("%s: %v", what, err)
			}
		}
	}
	wg.Wait()
	end := time.Now()
	s.healAll(t)
	healed := time.Now()
	listings := s.converge(t, "file:ft-marker#viewer@user:fu-marker")
	convergeTime := time.Since(healed)
	res := h.Verify(listings, end)

	idemMu.Lock()
	named := idempotent
	idemMu.Unlock()
	t.Logf(`fault summary (seed %d, %v of faults, %d clients, server names outcomes: %v, conditional writes: %v)
  faults:            %d: %s
  writes:            %d sent (%d conditional), %d acknowledged, %d not written, %d unknown outcomes (%d answers; %d ops retried with their Idempotency-Key), %d unknown shown applied, %d refused at connect
  lost:              %d
  not written, applied: %d
  conditional writes refused although their precondition held: %d
  checks with token: %d, %d right, %d wrong, %d failed closed (503), %d other
  write unavailability after a fault: P50 %v, max %v (%d faults with no acknowledged write before the end)
  time to converge after healing: %v (healing took %v)
  replicas diverged: %d`,
		seed, dur, clients, named, conditional,
		res.Faults, strings.Join(faultLog, "; "),
		res.Writes, res.Conditional, res.Acked, res.NotWritten, res.UnknownFinal, res.Unknown, res.Retried, res.UnknownApplied, res.NotSent,
		len(res.Lost), len(res.NotWrittenApplied), len(res.WrongPrecondition),
		res.Checks, res.ChecksRight, len(res.WrongChecks), res.ChecksFailClose, res.ChecksOther,
		faultcheck.Percentile(res.Unavail, 50).Round(time.Millisecond), faultcheck.Percentile(res.Unavail, 100).Round(time.Millisecond), res.Censored,
		convergeTime.Round(time.Millisecond), healed.Sub(end).Round(time.Millisecond), len(res.Diverged))
	report := func(what string, items []string) {
		for i, it := range items {
			if i == 10 {
				t.Errorf("%s: and %d more", what, len(items)-10)
				break
			}
			t.Errorf("%s: %s", what, it)
		}
	}
	report("acknowledged write lost", res.Lost)
	report("write answered not written was applied", res.NotWrittenApplied)
	report("check with a token answered older data", res.WrongChecks)
	report("conditional write refused although its precondition held", res.WrongPrecondition)
	report("replicas diverged", res.Diverged)
	if res.Acked < 20 {
		t.Errorf("only %d writes acknowledged: the run tested little", res.Acked)
	}
	if t.Failed() {
		t.Logf("replay with NEXUS_FAULT_SEED=%d NEXUS_FAULT_DURATION=%v", seed, dur)
	}
}

// TestFaultRevokeAfterFailedGrant: replica A reaches only NATS node 1, B
// only node 2. Node 1 is stopped (SIGSTOP) with its sockets open; a grant
// on A cannot be acknowledged; a revoke of the same tuple on B is; node 1
// continues. The revoke was the last acknowledged write, so every replica
// must deny with the revoke's token, and the grant, if its answer said it
// was not written, must never apply.
func TestFaultRevokeAfterFailedGrant(t *testing.T) {
	s := start(t, natsproc.Options{NoAdvertise: true}, func(c *natsproc.Cluster, i int) []string { return []string{c.URL(i)} })
	a, b := s.replicas[0], s.replicas[1]
	ctx := context.Background()
	const user, file = "mallory", "revoke-after-failed-grant"
	tuple := "file:" + file + "#viewer@user:" + user

	s.nats.Pause(0)
	paused := true
	defer func() {
		if paused {
			s.nats.Cont(0)
		}
	}()
	grant := s.client.Write(ctx, a.Admin, true, tuple, "grant-"+file, "")
	t.Logf("grant on A with NATS n1 stopped: %v (%d %s)", grant.Outcome, grant.Status, strings.TrimSpace(grant.Body))
	if grant.Outcome == faultcheck.Written {
		t.Fatalf("grant on A acknowledged while its only NATS node was stopped: %+v", grant)
	}
	revoke := s.writeUntilAcked(t, b, false, tuple, 60*time.Second)
	t.Logf("revoke on B acknowledged at revision %d", revoke.Revision)
	s.nats.Cont(0)
	paused = false
	s.nats.WaitHealthy(60 * time.Second)

	// Wait until A writes again (its connection flows) and every replica
	// holds what A wrote after.
	listings := s.converge(t, "file:revoke-after-failed-grant-marker#viewer@user:nobody")
	for _, r := range s.replicas {
		ans := s.client.Check(ctx, r.HTTP, user, file, revoke.Revision)
		if ans.Err != nil || ans.Status != 200 || ans.Decision == nil {
			t.Errorf("check on %s with token %d: %d %s %v", r.Name, revoke.Revision, ans.Status, ans.Reason, ans.Err)
			continue
		}
		if *ans.Decision {
			t.Errorf("check on %s with the revoke's token %d allows %s: the grant answered %v (%d %s) was applied after the acknowledged revoke",
				r.Name, revoke.Revision, user, grant.Outcome, grant.Status, strings.TrimSpace(grant.Body))
		}
		if _, ok := slices.BinarySearch(listings[r.Name], tuple); ok {
			t.Errorf("%s holds %s after its acknowledged revoke", r.Name, tuple)
		}
	}
}
