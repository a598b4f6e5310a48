package decisionlogs

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	lstat "github.com/open-policy-agent/opa/v1/plugins/logs/status"

	"github.com/nexuspdp/nexus/pdp"
)

// Counter names, OPA's where OPA counts the same thing. Metrics reports
// them with OPA's "counter_" prefix.
const (
	counterDroppedBytes    = "decision_logs_dropped_buffer_size_limit_bytes_exceeded"
	counterDroppedEvents   = "decision_logs_dropped_buffer_size_limit_exceeded"
	counterChunksUploaded  = "decision_logs_chunks_uploaded"
	counterChunksFailed    = "decision_logs_chunks_upload_failed"
	counterEncodingFailure = "decision_logs_encoding_failure"
	// counterTooLarge counts events larger on their own, compressed, than
	// the upload size limit; each is dropped and also counted as an
	// encoding failure, as OPA's chunk encoder does.
	counterTooLarge = "enc_log_exceeded_upload_size_limit_bytes"
	// nexus' own: events dropped because the mask or drop rule failed or
	// the mask rule's result could not be read.
	counterDroppedRuleError = "decision_logs_dropped_rule_error"
)

// minRetryDelay is the first wait after a failed upload (OPA's).
const minRetryDelay = 100 * time.Millisecond

// Logger is a pdp.DecisionSink that writes OPA decision events.
type Logger struct {
	cfg    Config
	labels []byte
	ch     chan *pdp.DecisionRecord
	buf    *buffer
	done   chan struct{} // the worker has finished
	stop   chan context.Context
	upDone chan struct{} // the uploader has finished

	mu     sync.RWMutex // guards closed against a send on a closed channel
	closed bool

	events, droppedRule, chunksUploaded, chunksFailed, encodingFailure, tooLarge atomic.Uint64

	statusMu sync.Mutex
	status   UploadStatus

	line []byte       // the console line being written (the worker's)
	zw   *gzip.Writer // the uploader's compressor, reused
	zbuf bytes.Buffer // its output
}

var _ pdp.DecisionSink = (*Logger)(nil)

// UploadStatus is the outcome of the last upload, OPA's decision_logs
// status: empty after a success.
type UploadStatus = lstat.Status

// New validates cfg and starts a Logger; Close flushes it.
func New(cfg Config) (*Logger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Logger{
		cfg:    cfg,
		labels: appendLabels(nil, cfg.Labels),
		ch:     make(chan *pdp.DecisionRecord, cfg.QueueSize),
		done:   make(chan struct{}),
		stop:   make(chan context.Context, 1),
		upDone: make(chan struct{}),
	}
	l.buf = &buffer{event: cfg.BufferType == BufferEvent, maxBytes: cfg.BufferSizeLimitBytes, maxEvents: cfg.BufferSizeLimitEvents}
	go l.work()
	if cfg.Service != nil {
		go l.upload()
	} else {
		close(l.upDone)
	}
	return l, nil
}

// Record queues r without blocking; a full queue drops it (counted).
func (l *Logger) Record(r *pdp.DecisionRecord) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		l.buf.dropped.Add(1)
		return
	}
	select {
	case l.ch <- r:
	default:
		l.buf.dropped.Add(1)
	}
}

// work turns records into events.
func (l *Logger) work() {
	defer close(l.done)
	var scratch []byte
	for r := range l.ch {
		scratch = appendEvent(scratch[:0], r, l.labels, &l.cfg)
		ev, ok := l.rules(scratch, r.Rules)
		if !ok {
			continue
		}
		l.events.Add(1)
		if l.cfg.Console != nil {
			l.console(ev)
		}
		if l.cfg.Service != nil {
			l.buf.push(bytes.Clone(ev))
		}
	}
}

// rules applies the drop and mask rules to ev. It fails closed: a rule
// that fails, or a mask that cannot be read, drops the event.
func (l *Logger) rules(ev []byte, rules pdp.LogRules) ([]byte, bool) {
	if rules == nil {
		return ev, true
	}
	ctx := context.Background()
	drop, err := rules.LogDrop(ctx, ev)
	if err != nil {
		l.droppedRule.Add(1)
		l.cfg.Logger.Error("decision log: the drop rule failed; the event is dropped", "err", err)
		return nil, false
	}
	if drop {
		return nil, false
	}
	mask, err := rules.LogMask(ctx, ev)
	if err != nil {
		l.droppedRule.Add(1)
		l.cfg.Logger.Error("decision log: the mask rule failed; the event is dropped", "err", err)
		return nil, false
	}
	if mask == nil {
		return ev, true
	}
	ops, err := parseMask(mask)
	if err == nil && len(ops) > 0 {
		ev, err = applyMask(ev, ops)
	}
	if err != nil {
		l.droppedRule.Add(1)
		l.cfg.Logger.Error("decision log: the mask rule's result cannot be applied; the event is dropped", "err", err)
		return nil, false
	}
	return ev, true
}

