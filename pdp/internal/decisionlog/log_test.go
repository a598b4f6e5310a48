package decisionlog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

func TestEmitWritesEvents(t *testing.T) {
	var buf bytes.Buffer
	l := New(Config{Out: &buf})
	for i := range 10 {
		l.Emit(Event{DecisionID: string(rune('a' + i)), Allowed: i%2 == 0, Reason: "rbac", Interface: "grpc"})
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&buf)
	n := 0
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		if e.Type != "policy.decision" || e.DecisionID != string(rune('a'+n)) {
			t.Fatalf("line %d: %+v", n, e)
		}
		n++
	}
	if n != 10 || l.Emitted() != 10 || l.Dropped() != 0 {
		t.Fatalf("lines=%d emitted=%d dropped=%d", n, l.Emitted(), l.Dropped())
	}
}

// blockingWriter blocks every write until released.
type blockingWriter struct{ release chan struct{} }

func (w blockingWriter) Write(p []byte) (int, error) { <-w.release; return len(p), nil }

func TestFullQueueDropsWithoutBlocking(t *testing.T) {
	w := blockingWriter{release: make(chan struct{})}
	l := New(Config{Out: w, QueueSize: 2})
	done := make(chan struct{})
	go func() {
		for range 100000 {
			l.Emit(Event{Reason: "x", Input: json.RawMessage(`{"pad":"` + string(bytes.Repeat([]byte("p"), 1024)) + `"}`)})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Emit blocked on a full queue")
	}
	if l.Dropped() == 0 {
		t.Fatal("nothing was dropped with a blocked writer and a queue of 2")
	}
	close(w.release)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := l.Emitted() + l.Dropped(); got != 100000 {
		t.Fatalf("emitted+dropped = %d, want 100000", got)
	}
}

func TestEmitAfterCloseRaces(t *testing.T) {
	l := New(Config{Out: io.Discard})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				l.Emit(Event{})
			}
		})
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := l.Emitted() + l.Dropped(); got != 4000 {
		t.Fatalf("emitted+dropped = %d, want 4000", got)
	}
}

func TestDisabled(t *testing.T) {
	l := New(Config{})
	l.Emit(Event{})
	if l.Enabled() || l.Emitted() != 0 {
		t.Fatal("a logger without output wrote")
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestAppendEventMatchesEncodingJSON: the hand-written encoder writes the
// document encoding/json writes for the same event.
func TestAppendEventMatchesEncodingJSON(t *testing.T) {
	at := time.Date(2026, 11, 30, 1, 2, 3, 450000000, time.UTC)
	events := []Event{
		{Type: "policy.decision", DecisionID: "n-1", Time: at, Interface: "grpc", Allowed: true, Reason: "rbac", PolicyRevision: "r1", DataRevision: 7, LatencyMicros: 3.25, Cache: "hit"},
		{Type: "policy.decision", DecisionID: "n-2", Time: at.Add(time.Nanosecond), Interface: "authzen", Subject: "user:<ünï>", Action: "read\n", Resource: "file:\"q\"\\", Reason: "", LatencyMicros: 1e-7, Cache: "miss", Input: json.RawMessage(`{"a":1}`)},
		{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("x", 3600)), LatencyMicros: 1e22, Subject: "\xff\u2028"},
	}
	for _, e := range events {
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendEvent(nil, &e, new(stamp)); string(got) != string(want)+"\n" {
			t.Fatalf("appendEvent:\n got %s\nwant %s", got, want)
		}
	}
}

func BenchmarkAppendEvent(b *testing.B) {
	e := Event{Type: "policy.decision", DecisionID: "n-1", Time: time.Now(), Interface: "grpc", Subject: "user:alice", Action: "GET", Resource: "/files/report.pdf", Allowed: true, Reason: "rbac", PolicyRevision: "r1", DataRevision: 7, LatencyMicros: 3.25, Cache: "hit"}
	e.Time = e.Time.UTC()
	buf := make([]byte, 0, 1024)
	var st stamp
	b.ReportAllocs()
	for b.Loop() {
		buf = appendEvent(buf[:0], &e, &st)
	}
}

// TestStampMatchesAppendFormat: event times are written as
// time.RFC3339Nano writes them, whatever the order of the times one stamp
// is given (the same second again, another second, an earlier one).
func TestStampMatchesAppendFormat(t *testing.T) {
	base := time.Date(2026, 12, 2, 21, 30, 5, 0, time.UTC)
	times := []time.Time{
		base, base.Add(time.Nanosecond), base.Add(100 * time.Millisecond), base.Add(123456789),
		base.Add(999999999), base.Add(time.Second), base.Add(-time.Nanosecond), base,
		time.Date(1, 1, 1, 0, 0, 0, 10, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999990, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 5, time.UTC), time.Date(-1, 6, 1, 0, 0, 0, 5, time.UTC),
		base.In(time.FixedZone("x", 3600)), base.Add(7).In(time.FixedZone("y", -1800)), time.Unix(0, 0).UTC(),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		times = append(times, base.Add(time.Duration(r.Int64N(int64(3*time.Second)))))
	}
	var st stamp
	for _, at := range times {
		want := at.AppendFormat(nil, time.RFC3339Nano)
		if got := st.append(nil, at); string(got) != string(want) {
			t.Fatalf("stamp %v: %s, want %s", at, got, want)
		}
	}
}
