// Package decisionlog writes one policy.decision JSON event per decision
// through a bounded asynchronous queue that never blocks a decision: when
// the queue is full the event is dropped and counted.
package decisionlog

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nexuspdp/nexus/internal/jsonw"
)

// Event is one decision.
type Event struct {
	Type           string          `json:"type"`
	DecisionID     string          `json:"decision_id"`
	Time           time.Time       `json:"time"`
	Interface      string          `json:"interface"`
	Subject        string          `json:"subject,omitempty"`
	Action         string          `json:"action,omitempty"`
	Resource       string          `json:"resource,omitempty"`
	Allowed        bool            `json:"allowed"`
	Reason         string          `json:"reason"`
	PolicyRevision string          `json:"policy_revision"`
	DataRevision   uint64          `json:"data_revision"`
	LatencyMicros  float64         `json:"latency_us"`
	Cache          string          `json:"cache"`
	Input          json.RawMessage `json:"input,omitempty"`
}

// Config configures a Logger.
type Config struct {
	// Out receives one JSON line per event. Nil disables the log.
	Out io.Writer
	// QueueSize bounds the events waiting to be written; zero means 4096.
	QueueSize int
	// Logger reports write errors; nil discards them.
	Logger *slog.Logger
}

// Logger is the decision log.
type Logger struct {
	ch      chan Event
	out     *bufio.Writer
	log     *slog.Logger
	emitted atomic.Uint64
	dropped atomic.Uint64
	done    chan struct{}

	mu     sync.RWMutex // guards closed against a send on a closed channel
	closed bool
}

// New starts a Logger; Close flushes it.
func New(cfg Config) *Logger {
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 4096
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Logger{log: cfg.Logger, done: make(chan struct{})}
	if cfg.Out == nil {
		close(l.done)
		return l
	}
	l.ch = make(chan Event, cfg.QueueSize)
	l.out = bufio.NewWriterSize(cfg.Out, 64<<10)
	go l.run()
	return l
}

// Enabled reports whether events are written at all.
func (l *Logger) Enabled() bool { return l != nil && l.ch != nil }

// Emit queues e without blocking; a full queue drops it.
func (l *Logger) Emit(e Event) {
	if !l.Enabled() {
		return
	}
	e.Type = "policy.decision"
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		l.dropped.Add(1)
		return
	}
	select {
	case l.ch <- e:
	default:
		l.dropped.Add(1)
	}
}

// Emitted is the number of events written.
func (l *Logger) Emitted() uint64 { return l.emitted.Load() }

// Dropped is the number of events dropped because the queue was full.
func (l *Logger) Dropped() uint64 { return l.dropped.Load() }

// batchDelay is how long the writer lets events gather while they keep
// coming: under load it wakes every batchDelay and writes what queued
// instead of waking for every event. An event is written at most about
// this late.
const batchDelay = 10 * time.Millisecond

func (l *Logger) run() {
	defer close(l.done)
	buf := make([]byte, 0, 1024)
	var st stamp
	for {
		e, ok := <-l.ch // idle: wait for an event
		for ok {
			buf = appendEvent(buf[:0], &e, &st)
			if _, err := l.out.Write(buf); err != nil {
				l.log.Error("decision log write", "err", err)
			} else {
				l.emitted.Add(1)
			}
			select {
			case e, ok = <-l.ch:
				continue
			default:
			}
			// The queue is empty: write out, let more events gather,
			// and go on while they keep coming.
			l.flush()
			time.Sleep(batchDelay)
			select {
			case e, ok = <-l.ch:
				continue
			default:
			}
			break
		}
		if !ok { // closed
			l.flush()
			return
		}
	}
}

func (l *Logger) flush() {
	if err := l.out.Flush(); err != nil {
		l.log.Error("decision log flush", "err", err)
	}
}

// appendEvent appends e as one JSON line, the same document encoding/json
// writes for Event.
func appendEvent(b []byte, e *Event, st *stamp) []byte {
	b = append(b, `{"type":`...)
	b = jsonw.String(b, e.Type)
	b = append(b, `,"decision_id":`...)
	b = jsonw.String(b, e.DecisionID)
	b = append(b, `,"time":"`...)
	b = st.append(b, e.Time)
	b = append(b, `","interface":`...)
	b = jsonw.String(b, e.Interface)
	if e.Subject != "" {
		b = append(b, `,"subject":`...)
		b = jsonw.String(b, e.Subject)
	}
	if e.Action != "" {
		b = append(b, `,"action":`...)
		b = jsonw.String(b, e.Action)
	}
	if e.Resource != "" {
		b = append(b, `,"resource":`...)
		b = jsonw.String(b, e.Resource)
	}
	b = append(b, `,"allowed":`...)
	b = strconv.AppendBool(b, e.Allowed)
	b = append(b, `,"reason":`...)
	b = jsonw.String(b, e.Reason)
	b = append(b, `,"policy_revision":`...)
	b = jsonw.String(b, e.PolicyRevision)
	b = append(b, `,"data_revision":`...)
	b = strconv.AppendUint(b, e.DataRevision, 10)
	b = append(b, `,"latency_us":`...)
	b = jsonw.Float(b, e.LatencyMicros)
	b = append(b, `,"cache":`...)
	b = jsonw.String(b, e.Cache)
	if len(e.Input) > 0 {
		b = append(b, `,"input":`...)
		b = append(b, e.Input...)
	}
	return append(b, '}', '\n')
}

// Close writes what is queued and stops the Logger. Events emitted after
// Close are dropped.
func (l *Logger) Close(ctx context.Context) error {
	if !l.Enabled() {
		return nil
	}
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.ch)
	}
	l.mu.Unlock()
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stamp writes event times as encoding/json writes a time.Time
// (time.RFC3339Nano). For a UTC time, the date and time of day change
// once a second: they are formatted once per second, and the fraction
// and the zone are written by hand. A stamp is one goroutine's.
type stamp struct {
	sec    int64
	prefix []byte // "2006-01-02T15:04:05" of sec, nil before the first
}

func (st *stamp) append(b []byte, t time.Time) []byte {
	if t.Location() != time.UTC {
		return t.AppendFormat(b, time.RFC3339Nano)
	}
	if sec := t.Unix(); st.prefix == nil || sec != st.sec {
		st.sec = sec
		st.prefix = t.AppendFormat(st.prefix[:0], "2006-01-02T15:04:05")
	}
	b = append(b, st.prefix...)
	if ns := t.Nanosecond(); ns != 0 {
		// Nine digits, without their trailing zeros.
		var f [10]byte
		f[0] = '.'
		for i := 9; i > 0; i-- {
			f[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := len(f)
		for f[n-1] == '0' {
			n--
		}
		b = append(b, f[:n]...)
	}
	return append(b, 'Z')
}
