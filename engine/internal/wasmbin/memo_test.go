package wasmbin

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/nexuspdp/nexus/compiler"
)

// compileRego is the Wasm module nexus compiles for one Rego module.
func compileRego(t testing.TB, src, entrypoint string) []byte {
	t.Helper()
	b, err := compiler.Compile(context.Background(), compiler.Options{Modules: map[string]string{"p.rego": src}, Entrypoints: []string{entrypoint}})
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return b.Wasm
}

// codeBodies returns the function bodies of a module by function index.
func codeBodies(t *testing.T, mod []byte) map[uint32][]byte {
	t.Helper()
	secs, _, err := readSections(mod)
	if err != nil {
		t.Fatal(err)
	}
	var imported uint32
	out := map[uint32][]byte{}
	for _, s := range secs {
		switch s.id {
		case secImport:
			var im imports
			_, im, _, err = dropMemoryImport(s.body)
			imported = im.funcs
		case secCode:
			err = eachBody(s.body, func(i uint32, fn []byte) error {
				out[imported+i] = fn
				return nil
			})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestMemoRewrite checks which modules get the table memo: a policy's
// rule functions are found by their prologue, the three memo functions get
// the new bodies, every other function keeps its own (but for the loop
// checks), and the module compiles in wazero (which validates the new
// bodies). Policies with `with`, and modules without names, keep the
// runtime's memo. The engine's corpus and differential tests evaluate
// every policy through the rewritten memo against OPA.
func TestMemoRewrite(t *testing.T) {
	src := "package x\n\na := input.a\n\nb := a + 1\n\nc := [a, b, b]\n\nallow if c[2] > 2\n"
	mod := compileRego(t, src, "x/allow")
	secs, _, err := readSections(mod)
	if err != nil {
		t.Fatal(err)
	}
	im, err := dropMemoryImportOf(secs)
	flag, imported, builtin0 := im.flag, im.funcs, im.builtin0
	if err != nil {
		t.Fatal(err)
	}
	plan, ok := planMemo(secs, imported, flag+1)
	if !ok {
		t.Fatal("no memo plan for a policy without with")
	}
	names := functionNames(secs)
	var rules []uint32
	for n, idx := range names {
		if strings.HasPrefix(n, "g0.data.x.") {
			rules = append(rules, idx)
		}
	}
	if len(rules) != 4 {
		t.Fatalf("found rule functions %v, want a, b, c and allow", rules)
	}
	for _, idx := range rules {
		if idx < plan.lo || idx >= plan.lo+plan.n {
			t.Errorf("rule function %d outside the table %d..%d", idx, plan.lo, plan.lo+plan.n-1)
		}
	}

	out, err := Rewrite(mod, 0)
	if err != nil {
		t.Fatal(err)
	}
	before, after := codeBodies(t, mod), codeBodies(t, out)
	want := plan.bodies(0)
	for idx, fn := range after {
		switch idx {
		case plan.init, plan.insert, plan.get:
			if !bytes.Equal(fn, want[idx]) {
				t.Errorf("function %d is not the table memo's", idx)
			}
		default:
			if instrumented, err := instrumentFunc(before[idx], loopCheck(flag, builtin0)); err != nil || !bytes.Equal(fn, instrumented) {
				t.Errorf("function %d changed beyond its loop checks (%v)", idx, err)
			}
		}
	}
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	if _, err := r.CompileModule(ctx, out); err != nil {
		t.Fatalf("wazero refuses the rewritten module: %v", err)
	}

	t.Run("with keeps the runtime's memo", func(t *testing.T) {
		mod := compileRego(t, src+"\nw if allow with input.a as 5\n", "x/w")
		secs, _, _ := readSections(mod)
		im, _ := dropMemoryImportOf(secs)
		imported := im.funcs
		if _, ok := planMemo(secs, imported, 0); ok {
			t.Fatal("a policy with `with` got the table memo")
		}
	})
	t.Run("no names keeps the runtime's memo", func(t *testing.T) {
		var kept []section
		for _, s := range secs {
			if s.id != secCustom {
				kept = append(kept, s)
			}
		}
		if _, ok := planMemo(kept, imported, 0); ok {
			t.Fatal("a module without a name section got the table memo")
		}
	})
	t.Run("too many rules keep the runtime's memo", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("package x\n\nr0 := input.a\n")
		for i := 1; i <= memoMaxSlots; i++ {
			fmt.Fprintf(&b, "r%d := r%d\n", i, i-1)
		}
		fmt.Fprintf(&b, "allow if r%d\n", memoMaxSlots)
		mod := compileRego(t, b.String(), "x/allow")
		secs, _, _ := readSections(mod)
		im, _ := dropMemoryImportOf(secs)
		imported := im.funcs
		if _, ok := planMemo(secs, imported, 0); ok {
			t.Fatalf("a policy of %d rules got the table memo", memoMaxSlots+2)
		}
	})
}

func TestSignedLEB(t *testing.T) {
	for _, v := range []int32{0, 1, 63, 64, 127, 128, 747, 8191, 8192, 1 << 30, -1, -64, -65, -(1 << 31), 1<<31 - 1} {
		b := appendS32(nil, v)
		got, n, err := readS32(b, 0)
		if err != nil || got != v || n != len(b) {
			t.Errorf("%d: encoded % x, read %d (%d bytes, %v)", v, b, got, n, err)
		}
	}
}
