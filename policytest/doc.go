// Package policytest runs the Rego unit tests of a policy (rules named
// test_*, as OPA's test runner discovers them) on two targets and compares
// them: OPA's Go evaluator, and the policy compiled by nexus' compiler to
// WebAssembly and run by nexus' engine, as `nexus serve` runs it. A test
// whose outcome differs between the targets is reported as a disagreement.
//
// Example:
//
//	rep, err := policytest.Run(ctx, policytest.Options{
//		Paths:   []string{"policy/"},
//		Targets: policytest.Both,
//		Store:   store, // backs nexus.check and the other store builtins
//	})
//	if err != nil { ... } // the policy does not load or compile
//	for _, r := range rep.Results { ... }
//
// # Caveats
//
//   - nexus' store builtins (nexus.check, nexus.roles, ...) read
//     Options.Store on both targets, through the same store methods; an
//     error from the store aborts the evaluation on both, as it does in
//     nexus serve.
//   - The Go evaluator stops at the first body of a rule that holds; the
//     Wasm may evaluate the others too, so a store builtin that fails in a
//     later body makes the targets disagree. That is reported, as it is
//     what nexus serve would do.
//   - A test name defined more than once is run separately per definition
//     on the Go evaluator (as OPA does) but cannot be on the Wasm, where
//     the definitions form one rule: such tests are run on the Go
//     evaluator only.
//   - Rules named todo_* are reported as skipped on both targets.
package policytest
