package wasmbin

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// loopModule is a hand-assembled module shaped like OPA's: it imports its
// memory and env.opa_builtin0 and exports two functions that loop until
// their argument counts down to zero, one calling the import on each
// iteration (a loop that counts the budget down and stops when the host
// says so), one not (an innermost loop without calls, which the rewrite
// leaves as it is).
//
//	(module
//	  (import "env" "opa_builtin0" (func (param i32 i32) (result i32)))
//	  (import "env" "memory" (memory 2))
//	  (func (export "spin") (param i32) (result i32)
//	    (loop (drop (call 0 (local.get 0) (i32.const 0)))
//	      (br_if 0 (local.tee 0 (i32.sub (local.get 0) (i32.const 1)))))
//	    (local.get 0))
//	  (func (export "leaf") (param i32) (result i32)
//	    (loop (br_if 0 (local.tee 0 (i32.sub (local.get 0) (i32.const 1)))))
//	    (local.get 0)))
var loopModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
	// type: (i32 i32)->(i32) and (i32)->(i32)
	0x01, 0x0c, 0x02, 0x60, 0x02, 0x7f, 0x7f, 0x01, 0x7f, 0x60, 0x01, 0x7f, 0x01, 0x7f,
	// import: env.opa_builtin0 func 0; env.memory min 2
	0x02, 0x22, 0x02,
	0x03, 'e', 'n', 'v', 0x0c, 'o', 'p', 'a', '_', 'b', 'u', 'i', 'l', 't', 'i', 'n', '0', 0x00, 0x00,
	0x03, 'e', 'n', 'v', 0x06, 'm', 'e', 'm', 'o', 'r', 'y', 0x02, 0x00, 0x02,
	// function: two, type 1
	0x03, 0x03, 0x02, 0x01, 0x01,
	// export: "spin" func 1, "leaf" func 2
	0x07, 0x0f, 0x02, 0x04, 's', 'p', 'i', 'n', 0x00, 0x01, 0x04, 'l', 'e', 'a', 'f', 0x00, 0x02,
	// code
	0x0a, 0x2a, 0x02,
	0x17, 0x00,
	0x03, 0x40, // loop
	0x20, 0x00, 0x41, 0x00, 0x10, 0x00, 0x1a, // local.get 0; i32.const 0; call 0; drop
	0x20, 0x00, 0x41, 0x01, 0x6b, 0x22, 0x00, // local.get 0; i32.const 1; i32.sub; local.tee 0
	0x0d, 0x00, // br_if 0
	0x0b,       // end loop
	0x20, 0x00, // local.get 0
	0x0b, // end
	0x10, 0x00,
	0x03, 0x40, // loop
	0x20, 0x00, 0x41, 0x01, 0x6b, 0x22, 0x00, // local.get 0; i32.const 1; i32.sub; local.tee 0
	0x0d, 0x00, // br_if 0
	0x0b,       // end loop
	0x20, 0x00, // local.get 0
	0x0b, // end
}

func TestRewrite(t *testing.T) {
	out, err := Rewrite(loopModule, 16)
	if err != nil {
		t.Fatalf("rewrite: %v", err)
	}
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	// The host: the loop's own calls (the counter as the id) answer 0;
	// a yield (YieldID) answers stop, after giving the budget back.
	var yields, budget int
	var stop uint32
	if _, err := r.NewHostModuleBuilder("env").NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, m api.Module, stack []uint64) {
			if uint32(stack[0]) != YieldID {
				stack[0] = 0
				return
			}
			yields++
			m.ExportedGlobal(InterruptGlobal).(api.MutableGlobal).Set(uint64(budget))
			stack[0] = uint64(stop)
		}), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).
		Export("opa_builtin0").Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	cm, err := r.CompileModule(ctx, out)
	if err != nil {
		t.Fatalf("compile rewritten module: %v", err)
	}
	if len(cm.ImportedMemories()) != 0 {
		t.Fatal("memory is still imported")
	}
	mod, err := r.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	if got := mod.Memory().Size(); got != 2*65536 {
		t.Fatalf("memory = %d bytes, want 2 pages", got)
	}
	if _, ok := mod.Memory().Grow(14); !ok {
		t.Fatal("cannot grow to the limit")
	}
	if _, ok := mod.Memory().Grow(1); ok {
		t.Fatal("grew past the limit")
	}
	flag, ok := mod.ExportedGlobal(InterruptGlobal).(api.MutableGlobal)
	if !ok {
		t.Fatal("no mutable loop budget")
	}
	if got := int32(flag.Get()); got != InitialBudget {
		t.Fatalf("initial budget = %d, want %d", got, InitialBudget)
	}
	// 1000 iterations from a budget of 64 given back as 100 each time:
	// the first yield after 64, then one every 100.
	spin := mod.ExportedFunction("spin")
	budget = 100
	res, err := spin.Call(ctx, 1000)
	if err != nil || res[0] != 0 {
		t.Fatalf("spin = %v, %v", res, err)
	}
	if yields != 10 {
		t.Fatalf("yields = %d, want 10 (after 64, 164, ..., 964 iterations)", yields)
	}
	// The host stops a loop by spending its budget: the next iteration
	// asks, and traps on the answer.
	flag.Set(0)
	stop = 1
	if _, err := spin.Call(ctx, 1000); err == nil {
		t.Fatal("loop ran on after the host answered stop")
	}
	// An innermost loop without calls has no check: it runs its course.
	flag.Set(0)
	if res, err := mod.ExportedFunction("leaf").Call(ctx, 1000); err != nil || res[0] != 0 {
		t.Fatalf("leaf = %v, %v; want 0 (no check in a loop without calls)", res, err)
	}
	stop = 0
	// A second instance of the same compiled module is independent.
	mod2, err := r.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatalf("second instance: %v", err)
	}
	if res, err := mod2.ExportedFunction("spin").Call(ctx, 5); err != nil || res[0] != 0 {
		t.Fatalf("second instance spin = %v, %v", res, err)
	}
}

