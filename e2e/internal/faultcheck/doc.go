// Package faultcheck records what clients of a nexus cluster saw while
// processes failed under them, and checks it against the replicas' final
// state: no acknowledged write lost, no write answered "not written"
// applied, no check with a consistency token answered from older data,
// replicas identical.
//
// Client classifies each write's answer (written, not written, unknown,
// not sent) from both the answers that name their outcome and the older
// ones that only say "nothing was written"; History holds the ops,
// checks and nemesis events and Verify compares them with the listings.
//
// # Caveats
//
// Verify can decide a tuple's final state only for the workload History
// describes: one client per tuple, ops alternating grant and revoke, the
// next op only after an acknowledged one.
package faultcheck
