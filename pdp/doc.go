// Package pdp is nexus' decision core: it turns a request into a decision.
// It owns the policy's lifecycle (load, entrypoint checks, atomic hot
// swap), the data the server merges into the policy from the schema
// (tenant roles, permissions, the route index), the input views that
// write only what the loaded policy reads, the decision cache, the
// decision log and the decision metrics.
//
// Transports (Envoy ext_authz gRPC, forward auth, AuthZEN, the
// Permit-compatible API) only map their wire formats to one of the three
// kinds of request the core decides and map the Decision back:
//
//	p, err := pdp.New(ctx, pdp.Config{Engine: eng, Store: store, Policy: b})
//	if err != nil { ... }
//	d, err := p.Envoy(ctx, pdp.IfaceGRPC, checkRequest)   // opa-envoy-plugin input
//	d, err = p.HTTP(ctx, pdp.IfaceHTTP, &httpRequest, addr) // forward auth
//	d, err = p.Check(ctx, pdp.IfaceAuthZEN, &check)          // application check
//
// # Caveats
//
// The decision path fails closed: an input that cannot be built, an
// evaluation error or a result that is not a decision all deny, and the
// error's Code is the stable reason (also the metric label). Mapping codes
// to HTTP and gRPC statuses is the transports' job.
//
// The decision cache keys a decision by the input the policy reads, the
// policy and the data revision, which is only right when the decision is
// a function of those. An entrypoint whose policy can call a
// non-deterministic builtin (time.now_ns, rand.intn, http.send, ...), or
// whose bundle does not say so (one not compiled by nexus), bypasses the
// cache (Decision.Cache is CacheDisabled) unless
// Config.CacheNondeterministic opts in.
package pdp
