package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/cluster"
)

// TestSeedWrite: a seed write answered "outcome unknown" is asked again
// under the same write ID (new on the first attempt only), at most
// seedAttempts times; any other answer is final.
func TestSeedWrite(t *testing.T) {
	n := &clusterNode{log: slog.New(slog.DiscardHandler)}
	unknown := fmt.Errorf("%w: %w", cluster.ErrOutcomeUnknown, cluster.ErrNotApplied)
	other := errors.New("refused")
	for _, tc := range []struct {
		name    string
		answers []error
		want    error
		calls   int
	}{
		{"written at once", []error{nil}, nil, 1},
		{"applied on the third asking", []error{unknown, unknown, nil}, nil, 3},
		{"another error is final", []error{other, nil}, other, 1},
		{"unknown after every attempt", []error{unknown, unknown, unknown, unknown, unknown, nil}, cluster.ErrOutcomeUnknown, seedAttempts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ids []string
			var fresh []bool
			err := n.seedWrite(context.Background(), "demo-schema", func(ctx context.Context) error {
				id, f := api.WriteID(ctx)
				ids, fresh = append(ids, id), append(fresh, f)
				return tc.answers[len(ids)-1]
			})
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if len(ids) != tc.calls {
				t.Fatalf("%d attempts, want %d", len(ids), tc.calls)
			}
			for i, id := range ids {
				if id == "" || id != ids[0] {
					t.Fatalf("attempt %d under ID %q, the first under %q", i+1, id, ids[0])
				}
				if fresh[i] != (i == 0) {
					t.Fatalf("attempt %d: fresh = %v, want %v", i+1, fresh[i], i == 0)
				}
			}
		})
	}
}
