// Package cluster keeps several nexus replicas, each with its own
// relationship store, in step through a NATS JetStream stream: the
// cluster's log. Writes go to the log from any replica; every replica
// applies the log in order; checks stay local and never cross the network.
//
//	store, err := datastore.Open(ctx, datastore.Config{Path: "/var/lib/nexus/rel.db"})
//	r, err := cluster.New(ctx, cluster.Config{
//		URLs: []string{"nats://nats-0:4222", "nats://nats-1:4222", "nats://nats-2:4222"},
//		Name: "prod", Store: store,
//		OnPolicy: func(ctx context.Context, p cluster.Policy) error { return server.LoadBundle(ctx, p.Bundle) },
//	})
//	defer store.Close()
//	defer r.Close()
//	rev, err := r.Write(ctx, datastore.WriteRequest{Touches: touches}) // applied here when it returns
//	err = otherReplica.WaitRevision(ctx, rev)                          // a consistency token, elsewhere
//	res, err := store.Check(ctx, datastore.CheckRequest{...})          // reads are local
//
// # The log
//
// The log is the JetStream stream "nexus-<Name>" (subject
// "nexus.<Name>.log"); it is the source of truth. One write (relationship
// touches and deletes with their preconditions, a schema, a policy load) is
// one message. Every replica, the writer included, reads the stream in
// order (an ephemeral pull consumer from its next sequence) and applies
// each message as the revision equal to the message's stream sequence:
// the same revision means the same state on every replica, and a
// replica's revision is how far it has read. A message is applied to the
// state the messages before it left, atomically; the messages that arrive
// while one commit runs share the next bbolt transaction
// (datastore.BoltStore.ApplyRun), and while they come faster than one
// commit each, a transaction gathers them for 20 ms (5 ms while a write
// of this replica or a check with a consistency token waits for them), so
// that a busy replica commits at most 50 times a second. Commits do not wait for the disk
// (datastore.BoltStore.Unsync): the log is the source of truth, a replica
// whose process dies finds every commit in the file, and one whose
// operating system stopped moves the file aside and restores from a
// snapshot and the log.
//
// A write is first checked against the local store (the tuples against
// the schema, the preconditions against the tuples). A conditional write
// (one with preconditions, or a schema, which may orphan tuples) is then
// published with JetStream's expected-last-sequence header set to the
// revision it was checked at, so it is accepted only if it applies to
// exactly that state; if another write came first, the replica applies
// the log up to the sequence JetStream reports, checks again and publishes
// again (conflicts and retries are counted). The conditional writes of one
// replica go one at a time. A write without preconditions depends only on
// the schema; it is published without an expected sequence and never
// conflicts. Either way every replica checks the message again when it
// applies it; a message that does not apply (possible only for a write
// that raced a schema change, or a malformed message) is recorded at its
// revision with no effect, on every replica alike, and its writer gets the
// reason. A write returns its revision once the local replica has applied
// it, so a client reads its own writes on the replica it wrote to.
//
// Every write has an ID (api.WithWriteID, or a new one) and a deadline,
// 3/5 of Config.WriteTimeout after it started, carried as the headers
// Nexus-Write-Id and Nexus-Deadline; every attempt has the message id
// "<id>@<deadline>", so JetStream drops a copy it already has. Every
// replica, deciding from the log alone, records without effect an entry
// the log took after its deadline, an entry whose write ID it applied
// within SeenWindow (the IDs and outcomes are kept in the store with the
// apply), and an entry that a fence (below) voided. A write answers:
// its revision (written, and applied here); ErrUnavailable (not written,
// ever: it never left this replica, or the log took it late, or this
// replica appended a fence for it and applied the fence without it); or
// ErrOutcomeUnknown. A retry with the same write ID gets the first
// outcome.
//
// # Consistency tokens
//
// A write's revision is a consistency token, like SpiceDB's ZedTokens or
// OpenFGA's HIGHER_CONSISTENCY: a check that carries it waits
// (WaitRevision, at most Config.MaxWait) until this replica has applied
// it, then answers from local data; if the replica is still behind it
// fails with a *RevisionError and the check must fail closed. Sync waits
// until the replica has applied everything the log held when it was
// called.
//
// # Snapshots and retention
//
// The stream's retention is bounded (Config.MaxAge, Config.MaxBytes).
// Older history lives in snapshots: every Config.SnapshotInterval a
// replica whose revision moved writes a copy of its bbolt file to the
// object store bucket "nexus-<Name>" as "snapshot/<revision>", unless one
// of that revision is already there, and keeps the newest
// Config.SnapshotsKept. A replica that starts empty, or finds that the log
// no longer holds the entries after its revision, restores the newest
// snapshot of this log (datastore.BoltStore.Restore: the downloaded file
// becomes the store's data file, with memory bounded whatever its size)
// and replays the log from there.
//
// # Policies
//
// LoadPolicy puts a bundle in the object store ("policy/<sha256>") and
// appends a load to the log. Each replica applying it fetches the bundle,
// checks its digest, keeps it in its store (so that a restart without NATS
// and a snapshot carry it) and hands it to Config.OnPolicy; Policy returns
// the one in force.
//
// # Degraded mode
//
// Without NATS (or without a JetStream quorum) a replica goes on answering
// reads from its store; writes fail at once with ErrUnavailable; Status
// and the nexus_cluster_degraded and nexus_cluster_writes_available
// metrics say why, with the lag. The client pings its server every 2s and
// leaves one that misses two pings for another. The NATS
// client reconnects by itself and the replica catches up from its
// revision. Nothing acknowledged is lost: a write is acknowledged only
// once the log holds it (on Config.StreamReplicas servers) and this
// replica applied it.
//
// # Metrics
//
// On Config.Registerer: nexus_cluster_applied_revision,
// nexus_cluster_stream_last_sequence, nexus_cluster_lag_messages,
// nexus_cluster_lag_seconds, nexus_cluster_apply_duration_seconds (one
// transaction), nexus_cluster_apply_run_entries (messages in it),
// nexus_cluster_snapshot_age_seconds, nexus_cluster_snapshot_revision,
// nexus_cluster_conflicts_total, nexus_cluster_retries_total,
// nexus_cluster_rejected_entries_total, nexus_cluster_snapshots_total,
// nexus_cluster_policy_load_errors_total, nexus_cluster_degraded,
// nexus_cluster_writes_available and nexus_cluster_write_outcomes_total
// (by outcome: written, refused, not_written, unknown).
//
// # Caveats
//
//   - The store must take writes only through its Replica: a direct
//     Write, WriteSchema or Import numbers its own revision and the replica
//     then refuses to follow the log (ErrDiverged). A data directory
//     written in single-node mode cannot join a cluster; start from an
//     empty one and import through the cluster.
//   - The stream and the bucket are created with this replica's settings
//     if missing; an existing stream keeps its own (change them with the
//     NATS tools).
//   - After an operating system crash or power cut, a replica's store
//     starts empty (the old file is kept as <path>.torn-<time>) and is
//     restored from the newest snapshot plus the log's tail: it needs a
//     snapshot, or a log that still holds every entry.
//   - While a restore runs, the data directory holds the downloaded
//     snapshot beside the old data file (reads go on from the old one
//     until the switch).
//   - A write is at most one NATS message (max_payload, 1 MiB by default:
//     some 25,000 tuples of 40 characters); ErrTooLarge otherwise. Larger
//     imports go in several writes.
//   - Config.OnPolicy runs on the goroutine that applies the log: a slow
//     callback delays every later entry.
package cluster
