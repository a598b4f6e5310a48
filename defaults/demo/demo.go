// Package demo loads the drive schema and demo tuples (package drive)
// into a relationship store: what nexus serve writes on first start.
//
//	n, err := demo.Load(ctx, store)
package demo

import (
	"bytes"
	"context"
	"fmt"

	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/defaults/drive"
)

// Load writes the drive schema and the demo tuples into s and returns the
// number of tuples imported.
func Load(ctx context.Context, s datastore.Store) (int64, error) {
	sc, err := datastore.ParseSchema(drive.Schema)
	if err != nil {
		return 0, fmt.Errorf("demo: schema: %w", err)
	}
	if _, err := s.WriteSchema(ctx, sc, false); err != nil {
		return 0, fmt.Errorf("demo: schema: %w", err)
	}
	st, err := s.Import(ctx, bytes.NewReader(drive.Tuples), datastore.ImportOptions{Format: datastore.FormatText})
	if err != nil {
		return 0, fmt.Errorf("demo: tuples: %w", err)
	}
	return st.Tuples, nil
}
