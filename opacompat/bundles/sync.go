package bundles

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	opabundle "github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/download"
	"github.com/open-policy-agent/opa/v1/plugins"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
)

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
}

// Validate fills defaults and rejects nonsense.
func (o *Options) Validate() error {
	if o.Compile == nil || o.OnBundle == nil {
		return errors.New("bundlesync: Compile and OnBundle are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
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
	dl  *download.Downloader
	tr  *transport

	trigger sync.Mutex // one Trigger at a time per bundle
	polled  bool       // Run polls it: Trigger leaves it alone

	act      sync.Mutex // one activation at a time; guards what follows
	active   [32]byte   // sha256 of the active archive
	fromDisk bool       // the persisted bundle was tried
	last     error      // the last attempt's error

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
		st := &state{src: src, tr: &transport{src: src}}
		st.status = Status{Name: src.Name, Type: "snapshot"}
		client, err := src.Service.Client(st.tr.wrap)
		if err != nil {
			return nil, fmt.Errorf("bundlesync: bundle %s: %w", src.Name, err)
		}
		cfg, err := downloadConfig(src)
		if err != nil {
			return nil, fmt.Errorf("bundlesync: bundle %s: %w", src.Name, err)
		}
		st.dl = download.New(cfg, client, src.Resource).
			WithBundleName(src.Name).
			WithSizeLimitBytes(src.SizeLimit).
			WithBundleVerificationConfig(src.verify).
			WithBundleParserOpts(ast.ParserOptions{RegoVersion: ast.DefaultRegoVersion}).
			WithCallback(func(ctx context.Context, u download.Update) error { return s.update(ctx, st, u) })
		s.state = append(s.state, st)
	}
	return s, nil
}

// downloadConfig is the source's polling as OPA's downloader takes it.
func downloadConfig(src *Source) (download.Config, error) {
	secs := func(d time.Duration) *int64 { n := int64(d / time.Second); return &n }
	trigger := plugins.TriggerMode(src.Trigger)
	cfg := download.Config{Trigger: &trigger, Polling: download.PollingConfig{
		MinDelaySeconds: secs(src.MinDelay),
		MaxDelaySeconds: secs(src.MaxDelay),
	}}
	if src.LongPollTimeout > 0 {
		cfg.Polling.LongPollingTimeoutSeconds = secs(src.LongPollTimeout)
	}
	if src.SupersededETagTTL > 0 {
		cfg.Polling.SupersededETagTTLSeconds = secs(src.SupersededETagTTL)
	}
	return cfg, cfg.ValidateAndInjectDefaults()
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
// periodic bundle with OPA's downloader until ctx ends. It returns when
// every downloader has stopped, at once when no bundle is periodic.
func (s *Syncer) Run(ctx context.Context) {
	_ = s.LoadPersisted(ctx) // logged; the downloads go on
	var polled []*state
	for _, st := range s.state {
		if st.src.Trigger != TriggerPeriodic {
			continue
		}
		st.trigger.Lock()
		st.polled = true
		st.trigger.Unlock()
		st.dl.Start(ctx)
		polled = append(polled, st)
	}
	if len(polled) == 0 {
		return
	}
	<-ctx.Done()
	for _, st := range polled {
		st.dl.Stop(context.Background())
	}
}

// Trigger downloads once each bundle that Run does not poll (the way to
// update bundles whose trigger is manual) and returns the errors met.
func (s *Syncer) Trigger(ctx context.Context) error {
	var errs []error
	for _, st := range s.state {
		if err := s.trigger(ctx, st); err != nil {
			errs = append(errs, fmt.Errorf("bundle %s: %w", st.src.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Syncer) trigger(ctx context.Context, st *state) error {
	st.trigger.Lock()
	defer st.trigger.Unlock()
	if st.polled {
		return nil
	}
	if err := st.dl.Trigger(ctx); err != nil {
		if ctx.Err() != nil {
			return err
		}
		// The downloader joins the download's error with update's; update
		// recorded the one that says what went wrong.
		st.act.Lock()
		defer st.act.Unlock()
		if st.last != nil {
			return st.last
		}
		return err
	}
	return nil
}

// update is the downloader's callback: it records the attempt and
// activates a new bundle. An error makes the downloader back off.
func (s *Syncer) update(ctx context.Context, st *state, u download.Update) error {
	st.act.Lock()
	defer st.act.Unlock()
	raw := st.tr.take()
	now := time.Now().UTC()
	st.setStatus(func(ss *Status) { ss.LastRequest = now })
	err := s.apply(ctx, st, u, raw, now)
	if err != nil && u.Error != nil && ctx.Err() != nil {
		return err // stopping: not a failure of the bundle
	}
	st.last = err
	etag := u.ETag
	if err != nil {
		etag = ""
	}
	st.tr.setETag(etag)
	if err != nil {
		// Forget the ETag so that the next request fetches the bundle
		// again rather than being told it is unchanged.
		st.dl.SetCache("")
		s.log.Error("bundle update failed; the last good bundle keeps serving", "bundle", st.src.Name, "err", err)
	}
	st.setStatus(func(ss *Status) { ss.setError(err) })
	return err
}

func (s *Syncer) apply(ctx context.Context, st *state, u download.Update, raw []byte, now time.Time) error {
	if u.Error != nil {
		if raw == nil { // no bundle came: the request failed
			return u.Error
		}
		return explain(u.Error, raw, st.src)
	}
	st.setStatus(func(ss *Status) { ss.LastSuccessfulRequest = now })
	if u.Bundle == nil { // 304: unchanged
		return nil
	}
	if raw == nil {
		return errors.New("bundle: the download was not kept") // cannot happen: transport keeps each 200
	}
	st.setStatus(func(ss *Status) { ss.LastSuccessfulDownload = now; ss.Size = len(raw) })
	if sha256.Sum256(raw) == st.active {
		return nil
	}
	if err := s.activate(ctx, st, raw, u.Bundle); err != nil {
		return err
	}
	if st.src.Persist {
		if err := s.persist(st.src, raw); err != nil {
			s.log.Error("bundle not persisted", "bundle", st.src.Name, "err", err)
		}
	}
	return nil
}

// activate checks an archive that OPA's reader read (as ob), turns it
// into a bundle and hands it over.
func (s *Syncer) activate(ctx context.Context, st *state, raw []byte, ob *opabundle.Bundle) error {
	if err := checkArchive(raw, st.src.SizeLimit); err != nil {
		return err
	}
	if ob.Type() == opabundle.DeltaBundleType {
		return ErrDelta
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
		ss.ActiveRevision = b.Manifest.Revision
		ss.LastSuccessfulActivation = now
	})
	s.log.Info("bundle activated", "bundle", st.src.Name, "revision", b.Manifest.Revision, "bytes", len(raw))
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
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".bundle-*.tar.gz")
	if err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	_, err = tmp.Write(raw)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// loadPersisted activates the bundle persisted by an earlier run, read,
// checked and verified again as if it had just been downloaded.
func (s *Syncer) loadPersisted(ctx context.Context, st *state) error {
	st.act.Lock()
	defer st.act.Unlock()
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
		err = fmt.Errorf("%w: the persisted bundle exceeds %d bytes", ErrTooLarge, st.src.SizeLimit)
	}
	var ob *opabundle.Bundle
	if err == nil {
		ob, err = readArchive(raw, st.src)
	}
	if err == nil {
		err = s.activate(ctx, st, raw, ob)
	}
	if err != nil {
		st.setStatus(func(ss *Status) { ss.setError(err) })
		return err
	}
	st.setStatus(func(ss *Status) { ss.setError(nil); ss.Size = len(raw) })
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
	var he download.HTTPError
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
