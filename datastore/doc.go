// Package datastore is nexus' relationship store: a schema, relationship
// tuples and Zanzibar-style checks on an embedded bbolt file.
//
//	s, err := datastore.Open(ctx, datastore.Config{Path: "/var/lib/nexus/rel.db"})
//	sc, err := schema.Parse(yamlBytes)
//	_, err = s.WriteSchema(ctx, sc, false)
//	_, err = s.Write(ctx, datastore.WriteRequest{Touches: []api.Tuple{t}})
//	bob := api.Subject{Type: "user", ID: "bob"}
//	res, err := s.Check(ctx, datastore.CheckRequest{Object: api.Object{Type: "file", ID: "f1"}, Permission: "read", Subject: bob})
//	roles, err := s.AppendRoles(ctx, nil, bob, "acme")
//
// # Schema
//
// The schema language (YAML with types, relations, permission
// expressions, tenancy and tenant roles) is package schema's: Parse
// reads and validates one, and a store checks every tuple it writes
// against the schema in force (schema.Schema.ValidateTuple). The store
// compiles a schema it is given into its own form for checks, numbered by
// its name dictionary; the *schema.Schema itself is never changed.
//
// # Checks
//
// Check(object, p, subject) is true iff the expression of p holds: a
// relation holds for a subject stored directly on it, for a subject that is
// the relation itself (group:eng#member has member on group:eng), and for a
// userset tuple (folder:d#viewer@group:eng#member) whose userset holds the
// subject, recursively. Every relation or permission evaluated inside
// another counts one level of depth; beyond Config.MaxDepth the check fails
// with ErrDepthExceeded, never with an answer. A relation or permission
// reached again while it is being evaluated (a cycle) counts as false on
// that path; results are memoised within one check unless they depended on
// such a cut. With - (exclusion), cycles through the excluded operand have
// no canonical meaning: avoid them.
//
// AppendRoles(dst, subject, tenant) is one range read of the subject-first
// index: the relations r of tuples tenant:<tenant>#r@subject. It returns
// direct role assignments only; use Check for roles granted through groups.
//
// Within one View, AppendRoles reads all the tuples that name the subject
// (when there are at most a few dozen) and keeps them. A later Check of
// that subject (without a relation), in the same View and without a
// trace, takes every relation or permission it evaluates, p first, as
// false at once when none of those tuples is in a relation that can hold
// the subject in it (the relations its expression reaches through
// references, arrows and usersets): no walk below it could find the
// subject, so none is made. A deny that a walk would have reached only
// past Config.MaxDepth can so be answered false instead of
// ErrDepthExceeded. This is how the default policy asks: the subject's
// roles first, then the relationship check.
//
// Checks and role reads go through bbolt's cursor, and every index key
// they read is checked against its checksum before it is used.
//
// # Storage
//
// One bbolt file. Buckets: meta (format, revision, schema, changelog
// start), dict (interned type and relation names), obj (object-first
// index), subj (subject-first index) and log (revision -> change set). The
// key encoding is documented in package datastore/internal/index. Each Write, schema write and
// import batch is one bbolt transaction, fsynced before it returns, and
// adds one to the revision. Concurrent Writes are combined into one bbolt
// transaction (as bbolt's Batch does, waiting up to 2 ms to gather them,
// but on the first Write's goroutine) and keep one revision each. The
// changelog keeps the last Config.ChangelogRetention revisions for Watch.
//
// # Import
//
// Import streams NDJSON, CSV or text. An input of at most
// ImportOptions.BatchSize tuples is one transaction. A larger one is read
// and validated completely first, sorted in runs spilled to temporary files
// beside the data file, then merged into both indexes in key order,
// 250,000 tuples per transaction: writes stay sequential and pages full,
// which is what keeps a 20-million-tuple import fast and its file small.
// Lines are at most 4,096 bytes. An invalid line stops the import before
// anything is written. While the
// merge runs, readers see the tuples committed so far (and the two indexes
// may briefly disagree on the tuples of the current transaction's range).
// Compact rewrites a closed data file with no free pages.
//
// # Locking
//
// One process at a time may have a data file open for writing (bbolt's
// exclusive flock); read-only opens share a lock that excludes writers.
// Open waits Config.OpenTimeout for the lock, then fails with a
// *LockedError that names the file and, on Linux, the process holding it.
//
// # Damage
//
// bbolt keeps no checksums of its pages and reads them through a memory
// map, trusting what it finds: on a damaged page it panics or faults. The
// store never lets that out:
//
//   - Open reads the file's structure before anything else: both meta
//     pages, the free list, the root bucket, and the root and branch pages
//     of every bucket (under one page in a hundred: 7-11 ms for a file of 2
//     million tuples); a damaged one fails Open with a *CorruptError. When
//     the newer meta page is invalid, bbolt reads the file as of the
//     transaction before it, as after a crash during a commit, and Open
//     logs a warning: that last write may be lost.
//   - Every method recovers a panic of bbolt, and a fault on the memory map
//     (debug.SetPanicOnFault), as a *CorruptError; a key that does not
//     decode is one too. The first one makes the store unhealthy: Health
//     reports it, writes are refused (a damaged free list could hand out
//     pages in use), reads answer where they can. Reopen the store on a
//     repaired file to clear it.
//   - Verify checks every page and every key, for the damage Open does
//     not read: the leaves of the indexes and the changelog.
//   - Scrub makes the same page and key checks on an open store while it
//     serves, in short read transactions at a bounded rate; damage it
//     finds makes the store unhealthy and fails every read from then on.
//
// A flipped bit inside a key that still decodes changes a tuple. Each key
// of the two indexes therefore holds the CRC-32C of the key as its value,
// and every read of an index key (checks, role reads, Read, the lookups'
// walks) compares them first: a key that does not match is a
// *CorruptError, handled as above, never an answer. Verify and Scrub
// check every key the same way (and find the change anyway: the two
// indexes no longer hold the same tuples). Keys of files written before
// the checksum have an empty value and are read unchecked (Verify and
// Scrub count them as Unchecked); a key is checked once it is written
// again.
//
// # Caveats
//
//   - AppendRoles does not follow groups; LookupResources and
//     LookupSubjects walk the graph and then check every candidate, so they
//     are for listings, not for the hot path.
//   - A schema write that removes relations or accepted subject types scans
//     the stored tuples of the affected types.
//   - Wildcard subjects (user:*) and caveats are not supported.
//   - Checks and role reads share one bbolt read transaction, and its
//     buckets, across goroutines (snapshot.go), which bbolt's documentation
//     calls unsafe in general. It is safe here: on a read-only transaction
//     bbolt's cursors write no Go memory they share but atomic statistics,
//     each goroutine has its own cursor, and the pages are mapped read-only;
//     TestSharedSnapshotHammer runs checks on 8 goroutines and writes under
//     -race. It is needed: a transaction of its own costs each check 13
//     allocations (664 bytes), 1.5 to 2.5 µs more CPU (a direct check then
//     takes three times as long, one three folders deep twice as long) and
//     bbolt's global meta lock, twice (BenchmarkSnapshot). Rerun both when
//     upgrading bbolt.
//   - While a write runs (its 2 ms wait for company, its commit and fsync)
//     the shared transaction is retired, since a write that grows the file
//     must remap it, and checks begin transactions of their own: under a
//     steady stream of writes, checks pay that cost. A replica's apply
//     runs (ApplyRun) of tuple writes keep it while the file is small
//     enough that they cannot remap it (under some 4 GB).
package datastore
