package pdp_test

import (
	"testing"

	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/fixture"
)

type testFixture struct {
	store *datastore.BoltStore
}

// newFixture is a real bbolt store with the drive schema and demo data.
func newFixture(t *testing.T) *testFixture {
	t.Helper()
	return &testFixture{store: fixture.DemoStore(t)}
}
