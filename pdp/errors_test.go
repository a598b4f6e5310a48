package pdp_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/pdp"
)

// TestCodeStoreCorrupt: a damaged data file is the store's failure with
// its own code, also when a policy builtin met it (the engine then wraps
// it as a builtin error).
func TestCodeStoreCorrupt(t *testing.T) {
	corrupt := &datastore.CorruptError{Path: "relations.db", Op: "check", Err: errors.New("panic: page 7")}
	tests := []struct {
		name string
		err  error
	}{
		{"direct", corrupt},
		{"wrapped", fmt.Errorf("read: %w", corrupt)},
		{"through a builtin", &engine.EvalError{Code: engine.CodeBuiltin, Entrypoint: "nexus/envoy/result", Message: "nexus.check", Err: fmt.Errorf("datastore: check: %w", corrupt)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := pdp.Code(tc.err); got != pdp.CodeStoreCorrupt {
				t.Fatalf("Code = %q, want %q", got, pdp.CodeStoreCorrupt)
			}
		})
	}
	if got := pdp.Code(&engine.EvalError{Code: engine.CodeBuiltin, Err: errors.New("other")}); got != engine.CodeBuiltin {
		t.Fatalf("another builtin error: Code = %q", got)
	}
}
