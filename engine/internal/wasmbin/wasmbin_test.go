package wasmbin

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// loopModule is a hand-assembled module shaped like OPA's: it imports its
// memory and a function from "env" and exports a function that loops until
// its argument counts down to zero.
//
//	(module
//	  (import "env" "f" (func (param i32)))
//	  (import "env" "memory" (memory 2))
//	  (func (export "spin") (param i32) (result i32)
//	    (loop (br_if 0 (local.tee 0 (i32.sub (local.get 0) (i32.const 1)))))
//	    (local.get 0)))
var loopModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
	// type: (i32)->() and (i32)->(i32)
	0x01, 0x0a, 0x02, 0x60, 0x01, 0x7f, 0x00, 0x60, 0x01, 0x7f, 0x01, 0x7f,
	// import: env.f func 0; env.memory min 2
	0x02, 0x17, 0x02,
	0x03, 'e', 'n', 'v', 0x01, 'f', 0x00, 0x00,
	0x03, 'e', 'n', 'v', 0x06, 'm', 'e', 'm', 'o', 'r', 'y', 0x02, 0x00, 0x02,
	// function: one, type 1
	0x03, 0x02, 0x01, 0x01,
	// export: "spin" func 1
	0x07, 0x08, 0x01, 0x04, 's', 'p', 'i', 'n', 0x00, 0x01,
	// code
	0x0a, 0x12, 0x01, 0x10, 0x00,
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
	if _, err := r.NewHostModuleBuilder("env").NewFunctionBuilder().
		WithFunc(func(int32) {}).Export("f").Instantiate(ctx); err != nil {
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
	spin := mod.ExportedFunction("spin")
	res, err := spin.Call(ctx, 1000)
	if err != nil || res[0] != 0 {
		t.Fatalf("spin = %v, %v", res, err)
	}
	flag, ok := mod.ExportedGlobal(InterruptGlobal).(api.MutableGlobal)
	if !ok {
		t.Fatal("no mutable interrupt global")
	}
	flag.Set(1)
	if _, err := spin.Call(ctx, 1000); err == nil {
		t.Fatal("loop ran with the interrupt flag raised")
	}
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
