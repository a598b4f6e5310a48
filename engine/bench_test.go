package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/engine"
)

// rbacPolicy is the RBAC profile: a tenant role granting actions on a
// resource type, no graph walk.
const rbacPolicy = `package rbac

default allow := false

allow if {
	some role in data.rbac.assignments[input.tenant][input.user]
	data.rbac.grants[role][input.resource.type][input.action]
}
`

const rbacUsers, rbacTenants, rbacRoles = 1750, 11, 20

// rbacData builds assignments for 1,750 users over 11 tenants and grants
// for 20 roles (about 2,200 role assignments).
func rbacData() map[string]any {
	assignments := map[string]any{}
	for t := range rbacTenants {
		assignments[fmt.Sprintf("tenant-%d", t)] = map[string]any{}
	}
	for u := range rbacUsers {
		t := u % rbacTenants
		roles := []any{fmt.Sprintf("role-%d", u%rbacRoles)}
		if u%4 == 0 {
			roles = append(roles, fmt.Sprintf("role-%d", (u+7)%rbacRoles))
		}
		assignments[fmt.Sprintf("tenant-%d", t)].(map[string]any)[fmt.Sprintf("user-%d", u)] = roles
	}
	types := []string{"file", "folder", "document", "report", "invoice"}
	actions := []string{"read", "write", "delete", "share"}
	grants := map[string]any{}
	for r := range rbacRoles {
		byType := map[string]any{}
		for i, ty := range types {
			acts := map[string]any{}
			for j, a := range actions {
				if (r+i+j)%3 != 0 {
					acts[a] = true
				}
			}
			byType[ty] = acts
		}
		grants[fmt.Sprintf("role-%d", r)] = byType
	}
	return map[string]any{"rbac": map[string]any{"assignments": assignments, "grants": grants}}
}

// user-42 is in tenant-9 (42 % 11) with role-2.
var rbacInput = []byte(`{"user":"user-42","tenant":"tenant-9","action":"read","resource":{"type":"file","id":"file-1"}}`)

func rbacBundle(tb testing.TB) *bundle.Bundle {
	tb.Helper()
	b, err := compiler.Compile(context.Background(), compiler.Options{
		Modules:     map[string]string{"rbac.rego": rbacPolicy},
		Data:        rbacData(),
		Entrypoints: []string{"rbac/allow"},
		Revision:    "bench",
	})
	if err != nil {
		tb.Fatalf("compile: %v", err)
	}
	return b
}

func opaPrepared(tb testing.TB) rego.PreparedEvalQuery {
	tb.Helper()
	pq, err := rego.New(
		rego.Query("data.rbac.allow"),
		rego.Module("rbac.rego", rbacPolicy),
		rego.Store(inmem.NewFromObject(rbacData())),
	).PrepareForEval(context.Background())
	if err != nil {
		tb.Fatalf("prepare: %v", err)
	}
	return pq
}

// reportCPU adds the process CPU time per operation since start, a figure
// that holds up on a machine shared with other work (wall time does not).
func reportCPU(b *testing.B, start time.Duration) {
	b.Helper()
	if cpu := processCPU() - start; cpu > 0 && b.N > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkEvalRBAC compares the engine with OPA's prepared evaluator on the
// same policy, data and input.
func BenchmarkEvalRBAC(b *testing.B) {
	ctx := context.Background()
	b.Run("engine", func(b *testing.B) {
		e := newEngine(b, engine.Config{}, rbacBundle(b))
		dst := make([]byte, 0, 64)
		out, err := e.Eval(ctx, "rbac/allow", rbacInput, dst)
		if err != nil || string(out) != "true" {
			b.Fatalf("eval = %s, %v; want true", out, err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu := processCPU()
		for b.Loop() {
			dst, err = e.Eval(ctx, "rbac/allow", rbacInput, dst[:0])
			if err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu)
	})
	b.Run("engine-trusted", func(b *testing.B) {
		e := newEngine(b, engine.Config{}, rbacBundle(b))
		dst := make([]byte, 0, 64)
		out, err := e.EvalTrusted(ctx, "rbac/allow", rbacInput, dst)
		if err != nil || string(out) != "true" {
			b.Fatalf("eval = %s, %v; want true", out, err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu := processCPU()
		for b.Loop() {
			dst, err = e.EvalTrusted(ctx, "rbac/allow", rbacInput, dst[:0])
			if err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu)
	})
	b.Run("engine-parallel", func(b *testing.B) {
		e := newEngine(b, engine.Config{}, rbacBundle(b))
		b.ReportAllocs()
		b.ResetTimer()
		cpu := processCPU()
		defer func() { reportCPU(b, cpu) }()
		b.RunParallel(func(pb *testing.PB) {
			dst := make([]byte, 0, 64)
			var err error
			for pb.Next() {
				dst, err = e.Eval(ctx, "rbac/allow", rbacInput, dst[:0])
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("opa-parsed-input", func(b *testing.B) {
		pq := opaPrepared(b)
		in, err := ast.ParseTerm(string(rbacInput))
		if err != nil {
			b.Fatal(err)
		}
		rs, err := pq.Eval(ctx, rego.EvalParsedInput(in.Value))
		if err != nil || len(rs) != 1 || rs[0].Expressions[0].Value != true {
			b.Fatalf("opa = %v, %v; want true", rs, err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu := processCPU()
		for b.Loop() {
			if _, err := pq.Eval(ctx, rego.EvalParsedInput(in.Value)); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu)
	})
	b.Run("opa-json-input", func(b *testing.B) {
		pq := opaPrepared(b)
		b.ReportAllocs()
		b.ResetTimer()
		cpu := processCPU()
		defer func() { reportCPU(b, cpu) }()
		for b.Loop() {
			var in any
			if err := json.Unmarshal(rbacInput, &in); err != nil {
				b.Fatal(err)
			}
			if _, err := pq.Eval(ctx, rego.EvalInput(in)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("opa-parallel", func(b *testing.B) {
		pq := opaPrepared(b)
		in, _ := ast.ParseTerm(string(rbacInput))
		b.ReportAllocs()
		b.ResetTimer()
		cpu := processCPU()
		defer func() { reportCPU(b, cpu) }()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := pq.Eval(ctx, rego.EvalParsedInput(in.Value)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkLoadRBAC measures Load of the RBAC bundle (compile the module,
// instantiate, parse the data, snapshot) and reports the memory of one
// instance.
func BenchmarkLoadRBAC(b *testing.B) {
	ctx := context.Background()
	bundle := rbacBundle(b)
	e := newEngine(b, engine.Config{MaxInstances: 1}, nil)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	defer func() { reportCPU(b, cpu) }()
	for b.Loop() {
		if err := e.Load(ctx, bundle); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	st := e.Stats()
	b.ReportMetric(float64(st.InstanceBytes), "instance-bytes")
	b.ReportMetric(float64(st.SnapshotBytes), "snapshot-bytes")
	b.ReportMetric(float64(len(bundle.Data)), "data-json-bytes")
}