// console prints ev as OPA's console decision logger does: the event's
// members with level, msg, time and type.
func (l *Logger) console(ev []byte) {
	line := append(l.line[:0], ev[:len(ev)-1]...)
	line = append(line, `,"level":"info","msg":"Decision Log","time":"`...)
	line = time.Now().AppendFormat(line, time.RFC3339)
	line = append(line, `","type":"openpolicyagent.org/decision_logs"}`...)
	line = append(line, '\n')
	l.line = line
	if _, err := l.cfg.Console.Write(line); err != nil {
		l.cfg.Logger.Error("decision log: console write", "err", err)
	}
}

// upload sends the buffer every MinDelay..MaxDelay, backing off after a
// failure, and sends what is left on Close.
func (l *Logger) upload() {
	defer close(l.upDone)
	retry := 0
	for {
		var delay time.Duration
		if retry == 0 {
			delay = l.cfg.MinDelay + rand.N(l.cfg.MaxDelay-l.cfg.MinDelay+1)
		} else {
			delay = backoff(l.cfg.MaxDelay, retry)
		}
		t := time.NewTimer(delay)
		select {
		case ctx := <-l.stop:
			t.Stop()
			l.flush(ctx)
			return
		case <-t.C:
		}
		if err := l.send(context.Background(), l.buf.len()); err != nil {
			retry++
			l.cfg.Logger.Warn("decision log upload failed; retrying", "err", err, "retry", retry)
		} else {
			retry = 0
		}
	}
}

// flush sends everything buffered, retrying until ctx ends.
func (l *Logger) flush(ctx context.Context) {
	for retry := 1; ; retry++ {
		err := l.send(ctx, l.buf.len())
		if err == nil || ctx.Err() != nil {
			if err != nil {
				l.cfg.Logger.Error("decision log: events left unsent at shutdown", "err", err, "events", l.buf.len())
			}
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff(l.cfg.MaxDelay, retry)):
		}
	}
}

// backoff is the wait before retry number retry (from 1): exponential from
// minRetryDelay, capped at max, with jitter.
func backoff(max time.Duration, retry int) time.Duration {
	d := minRetryDelay << min(retry-1, 30)
	if d > max || d <= 0 {
		d = max
	}
	return d/2 + rand.N(d/2+1)
}

// send uploads up to n buffered events in chunks no larger than the
// upload size limit. A chunk that fails goes back to the buffer's front.
func (l *Logger) send(ctx context.Context, n int) error {
	limit := l.cfg.UploadSizeLimitBytes
	for n > 0 {
		evs := l.buf.take(n, 8*limit)
		if len(evs) == 0 {
			return nil
		}
		body, err := l.gzipArray(evs)
		for err == nil && int64(len(body)) > limit && len(evs) > 1 {
			half := len(evs) / 2
			l.buf.putBack(evs[half:])
			evs = evs[:half]
			body, err = l.gzipArray(evs)
		}
		if err != nil {
			l.encodingFailure.Add(uint64(len(evs)))
			return fmt.Errorf("opalog: compressing a batch: %w", err)
		}
		n -= len(evs)
		if int64(len(body)) > limit {
			l.tooLarge.Add(1)
			l.encodingFailure.Add(1)
			l.cfg.Logger.Warn("decision log: an event is larger than the upload size limit on its own; it is dropped", "bytes", len(body), "limit", limit)
			continue
		}
		if err := l.post(ctx, body); err != nil {
			l.chunksFailed.Add(1)
			l.buf.putBack(evs)
			l.setStatus(err)
			return err
		}
		l.chunksUploaded.Add(1)
		l.setStatus(nil)
	}
	return nil
}

func (l *Logger) post(ctx context.Context, body []byte) error {
	code, err := l.cfg.Service.Post(ctx, "log upload", l.cfg.Resource, body,
		map[string]string{"Content-Type": "application/json", "Content-Encoding": "gzip"})
	if err == nil && (code < 200 || code > 299) {
		err = lstat.HTTPError{StatusCode: code}
	}
	return err
}

func (l *Logger) setStatus(err error) {
	var s UploadStatus
	s.SetError(err)
	l.statusMu.Lock()
	changed := s != l.status
	l.status = s
	l.statusMu.Unlock()
	if changed && l.cfg.OnStatus != nil {
		l.cfg.OnStatus()
	}
}

