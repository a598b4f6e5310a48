package bundles

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
)

// DefaultRetryDelay is the first back-off after an error (OPA's).
const DefaultRetryDelay = 100 * time.Millisecond

// longPollType is the response content type by which a bundle server says
// it supports long polling.
const longPollType = "application/vnd.openpolicyagent.bundles"

// Options configures a Syncer.
type Options struct {
	// Sources are the bundles to keep up to date (from ParseConfig).
	Sources []*Source
	// Dir is where persisted bundles live, one directory per bundle
	// (<Dir>/<name>/bundle.tar.gz). Required when a source persists.
	Dir string
	// Compile turns a checked bundle archive into the bundle the server
	// runs (a nexus bundle as is; an OPA bundle's Rego compiled).
	// Required.
	Compile func(ctx context.Context, tarball []byte) (*bundle.Bundle, error)
	// OnBundle activates a bundle; an error keeps the previous one.
	// Required.
	OnBundle func(ctx context.Context, b *bundle.Bundle) error
	// Logger receives downloads, activations and errors. Nil discards.
	Logger *slog.Logger
	// RetryDelay is the first back-off after an error; it grows by 1.6
	// per error up to the source's MaxDelay, with 20% jitter. Zero means
	// DefaultRetryDelay.
	RetryDelay time.Duration
}