func TestRewriteRejects(t *testing.T) {
	tests := []struct {
		name string
		mod  []byte
	}{
		{name: "empty", mod: nil},
		{name: "bad magic", mod: []byte("\x00asx\x01\x00\x00\x00")},
		{name: "no memory import", mod: []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}},
		{name: "truncated", mod: loopModule[:len(loopModule)-5]},
		{name: "oversized section", mod: append(bytes.Clone(loopModule[:8]), 0x01, 0xff, 0xff, 0xff, 0xff, 0x0f)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Rewrite(tc.mod, 16); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
	if _, err := Rewrite(loopModule, 1); !errors.Is(err, ErrMalformed) {
		t.Fatalf("limit below the import's minimum: %v", err)
	}
}

// FuzzRewrite feeds random modules to Rewrite: errors, never panics; what
// it accepts wazero can decode or rejects cleanly.
func FuzzRewrite(f *testing.F) {
	f.Add(loopModule)
	f.Add([]byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00})
	// A policy module as nexus compiles it: names, rule functions and the
	// memo the rewrite replaces.
	f.Add(compileRego(f, "package x\n\na := input.a\n\nallow if a > 1\n", "x/allow"))
	f.Fuzz(func(t *testing.T, mod []byte) {
		out, err := Rewrite(mod, 16)
		if err != nil {
			return
		}
		if !bytes.HasPrefix(out, header) {
			t.Fatal("output lacks the header")
		}
	})
}

// TestCheckedLoops holds which loops get the interrupt check: a loop that
// calls a function (directly, indirectly, inside a block or an if) or
// holds another loop, never an innermost loop without calls.
func TestCheckedLoops(t *testing.T) {
	const (
		loop  = 0x03
		block = 0x02
		iF    = 0x04
		els   = 0x05
		end   = 0x0b
		void  = 0x40
	)
	for _, tc := range []struct {
		name string
		body []byte // the instructions, after the locals
		want []bool
	}{
		{"leaf", []byte{loop, void, 0x0c, 0x00, end, end}, []bool{false}},
		{"call", []byte{loop, void, 0x10, 0x00, end, end}, []bool{true}},
		{"call in a block", []byte{loop, void, block, void, 0x10, 0x00, end, end, end}, []bool{true}},
		{"call_indirect", []byte{loop, void, 0x41, 0x00, 0x11, 0x00, 0x00, end, end}, []bool{true}},
		{"call after the loop", []byte{loop, void, end, 0x10, 0x00, end}, []bool{false}},
		{"nested", []byte{loop, void, loop, void, 0x0c, 0x00, end, 0x0c, 0x00, end, end}, []bool{true, false}},
		{"loop in an else", []byte{loop, void, 0x41, 0x00, iF, void, els, loop, void, end, end, end, end}, []bool{true, false}},
		{"siblings", []byte{loop, void, end, loop, void, 0x10, 0x00, end, end}, []bool{false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fn := append([]byte{0x00}, tc.body...) // no locals
			got, err := checkedLoops(fn, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("checked = %v, want %v", got, tc.want)
			}
			check := loopCheck(7, 0)
			out, err := instrumentFunc(fn, check)
			if err != nil {
				t.Fatal(err)
			}
			checks, want := bytes.Count(out, check), 0
			for _, c := range tc.want {
				if c {
					want++
				}
			}
			if checks != want || len(out) != len(fn)+want*len(check) {
				t.Fatalf("instrumented body has %d checks (%d bytes), want %d: % x", checks, len(out), want, out)
			}
		})
	}
}
