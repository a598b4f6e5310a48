// Package engine evaluates compiled policy bundles (package bundle holds
// the format, package compiler builds them) under wazero, in process, in
// microseconds.
//
// One bundle is one wazero runtime and one compiled module, shared by a
// bounded pool of instances; an instance is used by one evaluation at a
// time. The bundle's data is parsed once, into the heap of a first
// instance; its memory is then snapshot and copied into every new instance,
// so no instance parses data again. The input is read in Go (JSON, or
// written ahead by the caller into an Input, with EvalInput) and written
// into the instance's heap directly as the values of OPA's Wasm runtime:
// its structs, its hash tables with its hash function and bucket order,
// its allocator's block headers. Evaluation then runs the module's eval
// export on an eval context written the same way, and the result is
// serialised in Go from the runtime's values in memory; no JSON is parsed
// or printed inside the module. The heap pointer is reset each time, so
// an instance's memory does not grow from one evaluation to the next. In
// steady state an evaluation allocates nothing on the Go heap.
//
// Host builtins: every builtin OPA's Wasm runtime leaves to the host
// (sprintf, time.*, io.jwt.*, crypto.*, ...) is backed by OPA's Go
// implementation; other packages add builtins through a Registry, with a
// fast path for functions of strings returning a boolean or strings
// (nexus.check, nexus.roles) that reads the arguments straight from the
// instance's memory. Arguments are read from the runtime's values in
// memory and results written back as such values, without JSON. Package datastore/builtins registers nexus'
// relationship builtins over a store (builtins.NewEngine).
//
// Example:
//
//	reg := engine.NewRegistry()
//	allowed := func(ctx context.Context, object, permission, subject string) (bool, error) {
//		return object == "file:f1" && subject == "user:bob", nil
//	}
//	if err := reg.Register("nexus.check", 0, engine.Predicate3(allowed)); err != nil {
//		return err
//	}
//	e, err := engine.New(ctx, engine.Config{Builtins: reg})
//	if err != nil {
//		return err
//	}
//	defer e.Close(ctx)
//	b, err := bundle.Read(f) // or compiler.Compile
//	if err != nil {
//		return err
//	}
//	if err := e.Load(ctx, b); err != nil {
//		return err
//	}
//	out, err := e.Eval(ctx, "nexus/authz/allow", input, buf[:0])
//	switch {
//	case errors.Is(err, engine.ErrUndefined): // deny
//	case err != nil: // deny; an *EvalError's Code is a stable reason
//	default: // out is the result's JSON: true, false or an object
//	}
//
// # Caveats
//
//   - Deadlines: the module is rewritten so every loop that calls a
//     function or holds another loop counts down a budget and, when it is
//     spent, asks the host whether to stop; a watchdog (about every
//     millisecond) spends the budget of evaluations whose context is done,
//     and the instance is then discarded. A host builtin running at that
//     time must honour its context itself.
//   - Builtins are resolved when a bundle is loaded: register them before
//     Load.
//   - Errors returned by registered builtins abort the evaluation
//     (CodeBuiltin), while errors of OPA's builtins make the call
//     undefined, as in OPA.
//   - OPA's Wasm runtime, not this package, computes most values: where it
//     differs from OPA's evaluator (set order in JSON, float formatting) the
//     engine differs too; the differential corpus lists those cases. Input
//     JSON is read in Go, as OPA's evaluator reads it: a string with an
//     unpaired surrogate escape ("\ud800") holds U+FFFD (the runtime's own
//     parser, which EvalTrusted still uses for text that is not JSON,
//     aborts on it or misreads it).
//   - Input must be UTF-8 JSON; Eval rejects anything else with an
//     *EvalError of code CodeInvalidInput. EvalTrusted, for input the
//     caller's own encoder wrote, hands UTF-8 input that is not JSON to
//     OPA's Wasm runtime's parser (a parse failure is no input at all).
//   - The value layout is that of the OPA Wasm runtime the compiler in
//     go.mod emits (ABI 1.2 and later of OPA v1); the writer's tests
//     compare it with that runtime's own parser, value by value.
package engine
