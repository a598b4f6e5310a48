package lab

import (
	"testing"

	"github.com/nexuspdp/nexus/datastore/schema"
)

// TestSchemaHasNoTenancy: the data sets hold no resource's tenant, so
// their schema requires none (the drive's does) and inherits none.
func TestSchemaHasNoTenancy(t *testing.T) {
	sc, err := schema.Parse(Schema())
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range sc.Types() {
		if tn := sc.Tenancy(typ); tn.Required || len(tn.Inherit) > 0 {
			t.Errorf("type %s has a tenancy: %+v", typ, tn)
		}
	}
	if len(sc.Permissions("file")) == 0 || len(sc.RoleGrants("admin")) == 0 {
		t.Error("the drive's types and roles are missing")
	}
}
