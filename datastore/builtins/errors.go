package builtins

import (
	"fmt"

	"github.com/nexuspdp/nexus/datastore"
)

// ErrTenantDepth is returned (wrapped) when a resource's inherited tenant
// lies further up its ancestors than the walk goes (32 steps). It matches
// datastore.ErrDepthExceeded: the check has no answer and is denied.
var ErrTenantDepth = fmt.Errorf("builtins: a resource's inherited tenant is too far up: %w", datastore.ErrDepthExceeded)
