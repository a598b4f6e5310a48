package bundle

import "github.com/open-policy-agent/opa/v1/types"

// HostBuiltin declares one builtin that nexus' host provides to policies.
type HostBuiltin struct {
	// Name is the name policies call, e.g. "nexus.check".
	Name string
	// Decl is the builtin's type: its arguments and result.
	Decl *types.Function
	// Description says what the builtin answers.
	Description string
	// Nondeterministic says that the builtin may answer differently for
	// the same arguments within one data revision (it reads a clock,
	// randomness or the network), as OPA marks time.now_ns or http.send.
	// The compiler records which entrypoints can reach such a builtin
	// ([Manifest.Nondeterministic]) and the decision cache does not reuse
	// their decisions. Nexus' relationship builtins are deterministic: they
	// read the store at the revision that keys the cache.
	Nondeterministic bool
}

var stringArray = types.NewArray(nil, types.S)

// NexusBuiltins is the table of nexus' relationship builtins. The compiler
// declares them in its capabilities; the engine's registry provides their
// implementations (package datastore/builtins registers them).
var NexusBuiltins = []HostBuiltin{
	{
		Name:        "nexus.check",
		Decl:        types.NewFunction(types.Args(types.Named("object", types.S), types.Named("permission", types.S), types.Named("subject", types.S)), types.B),
		Description: "Reports whether subject has permission on object.",
	},
	{
		Name:        "nexus.valid_ids",
		Decl:        types.NewFunction(types.Args(types.Named("a", types.S), types.Named("b", types.S), types.Named("c", types.S)), types.B),
		Description: "Reports whether each argument is empty or an ID the store can hold (letters, digits and _-.=+/|~, at most 256 bytes): what a policy checks before it asks the store about a request's IDs.",
	},
	{
		Name:        "nexus.roles",
		Decl:        types.NewFunction(types.Args(types.Named("subject", types.S), types.Named("tenant", types.S)), stringArray),
		Description: "Lists the roles subject holds in tenant.",
	},
	{
		Name:        "nexus.relations",
		Decl:        types.NewFunction(types.Args(types.Named("object", types.S), types.Named("relation", types.S)), stringArray),
		Description: "Lists the subjects of relation on object.",
	},
	{
		Name:        "nexus.lookup_resources",
		Decl:        types.NewFunction(types.Args(types.Named("subject", types.S), types.Named("permission", types.S), types.Named("type", types.S)), stringArray),
		Description: "Lists the objects of type on which subject has permission.",
	},
	{
		Name:        "nexus.lookup_subjects",
		Decl:        types.NewFunction(types.Args(types.Named("object", types.S), types.Named("permission", types.S), types.Named("subject_type", types.S)), stringArray),
		Description: "Lists the subjects of subject_type that have permission on object.",
	},
	{
		Name:        "nexus.envoy_decide",
		Decl:        types.NewFunction(types.Args(types.Named("table", types.S), types.Named("request", types.A)), types.A),
		Description: "The default policy's opa-envoy-plugin result for a proxied request: table is the JSON of its route rules and ABAC conditions ({\"routes\": [[method, action, type, [segment, ...]], ...], \"conditions\": [...]}), request the array [method, path segments, JWT payloads, subject header, tenant header] or its JSON text.",
	},
	{
		Name:        "nexus.resource_tenant",
		Decl:        types.NewFunction(types.Args(types.Named("object", types.S), types.Named("claimed", types.S)), stringArray),
		Description: "The tenant a check on object is judged in: [\"mismatch\"] when the store assigns object to tenants and claimed (\"\" for none) is not one of them, else [\"ok\", tenant] with the claimed tenant, else the store's only one, else \"\".",
	},
	{
		Name:        "nexus.grant",
		Decl:        types.NewFunction(types.Args(types.Named("subject", types.S), types.Named("action", types.S), types.Named("object", types.S), types.Named("tenant", types.S)), stringArray),
		Description: "Why subject may do action on object: [\"rbac\"] when a role of subject in tenant grants \"type:action\" or \"type:*\", else [\"rebac\"] when action is a permission of object's type that the store grants, else [].",
	},
}

// OPAHostAliases name builtins of OPA that the compiler has the host run
// with OPA's Go implementation instead of the code OPA's Wasm runtime
// compiles into policy.wasm, where that code answers differently from
// OPA's evaluator: json.marshal writes an object's keys in its hash
// table's order and does not escape <, > and &; concat joins a set's
// elements in its hash order; json.unmarshal and json.is_valid stop after
// the first JSON value ("10KiB" is 10); to_number refuses "+5" and takes
// "-", "." and "1e" for numbers that are not JSON, where OPA reads strings
// as Go's strconv.ParseFloat does; base64 decoding and validation accept
// spaces, missing padding and trailing garbage; the CIDR builtins take
// "10.0.0.0/8x" and miss IPv4-mapped IPv6 addresses; replace with an
// empty old string loops until the deadline and indexof of an empty
// string answers 0, where OPA answers; format_int aborts on integers
// beyond 2^53; the regular expressions are an older RE2's, without
// (?<name>) groups. Two answer as OPA does but cost
// more there than a call of the host: glob.match, some 30 µs a call, about
// ten times the host's call of OPA's implementation, which keeps compiled
// patterns; split, which calls a comparison function at every byte of the
// string, some 6 ns a byte (a bearer token's split costs microseconds).
// The compiler calls these names in place of the builtins; the engine runs
// each alias as the OPA builtin it names.
var OPAHostAliases = map[string]string{
	"nexus.internal.json_marshal":                     "json.marshal",
	"nexus.internal.concat":                           "concat",
	"nexus.internal.json_unmarshal":                   "json.unmarshal",
	"nexus.internal.json_is_valid":                    "json.is_valid",
	"nexus.internal.glob_match":                       "glob.match",
	"nexus.internal.split":                            "split",
	"nexus.internal.to_number":                        "to_number",
	"nexus.internal.base64_decode":                    "base64.decode",
	"nexus.internal.base64url_decode":                 "base64url.decode",
	"nexus.internal.base64_is_valid":                  "base64.is_valid",
	"nexus.internal.cidr_contains":                    "net.cidr_contains",
	"nexus.internal.cidr_intersects":                  "net.cidr_intersects",
	"nexus.internal.cidr_overlap":                     "net.cidr_overlap",
	"nexus.internal.replace":                          "replace",
	"nexus.internal.indexof":                          "indexof",
	"nexus.internal.format_int":                       "format_int",
	"nexus.internal.regex_match":                      "regex.match",
	"nexus.internal.regex_is_valid":                   "regex.is_valid",
	"nexus.internal.regex_find_all_string_submatch_n": "regex.find_all_string_submatch_n",
}