// Validate fills defaults and rejects nonsense.
func (o *Options) Validate() error {
	if o.Compile == nil || o.OnBundle == nil {
		return errors.New("bundlesync: Compile and OnBundle are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = DefaultRetryDelay
	}
	for _, s := range o.Sources {
		if s == nil || s.Service == nil {
			return errors.New("bundlesync: a source without a service")
		}
		if s.Persist && o.Dir == "" {
			return fmt.Errorf("bundlesync: bundle %s persists, and no directory is given", s.Name)
		}
	}
	return nil
}

// Status is what OPA's status API reports for a bundle.
type Status struct {
	Name                     string    `json:"name"`
	ActiveRevision           string    `json:"active_revision,omitempty"`
	LastSuccessfulActivation time.Time `json:"last_successful_activation"`
	Type                     string    `json:"type,omitempty"`
	Size                     int       `json:"size,omitempty"`
	LastSuccessfulDownload   time.Time `json:"last_successful_download"`
	LastSuccessfulRequest    time.Time `json:"last_successful_request"`
	LastRequest              time.Time `json:"last_request"`
	// Code is "bundle_error" while the last attempt failed.
	Code    string   `json:"code,omitempty"`
	Message string   `json:"message,omitempty"`
	Errors  []string `json:"errors,omitempty"`
	// HTTPCode is the server's status when it answered an error.
	HTTPCode string `json:"http_code,omitempty"`
}

// errCode is OPA's code for a failed bundle.
const errCode = "bundle_error"

// Syncer keeps bundles up to date from their servers.
type Syncer struct {
	opts  Options
	log   *slog.Logger
	state []*state
}

type state struct {
	src *Source

	fetch    sync.Mutex // one download at a time per bundle
	etag     string
	longPoll bool
	active   [32]byte // sha256 of the active archive
	fromDisk bool     // the persisted bundle was tried

	mu     sync.Mutex
	status Status
}

// New returns a Syncer; nothing happens until Run or Trigger.
func New(opts Options) (*Syncer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Syncer{opts: opts, log: opts.Logger}
	for _, src := range opts.Sources {
		st := &state{src: src, longPoll: src.LongPollTimeout > 0}
		st.status = Status{Name: src.Name, Type: "snapshot"}
		s.state = append(s.state, st)
	}
	return s, nil
}

// Status returns each bundle's status, in the order of the sources.
func (s *Syncer) Status() []Status {
	out := make([]Status, 0, len(s.state))
	for _, st := range s.state {
		st.mu.Lock()
		c := st.status
		c.Errors = append([]string(nil), c.Errors...)
		st.mu.Unlock()
		out = append(out, c)
	}
	return out
}

// LoadPersisted activates the bundles that an earlier run persisted,
// checked and verified again, so that they decide before the first
// download. Run does it for the bundles it was not done for.
func (s *Syncer) LoadPersisted(ctx context.Context) error {
	var errs []error
	for _, st := range s.state {
		if !st.src.Persist {
			continue
		}
		if err := s.loadPersisted(ctx, st); err != nil {
			s.log.Warn("persisted bundle not loaded", "bundle", st.src.Name, "err", err)
			errs = append(errs, fmt.Errorf("bundle %s: %w", st.src.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Run loads persisted bundles (unless LoadPersisted did), then polls each
// periodic bundle until ctx ends. It returns when every poller has
// stopped.
func (s *Syncer) Run(ctx context.Context) {
	_ = s.LoadPersisted(ctx) // logged; the downloads go on
	var wg sync.WaitGroup
	for _, st := range s.state {
		if st.src.Trigger != TriggerPeriodic {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.poll(ctx, st)
		}()
	}
	wg.Wait()
}

// Trigger downloads every bundle once (the way to update bundles whose
// trigger is manual) and returns the errors met.
func (s *Syncer) Trigger(ctx context.Context) error {
	var errs []error
	for _, st := range s.state {
		if err := s.once(ctx, st); err != nil {
			errs = append(errs, fmt.Errorf("bundle %s: %w", st.src.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Syncer) poll(ctx context.Context, st *state) {
	retry := 0
	for {
		err := s.once(ctx, st)
		if ctx.Err() != nil {
			return
		}
		var delay time.Duration
		switch {
		case err != nil:
			retry++
			delay = backoff(s.opts.RetryDelay, st.src.MaxDelay, retry)
		case st.longPolling():
			retry = 0 // the server held the request: ask again at once
		default:
			retry = 0
			delay = st.src.MinDelay + rand.N(st.src.MaxDelay-st.src.MinDelay+1)
		}
		if delay == 0 {
			continue
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

func (st *state) longPolling() bool {
	st.fetch.Lock()
	defer st.fetch.Unlock()
	return st.src.LongPollTimeout > 0 && st.longPoll
}

// backoff is the delay before retry number n (n >= 1): base grown by 1.6
// per retry, capped at maxDelay, with 20% jitter either way.
func backoff(base, maxDelay time.Duration, n int) time.Duration {
	d := float64(base)
	for i := 1; i < n && d < float64(maxDelay); i++ {
		d *= 1.6
	}
	if maxDelay > 0 && d > float64(maxDelay) {
		d = float64(maxDelay)
	}
	return time.Duration(d * (0.8 + 0.4*rand.Float64()))
}

// once makes one request for the bundle and activates what it brings.
func (s *Syncer) once(ctx context.Context, st *state) error {
	st.fetch.Lock()
	defer st.fetch.Unlock()
	src := st.src
	start := time.Now().UTC()
	st.setStatus(func(ss *Status) { ss.LastRequest = start })

	raw, etag, longPoll, err := s.download(ctx, st)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		st.etag = ""
		s.fail(st, err)
		return err
	}
	st.longPoll = longPoll
	st.setStatus(func(ss *Status) { ss.LastSuccessfulRequest = start })
	if raw == nil { // 304: unchanged
		if etag != "" {
			st.etag = etag
		}
		st.setStatus(func(ss *Status) { ss.setError(nil) })
		return nil
	}
	st.setStatus(func(ss *Status) { ss.LastSuccessfulDownload = start; ss.Size = len(raw) })
	sum := sha256.Sum256(raw)
	if sum == st.active {
		st.etag = etag
		st.setStatus(func(ss *Status) { ss.setError(nil) })
		return nil
	}
	if err := s.activate(ctx, st, raw); err != nil {
		// Forget the ETag so that the next request fetches the bundle
		// again rather than being told it is unchanged.
		st.etag = ""
		s.fail(st, err)
		return err
	}
	st.etag = etag
	if src.Persist {
		if err := s.persist(src, raw); err != nil {
			s.log.Error("bundle not persisted", "bundle", src.Name, "err", err)
		}
	}
	return nil
}

func (s *Syncer) fail(st *state, err error) {
	s.log.Error("bundle update failed; the last good bundle keeps serving", "bundle", st.src.Name, "err", err)
	st.setStatus(func(ss *Status) { ss.setError(err) })
}

// download requests the bundle; raw is nil when the server answers 304.
func (s *Syncer) download(ctx context.Context, st *state) (raw []byte, etag string, longPoll bool, err error) {
	src := st.src
	wait := src.LongPollTimeout > 0 && st.longPoll
	if wait {
		// The server holds the request up to the timeout; allow it that
		// long and a margin for the answer.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, src.LongPollTimeout+30*time.Second)
		defer cancel()
	}
	req, err := src.Service.NewRequest(ctx, http.MethodGet, src.Resource, nil)
	if err != nil {
		return nil, "", false, err
	}
	if st.etag != "" {
		req.Header.Set("If-None-Match", st.etag)
	}
	prefer := "modes=snapshot"
	if wait {
		prefer += ";wait=" + strconv.FormatInt(int64(src.LongPollTimeout/time.Second), 10)
	}
	req.Header.Set("Prefer", prefer)
	var resp *http.Response
	if wait {
		resp, err = src.Service.DoWait(req)
	} else {
		resp, err = src.Service.Do(req)
	}
	if err != nil {
		return nil, "", false, fmt.Errorf("request failed: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		raw, err := io.ReadAll(io.LimitReader(resp.Body, src.SizeLimit+1))
		if err != nil {
			return nil, "", false, fmt.Errorf("reading the bundle: %w", err)
		}
		if int64(len(raw)) > src.SizeLimit {
			return nil, "", false, fmt.Errorf("%w: the download exceeds %d bytes", ErrTooLarge, src.SizeLimit)
		}
		return raw, resp.Header.Get("ETag"), resp.Header.Get("Content-Type") == longPollType, nil
	case http.StatusNotModified:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return nil, resp.Header.Get("ETag"), st.longPoll, nil
	default:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return nil, "", false, HTTPError{StatusCode: resp.StatusCode}
	}
}

// activate checks an archive, turns it into a bundle and hands it over.
func (s *Syncer) activate(ctx context.Context, st *state, raw []byte) error {
	src := st.src
	signed, err := checkArchive(raw, src.SizeLimit)
	if err != nil {
		return err
	}
	if _, err := readOPA(raw, src.Name, src.SizeLimit, src.verify, signed); err != nil {
		return err
	}
	b, err := s.opts.Compile(ctx, raw)
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if err := s.opts.OnBundle(ctx, b); err != nil {
		return fmt.Errorf("activating the bundle: %w", err)
	}
	st.active = sha256.Sum256(raw)
	now := time.Now().UTC()
	st.setStatus(func(ss *Status) {
		ss.setError(nil)
		ss.ActiveRevision = b.Manifest.Revision
		ss.LastSuccessfulActivation = now
	})
	s.log.Info("bundle activated", "bundle", src.Name, "revision", b.Manifest.Revision, "bytes", len(raw))
	return nil
}

// persistPath is where a bundle's last good archive is kept.
func (s *Syncer) persistPath(src *Source) string {
	return filepath.Join(s.opts.Dir, src.Name, "bundle.tar.gz")
}

// persist writes the archive as downloaded (signature included) by
// writing a temporary file, syncing it and renaming it into place.
func (s *Syncer) persist(src *Source, raw []byte) error {
	dst := s.persistPath(src)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".bundle-*.tar.gz")
	if err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, bytes.NewReader(raw)); err != nil {
		tmp.Close()
		return fmt.Errorf("persist: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("persist: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	if d, err := os.Open(filepath.Dir(dst)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// loadPersisted activates the bundle persisted by an earlier run, checked
// and verified again as if it had just been downloaded.
func (s *Syncer) loadPersisted(ctx context.Context, st *state) error {
	st.fetch.Lock()
	defer st.fetch.Unlock()
	if st.fromDisk {
		return nil
	}
	st.fromDisk = true
	raw, err := os.ReadFile(s.persistPath(st.src))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if int64(len(raw)) > st.src.SizeLimit {
		return fmt.Errorf("%w: the persisted bundle exceeds %d bytes", ErrTooLarge, st.src.SizeLimit)
	}
	if err := s.activate(ctx, st, raw); err != nil {
		st.setStatus(func(ss *Status) { ss.setError(err) })
		return err
	}
	st.setStatus(func(ss *Status) { ss.Size = len(raw) })
	return nil
}

func (st *state) setStatus(f func(*Status)) {
	st.mu.Lock()
	defer st.mu.Unlock()
	f(&st.status)
}

func (ss *Status) setError(err error) {
	ss.Code, ss.Message, ss.Errors, ss.HTTPCode = "", "", nil, ""
	if err == nil {
		return
	}
	ss.Code = errCode
	ss.Message = err.Error()
	var he HTTPError
	if errors.As(err, &he) {
		ss.HTTPCode = strconv.Itoa(he.StatusCode)
	}
	// As OPA lists a bundle's parse and compile errors one by one.
	var ce compiler.Errors
	var ae ast.Errors
	switch {
	case errors.As(err, &ce):
		for _, e := range ce {
			ss.Errors = append(ss.Errors, e.Error())
		}
	case errors.As(err, &ae):
		for _, e := range ae {
			ss.Errors = append(ss.Errors, e.Error())
		}
	}
}
