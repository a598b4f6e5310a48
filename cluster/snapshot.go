package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexuspdp/nexus/datastore"
)

// Snapshots are objects "snapshot/<revision, 20 digits>" in the cluster's
// bucket: a Backup of a replica's store, with the revision and the log id
// in the object's metadata. One name per revision deduplicates them.
const snapshotPrefix = "snapshot/"

// putWindow bounds the chunks of a snapshot in flight to the object store
// (sent, not yet stored). The client's own bound is 4,000 chunks of 128
// KiB, 500 MiB, with 200 ms to wait when it is reached: a NATS server
// answers 429 (too many requests) to what exceeds a stream's ingest
// buffer (128 MiB by default), and either fails the whole put of a large
// snapshot on a busy server (nats-io/nats.go#1908). 256 chunks are 32 MiB.
const putWindow = 256

// putPaced puts r into the bucket's object store as name, feeding the
// client a chunk only while fewer than putWindow chunks are sent and not
// yet stored: the object store's stream's last sequence tells how many
// are. Each Read of the client's is one chunk.
func putPaced(ctx context.Context, js jetstream.JetStream, obs jetstream.ObjectStore, bucket string, meta jetstream.ObjectMeta, r io.Reader) (*jetstream.ObjectInfo, error) {
	s, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("object store stream: %w", err)
	}
	last := func() (uint64, error) {
		info, err := s.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("object store stream: %w", err)
		}
		return info.State.LastSeq, nil
	}
	base, err := last()
	if err != nil {
		return nil, err
	}
	return obs.Put(ctx, meta, &pacedReader{r: r, last: last, base: base, stored: base})
}

// putStall is how long a paced put waits for the server to store another
// chunk: chunks it dropped are never stored, and the client only notices
// when it reads again.
const putStall = 30 * time.Second

type pacedReader struct {
	r      io.Reader
	last   func() (uint64, error)
	base   uint64 // the stream's last sequence before the put
	sent   uint64 // chunks handed to the client
	stored uint64 // the stream's last sequence as last read
}

func (p *pacedReader) Read(b []byte) (int, error) {
	since := time.Now()
	for p.sent >= p.stored-p.base+putWindow {
		seq, err := p.last()
		if err != nil {
			return 0, err
		}
		if seq > p.stored {
			p.stored, since = seq, time.Now()
			continue
		}
		if time.Since(since) > putStall {
			return 0, fmt.Errorf("the object store stored no chunk in %v (%d of %d sent stored)", putStall, p.stored-p.base, p.sent)
		}
		time.Sleep(5 * time.Millisecond)
	}
	n, err := p.r.Read(b)
	if n > 0 {
		p.sent++
	}
	return n, err
}

func snapshotName(rev datastore.Revision) string {
	return fmt.Sprintf("%s%020d", snapshotPrefix, rev)
}

type snapshotInfo struct {
	name  string
	rev   datastore.Revision
	logID string
	mtime time.Time
	size  uint64
}

// listSnapshots returns the snapshots of this log, newest first.
func (r *Replica) listSnapshots(ctx context.Context, obs jetstream.ObjectStore, logID string) ([]snapshotInfo, error) {
	infos, err := listObjects(ctx, obs)
	if err != nil {
		return nil, err
	}
	var out []snapshotInfo
	for _, oi := range infos {
		if oi.Deleted || !strings.HasPrefix(oi.Name, snapshotPrefix) {
			continue
		}
		rev, err := strconv.ParseUint(strings.TrimPrefix(oi.Name, snapshotPrefix), 10, 64)
		if err != nil || oi.Metadata["log"] != logID {
			continue
		}
		out = append(out, snapshotInfo{name: oi.Name, rev: datastore.Revision(rev), logID: oi.Metadata["log"], mtime: oi.ModTime, size: oi.Size})
	}
	slices.SortFunc(out, func(a, b snapshotInfo) int { return -cmpRev(a.rev, b.rev) })
	if len(out) > 0 {
		r.mu.Lock()
		r.snapRev, r.snapTime = out[0].rev, out[0].mtime
		r.mu.Unlock()
	}
	return out, nil
}

// listAttempt bounds one listing of the bucket. The client lists through an
// ordered consumer that, right after the NATS servers restart and before the
// bucket's stream has a leader, can wait for an end-of-list marker that never
// comes; a fresh attempt creates a fresh consumer.
const listAttempt = 5 * time.Second

// listObjects lists the bucket's objects, none being an empty list, retrying
// an attempt that outlived listAttempt until ctx ends.
func listObjects(ctx context.Context, obs jetstream.ObjectStore) ([]*jetstream.ObjectInfo, error) {
	for {
		actx, cancel := context.WithTimeout(ctx, listAttempt)
		infos, err := obs.List(actx)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrNoObjectsFound):
			return nil, nil
		case err == nil:
			return infos, nil
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		case errors.Is(err, context.DeadlineExceeded):
			continue
		default:
			return nil, err
		}
	}
}

func cmpRev(a, b datastore.Revision) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Snapshot writes a snapshot of this replica's store to the object store
// now, unless one of the same revision is there, keeps the newest
// Config.SnapshotsKept and returns the revision snapshotted. Replicas do it
// every Config.SnapshotInterval by themselves.
func (r *Replica) Snapshot(ctx context.Context) (datastore.Revision, error) {
	if _, err := r.currentStream(); err != nil {
		return 0, err
	}
	return r.writeSnapshot(ctx, true)
}