// Status returns the outcome of the last upload.
func (l *Logger) Status() UploadStatus {
	l.statusMu.Lock()
	defer l.statusMu.Unlock()
	return l.status
}

// Metrics returns the decision log's counters under OPA's names
// ("counter_decision_logs_..."), as OPA's status report carries them.
func (l *Logger) Metrics() map[string]any {
	dropName := counterDroppedBytes
	if l.buf.event {
		dropName = counterDroppedEvents
	}
	out := map[string]any{}
	for name, v := range map[string]uint64{
		dropName:                l.buf.dropped.Load(),
		counterChunksUploaded:   l.chunksUploaded.Load(),
		counterChunksFailed:     l.chunksFailed.Load(),
		counterEncodingFailure:  l.encodingFailure.Load(),
		counterDroppedRuleError: l.droppedRule.Load(),
		counterTooLarge:         l.tooLarge.Load(),
	} {
		if v > 0 || name == dropName {
			out["counter_"+name] = v
		}
	}
	return out
}

// Dropped is the number of events dropped because the queue or the buffer
// was full.
func (l *Logger) Dropped() uint64 { return l.buf.dropped.Load() }

// DroppedByRules is the number of events dropped because the mask or drop
// rule failed or its result could not be read.
func (l *Logger) DroppedByRules() uint64 { return l.droppedRule.Load() }

// Events is the number of events written (console) or buffered (upload).
func (l *Logger) Events() uint64 { return l.events.Load() }

// Close stops taking decisions, turns those queued into events and
// uploads what is buffered, retrying until ctx ends.
func (l *Logger) Close(ctx context.Context) error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.ch)
	}
	l.mu.Unlock()
	select {
	case <-l.done:
	case <-ctx.Done():
		return fmt.Errorf("opalog: closing: %w", ctx.Err())
	}
	select {
	case l.stop <- ctx:
	default:
	}
	select {
	case <-l.upDone:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("opalog: closing: %w", ctx.Err())
	}
}

// gzipArray compresses the JSON array of evs into a buffer reused by the
// next call.
func (l *Logger) gzipArray(evs [][]byte) ([]byte, error) {
	l.zbuf.Reset()
	if l.zw == nil {
		// The fastest level: the uploader shares the CPU with decisions,
		// and collectors read any gzip stream.
		l.zw, _ = gzip.NewWriterLevel(&l.zbuf, gzip.BestSpeed)
	} else {
		l.zw.Reset(&l.zbuf)
	}
	zw := l.zw
	_, _ = zw.Write([]byte{'['})
	for i, ev := range evs {
		if i > 0 {
			_, _ = zw.Write([]byte{','})
		}
		_, _ = zw.Write(ev)
	}
	_, _ = zw.Write([]byte{']'})
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return l.zbuf.Bytes(), nil
}

// buffer holds encoded events waiting for upload, bounded in bytes (the
// size buffer) or in events; when full it drops its oldest events.
type buffer struct {
	event     bool
	maxBytes  int64
	maxEvents int
	dropped   atomic.Uint64

	mu   sync.Mutex
	evs  [][]byte
	size int64
}

func (b *buffer) over() bool {
	if b.event {
		return len(b.evs) > b.maxEvents
	}
	return b.size > b.maxBytes
}

func (b *buffer) trim() {
	for len(b.evs) > 0 && b.over() {
		b.size -= int64(len(b.evs[0]))
		b.evs[0] = nil
		b.evs = b.evs[1:]
		b.dropped.Add(1)
	}
}

func (b *buffer) push(ev []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.evs = append(b.evs, ev)
	b.size += int64(len(ev))
	b.trim()
}

// take removes and returns up to n events from the front, as many as fit
// in limit bytes (at least one).
func (b *buffer) take(n int, limit int64) [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	var size int64
	k := 0
	for k < len(b.evs) && k < n && (k == 0 || size+int64(len(b.evs[k])) <= limit) {
		size += int64(len(b.evs[k]))
		k++
	}
	out := append([][]byte(nil), b.evs[:k]...)
	clear(b.evs[:k])
	b.evs = b.evs[k:]
	b.size -= size
	return out
}

// putBack returns evs, taken earlier, to the front; the oldest go first
// if they no longer fit.
func (b *buffer) putBack(evs [][]byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.evs = append(append([][]byte(nil), evs...), b.evs...)
	for _, ev := range evs {
		b.size += int64(len(ev))
	}
	b.trim()
}

func (b *buffer) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.evs)
}
