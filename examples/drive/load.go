package drive

import (
	"bytes"
	"context"
	"fmt"

	"github.com/nexuspdp/nexus/datastore"
)

// Load writes the drive schema and the demo tuples into s and returns the
// number of tuples imported.
func Load(ctx context.Context, s datastore.Store) (int64, error) {
	sc, err := datastore.ParseSchema(Schema)
	if err != nil {
		return 0, fmt.Errorf("drive: schema: %w", err)
	}
	if _, err := s.WriteSchema(ctx, sc, false); err != nil {
		return 0, fmt.Errorf("drive: schema: %w", err)
	}
	st, err := s.Import(ctx, bytes.NewReader(Tuples), datastore.ImportOptions{Format: datastore.FormatText})
	if err != nil {
		return 0, fmt.Errorf("drive: tuples: %w", err)
	}
	return st.Tuples, nil
}
