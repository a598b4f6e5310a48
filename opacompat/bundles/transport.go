package bundles

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// transport sits under OPA's downloader, between it and the service's
// HTTP transport, for what the downloader does not do the way nexus does:
//
//   - it asks for snapshot bundles only (the downloader offers to take
//     deltas, which nexus does not apply);
//   - it bounds a held long poll to the timeout asked for and a margin,
//     so that a server that never answers is given up on;
//   - it reads each bundle whole, at most the size limit (the downloader
//     bounds each file, not the download), and keeps it for the callback,
//     which compiles and persists it and, when the reader refused it, tells
//     why;
//   - after a failed attempt, when the downloader has forgotten its ETag,
//     it drops the If-None-Match that OPA's REST client keeps sending
//     (a header set on the client stays set), so that the bundle is
//     fetched again rather than answered with 304.
type transport struct {
	src *Source

	mu   sync.Mutex
	kept []byte // the last bundle downloaded, until taken
	etag string // the downloader's ETag, as the last update left it
}

// longPollMargin is how long past the long polling timeout a held request
// may take to be answered.
const longPollMargin = 30 * time.Second

// otherBodyLimit bounds what is read of an answer other than a bundle.
const otherBodyLimit = 4 << 10

// wrap wraps each HTTP transport of the service's client
// (opaconfig.Service.Client).
func (t *transport) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper{t: t, next: next}
}

// take returns the bundle kept from the last request, and forgets it.
func (t *transport) take() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	raw := t.kept
	t.kept = nil
	return raw
}

// setETag records the ETag the downloader holds after an update; "" when
// the update failed.
func (t *transport) setETag(etag string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.etag = etag
}

func (t *transport) keep(raw []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.kept = raw
}

type roundTripper struct {
	t    *transport
	next http.RoundTripper
}

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	rt.t.mu.Lock()
	rt.t.kept = nil
	forgotten := rt.t.etag == ""
	rt.t.mu.Unlock()
	ctx := req.Context()
	prefer := req.Header.Get("Prefer")
	if wait := rt.t.src.LongPollTimeout; wait > 0 && strings.Contains(prefer, "wait=") {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait+longPollMargin)
		defer cancel()
	}
	req = req.Clone(ctx)
	if forgotten {
		req.Header.Del("If-None-Match")
	}
	if prefer != "" {
		req.Header.Set("Prefer", strings.Replace(prefer, "modes=snapshot,delta", "modes=snapshot", 1))
	}
	resp, err := rt.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	limit := int64(otherBodyLimit)
	if resp.StatusCode == http.StatusOK {
		limit = rt.t.src.SizeLimit
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if int64(len(body)) > limit {
		if resp.StatusCode == http.StatusOK {
			return nil, fmt.Errorf("%w: the download exceeds %d bytes", ErrTooLarge, limit)
		}
		body = body[:limit]
	}
	if resp.StatusCode == http.StatusOK {
		rt.t.keep(body)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}