// maybeSnapshot writes a snapshot if the newest one is older than this
// replica's revision.
func (r *Replica) maybeSnapshot(ctx context.Context) (datastore.Revision, error) {
	if _, err := r.currentStream(); err != nil {
		return 0, nil // degraded: nothing to do
	}
	return r.writeSnapshot(ctx, false)
}

func (r *Replica) writeSnapshot(ctx context.Context, always bool) (datastore.Revision, error) {
	r.mu.Lock()
	obs, newest := r.obs, r.snapRev
	logID := r.logID
	r.mu.Unlock()
	if obs == nil || logID == "" {
		return 0, fmt.Errorf("%w: object store not ready", ErrUnavailable)
	}
	applied := r.Revision()
	if applied == 0 || (!always && applied <= newest) {
		return newest, nil
	}
	snaps, err := r.listSnapshots(ctx, obs, logID)
	if err != nil {
		return 0, fmt.Errorf("cluster: snapshot: list: %w", err)
	}
	tmp, err := os.CreateTemp(dirOf(r.store.Path()), ".nexus-snapshot-*")
	if err != nil {
		return 0, fmt.Errorf("cluster: snapshot: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	rev, size, err := r.store.Backup(ctx, tmp)
	if err != nil {
		return 0, fmt.Errorf("cluster: snapshot: %w", err)
	}
	if len(snaps) > 0 && rev <= snaps[0].rev {
		return snaps[0].rev, nil // another replica was first
	}
	if _, err := tmp.Seek(0, 0); err != nil {
		return 0, fmt.Errorf("cluster: snapshot: %w", err)
	}
	start := time.Now()
	_, err = putPaced(ctx, r.js, obs, r.cfg.bucket(), jetstream.ObjectMeta{
		Name:        snapshotName(rev),
		Description: "nexus store snapshot",
		Metadata:    map[string]string{"revision": strconv.FormatUint(uint64(rev), 10), "log": logID, "replica": r.id},
	}, tmp)
	if err != nil {
		r.m.snapshots.WithLabelValues("write", "error").Inc()
		return 0, fmt.Errorf("cluster: snapshot: put: %w", err)
	}
	r.m.snapshots.WithLabelValues("write", "ok").Inc()
	r.log.Info("snapshot written", "revision", rev, "bytes", size, "took", time.Since(start).Round(time.Millisecond))
	// Keep the newest SnapshotsKept (this one included), then report the
	// snapshot: Status shows it once the bucket is as it will stay.
	snaps = append([]snapshotInfo{{name: snapshotName(rev), rev: rev}}, snaps...)
	for _, s := range snaps[min(len(snaps), r.cfg.SnapshotsKept):] {
		if err := obs.Delete(ctx, s.name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			r.log.Warn("deleting an old snapshot", "name", s.name, "err", err)
		}
	}
	r.mu.Lock()
	if rev > r.snapRev {
		r.snapRev, r.snapTime = rev, time.Now()
	}
	r.mu.Unlock()
	return rev, nil
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, os.PathSeparator); i >= 0 {
		return path[:i+1]
	}
	return "."
}

// fetchTimeout bounds the download of a snapshot of size bytes: a minute,
// plus a second for every 4 MiB.
func fetchTimeout(size uint64) time.Duration {
	return time.Minute + time.Duration(size/(4<<20))*time.Second
}

// restoreNewest restores the newest snapshot of this log if it is newer
// than the store; first is the log's first retained sequence. A snapshot
// that does not reach first is still restored when it is newer (fewer
// entries are missing), and follow reports the rest.
func (r *Replica) restoreNewest(ctx context.Context, first uint64) error {
	r.mu.Lock()
	obs, logID := r.obs, r.logID
	r.mu.Unlock()
	snaps, err := r.listSnapshots(ctx, obs, logID)
	if err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	applied := r.Revision()
	if len(snaps) == 0 || snaps[0].rev <= applied {
		return nil
	}
	s := snaps[0]
	start := time.Now()
	tmp := r.store.Path() + ".restore"
	defer os.Remove(tmp)
	// The client gives a get without a deadline 5s, after which every
	// snapshot larger than 5s of download failed, and was fetched again
	// from the start, for ever.
	gctx, cancel := context.WithTimeout(ctx, fetchTimeout(s.size))
	err = obs.GetFile(gctx, s.name, tmp)
	cancel()
	if err != nil {
		r.m.snapshots.WithLabelValues("restore", "error").Inc()
		return fmt.Errorf("fetch snapshot %s: %w", s.name, err)
	}
	before, _ := r.storedPolicy(ctx)
	rev, err := r.store.Restore(ctx, tmp)
	if err != nil {
		r.m.snapshots.WithLabelValues("restore", "error").Inc()
		return fmt.Errorf("restore snapshot %s: %w", s.name, err)
	}
	r.m.snapshots.WithLabelValues("restore", "ok").Inc()
	r.identified = true
	r.log.Info("restored a snapshot", "revision", rev, "log_first", first, "took", time.Since(start).Round(time.Millisecond))
	// The server gets the snapshot's policy before its revision is
	// published, as with a policy load from the log.
	if after, ok := r.storedPolicy(ctx); ok && after != before {
		if p, err := r.Policy(ctx); err == nil {
			r.policyChanged(ctx, p)
		}
	}
	r.setApplied(uint64(rev))
	return nil
}
