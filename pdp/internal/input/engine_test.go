package input

import (
	"context"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/pdp/internal/prune"
)

// echoEntrypoint answers the whole input, as the policy holds it.
const echoEntrypoint = "nexus/echo/out"

// echoEngine is an engine whose policy answers its input.
func echoEngine(tb testing.TB) *engine.Engine {
	tb.Helper()
	ctx := context.Background()
	b, err := compiler.Compile(ctx, compiler.Options{
		Modules:     map[string]string{"echo.rego": "package nexus.echo\n\nout := input\n"},
		Entrypoints: []string{echoEntrypoint},
	})
	if err != nil {
		tb.Fatal(err)
	}
	e, err := engine.New(ctx, engine.Config{MaxInstances: 1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = e.Close(context.Background()) })
	if err := e.Load(ctx, b); err != nil {
		tb.Fatal(err)
	}
	return e
}

// TestWriteEnvoyInEngine: the policy reads the same input whether the
// document is written into its memory by WriteEnvoy (EvalInput) or
// written as JSON by AppendEnvoy and read by the engine (EvalTrusted, as
// the server does today): the policy's answer, its input, is the same
// JSON.
func TestWriteEnvoyInEngine(t *testing.T) {
	e := echoEngine(t)
	ctx := context.Background()
	opts := map[string]Options{"whole": {}, "skip-body": {SkipBody: true}, "any-order": {AnyOrder: true}}
	for _, name := range []string{"default-policy", "jwt-claims", "rare", "body", "nothing", "http-whole", "whole-attributes"} {
		opts["keep-"+name] = Options{Keep: prune.New(keepTrees[name])}
		opts["keep-"+name+"-any-order"] = Options{Keep: prune.New(keepTrees[name]), AnyOrder: true}
	}
	check := func(what string, js []byte, write func(Writer) error) {
		t.Helper()
		want, err := e.EvalTrusted(ctx, echoEntrypoint, js, nil)
		if err != nil {
			t.Fatalf("%s: from JSON: %v", what, err)
		}
		var in engine.Input
		if err := write(in.Writer()); err != nil {
			t.Fatalf("%s: writing: %v", what, err)
		}
		got, err := e.EvalInput(ctx, echoEntrypoint, &in, nil)
		if err != nil {
			t.Fatalf("%s: written: %v", what, err)
		}
		if string(got) != string(want) {
			t.Fatalf("%s: the policy reads\n%s\nwritten, and\n%s\nfrom JSON", what, got, want)
		}
	}
	n := 0
	for rn, req := range writerRequests() {
		for on, o := range opts {
			js, err := AppendEnvoy(nil, req, o)
			if err != nil {
				if werr := WriteEnvoy(&goWriter{}, req, o); werr == nil || werr.Error() != err.Error() {
					t.Fatalf("%s/%s: AppendEnvoy: %v, WriteEnvoy: %v", rn, on, err, werr)
				}
				continue
			}
			check(rn+"/"+on, js, func(w Writer) error { return WriteEnvoy(w, req, o) })
			n++
		}
	}
	for rn, h := range httpRequests() {
		for _, source := range []string{"", "10.0.0.1:5", "[::1]:8080"} {
			js, err := AppendHTTP(nil, h, source, Options{})
			if err != nil {
				continue
			}
			check(rn+"/http/"+source, js, func(w Writer) error { return WriteHTTP(w, h, source, Options{}) })
			check(rn+"/http-any-order/"+source, js, func(w Writer) error { return WriteHTTP(w, h, source, Options{AnyOrder: true}) })
			n++
		}
	}
	if n < 300 {
		t.Fatalf("only %d documents compared", n)
	}
}

// BenchmarkEvalInput: a policy that reads its whole input (answering
// it), with the input written as JSON and read by the engine, as the
// server does today, or written into the policy's memory by WriteEnvoy.
func BenchmarkEvalInput(b *testing.B) {
	e := echoEngine(b)
	ctx := context.Background()
	istio := istioRequest()
	istio.Attributes.MetadataContext = nil
	istio.Attributes.TlsSession = nil
	for _, rc := range []struct {
		name string
		req  *authv3.CheckRequest
	}{{"istio", istio}, {"jwt", jwtRequest()}} {
		in, out := make([]byte, 0, 4096), make([]byte, 0, 8192)
		b.Run(rc.name+"/json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if in, err = AppendEnvoy(in[:0], rc.req, Options{}); err != nil {
					b.Fatal(err)
				}
				if out, err = e.EvalTrusted(ctx, echoEntrypoint, in, out[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(rc.name+"/writer", func(b *testing.B) {
			b.ReportAllocs()
			var in engine.Input
			for b.Loop() {
				if err := WriteEnvoy(in.Writer(), rc.req, Options{}); err != nil {
					b.Fatal(err)
				}
				var err error
				if out, err = e.EvalInput(ctx, echoEntrypoint, &in, out[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
