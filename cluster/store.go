package cluster

import (
	"context"
	"fmt"

	"github.com/nexuspdp/nexus/datastore"
)

// CheckStore tells, before New, whether store can be a replica's store: it
// is empty, or a replica wrote it (it records the log it follows). A store
// with revisions of its own (written in single-node mode, or by hand) is
// ErrDiverged: its history is not the log's, and the log would overwrite
// or contradict it. Start such a replica on an empty data directory and
// import through the cluster.
func CheckStore(ctx context.Context, store *datastore.BoltStore) error {
	rev, err := store.Revision(ctx)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if rev == 0 {
		return nil
	}
	follows, err := store.ReplicaMeta(ctx, metaStream)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if follows == nil {
		return fmt.Errorf("%w: the store has %d revisions written outside a cluster (single-node mode)", ErrDiverged, rev)
	}
	return nil
}

// IsReplicaStore reports whether a replica wrote store: it then takes
// writes only through the cluster, never directly.
func IsReplicaStore(ctx context.Context, store *datastore.BoltStore) (bool, error) {
	follows, err := store.ReplicaMeta(ctx, metaStream)
	if err != nil {
		return false, fmt.Errorf("cluster: %w", err)
	}
	return follows != nil, nil
}
