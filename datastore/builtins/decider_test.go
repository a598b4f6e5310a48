package builtins_test

import (
	"context"
	"encoding/json"

	"github.com/nexuspdp/nexus/datastore/builtins"
	"github.com/nexuspdp/nexus/defaults/policy"
	"github.com/nexuspdp/nexus/pdp/decider"
)

// docDecider is the default policy's Go decider on input documents, as
// the core asks it for a check it cannot give as fields.
type docDecider struct{ d decider.Decider }

func (d *docDecider) Envoy(ctx context.Context, in, dst []byte) ([]byte, bool) {
	return d.d.Eval(ctx, policy.EnvoyEntrypoint, in, dst)
}

func (d *docDecider) Authz(ctx context.Context, in, dst []byte) ([]byte, bool) {
	return d.d.Eval(ctx, policy.AuthzEntrypoint, in, dst)
}

// newDefaultPolicy is the default policy's Go decider over s for data
// holding route table t and the subject and tenant headers.
func newDefaultPolicy(s builtins.Store, t *builtins.Table, subjectHeader, tenantHeader string) *docDecider {
	text, err := builtins.AppendTable(nil, *t)
	if err != nil {
		panic(err)
	}
	data, err := json.Marshal(map[string]any{"nexus": map[string]any{
		"route_table": string(text), "subject_header": subjectHeader, "tenant_header": tenantHeader,
	}})
	if err != nil {
		panic(err)
	}
	d := policy.Decider(s)(&decider.Policy{WasmSHA256: policy.WasmSHA256, Data: data,
		EnvoyEntrypoint: policy.EnvoyEntrypoint, AuthzEntrypoint: policy.AuthzEntrypoint})
	if d == nil {
		return nil
	}
	return &docDecider{d}
}
