package pdp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/builtins"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/engine"
)

// Defaults of Config.
const (
	DefaultMaxBodyBytes = 1 << 20
	DefaultCacheSize    = 100_000
	DefaultEvalTimeout  = 500 * time.Millisecond
)

// Default entrypoints, those of nexus' default policy.
const (
	DefaultEnvoyEntrypoint = "nexus/envoy/result"
	DefaultAuthzEntrypoint = "nexus/authz/decision"
)

// Default paths of the decision log's mask and drop rules, OPA's.
const (
	DefaultMaskDecision = "system/log/mask"
	DefaultDropDecision = "system/log/drop"
)

// Store is what the core reads of the relationship store: the schema it
// merges into the policy's data and the revision that keys the decision
// cache. *datastore.BoltStore satisfies it.
type Store interface {
	// Schema returns the current schema (datastore.ErrNoSchema if none).
	Schema(ctx context.Context) (*schema.Schema, error)
	// Revision returns the latest committed revision.
	Revision(ctx context.Context) (datastore.Revision, error)
}

var _ Store = (*datastore.BoltStore)(nil)

// Config configures a PDP. Engine, Store and Policy are required; every
// other zero value means the documented default. The yaml keys are those
// of nexus serve's configuration file, which decodes into a Config; "-"
// marks what the file does not set.
type Config struct {
	// Engine evaluates policies. Its registry must hold the relationship
	// builtins for policies that use them.
	Engine *engine.Engine `yaml:"-"`
	// Store is the relationship store.
	Store Store `yaml:"-"`
	// Relations is the store the engine's relationship builtins read; it
	// answers ResourceTenant ("" for every resource when nil).
	Relations builtins.Store `yaml:"-"`
	// Policy is the compiled policy. The core adds the schema's tenant
	// roles (data.nexus.roles: role to grants) and each type's permissions
	// (data.nexus.permissions) to its data before loading it, and again
	// whenever the schema changes.
	Policy *bundle.Bundle `yaml:"-"`

	// EnvoyEntrypoint answers ext_authz and forward-auth requests; ""
	// means DefaultEnvoyEntrypoint. Its result is a boolean or an
	// opa-envoy-plugin result object.
	EnvoyEntrypoint string `yaml:"envoy_entrypoint"`
	// AuthzEntrypoint answers application checks; "" means
	// DefaultAuthzEntrypoint. Its result is a boolean or an object with
	// "allow" (or "allowed") and "reason".
	AuthzEntrypoint string `yaml:"authz_entrypoint"`

	// MaxBodyBytes bounds the body of an Envoy CheckRequest; zero means
	// DefaultMaxBodyBytes. It does not apply with SkipRequestBodyParse,
	// where the body is never read (the gRPC message size bounds it).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// SkipRequestBodyParse leaves the request body out of the Envoy and
	// forward-auth input documents (opa-envoy-plugin's
	// skip-request-body-parse): there is no parsed_body and no
	// truncated_body, and a body that would not parse is no error.
	SkipRequestBodyParse bool `yaml:"-"`
	// DryRun is opa-envoy-plugin's dry-run: transports that honour it
	// (Envoy ext_authz gRPC) answer every Envoy decision with an allow,
	// while the decision log and the metrics keep the policy's real
	// decision. Errors still answer as errors.
	DryRun bool `yaml:"-"`
	// EvalTimeout bounds one evaluation; zero means DefaultEvalTimeout.
	EvalTimeout time.Duration `yaml:"eval_timeout"`
	// CacheSize bounds the decision cache (entries); zero means
	// DefaultCacheSize.
	CacheSize int `yaml:"cache_size"`
	// CacheDisabled turns the decision cache off.
	CacheDisabled bool `yaml:"cache_disabled"`
	// CacheNondeterministic caches the decisions of an entrypoint whose
	// policy can call a non-deterministic builtin (time.now_ns, rand.intn,
	// uuid.rfc4122, http.send, opa.runtime, ...: see
	// bundle.Manifest.Nondeterministic), or whose bundle does not say (one
	// built by opa build), like any other: the first answer to an input is
	// reused for the same input until the policy or the data revision
	// changes. It is the server-wide form of the opt-in OPA offers per
	// call with http.send's "cache" option. False (the default) makes
	// such an entrypoint's decisions bypass the cache (CacheDisabled).
	CacheNondeterministic bool `yaml:"cache_nondeterministic"`

	// DecisionLog receives one policy.decision JSON line per decision;
	// nil disables the decision log.
	DecisionLog io.Writer `yaml:"-"`
	// DecisionLogQueue bounds the events waiting to be written; zero
	// means 4096. A full queue drops events (counted), never blocks.
	DecisionLogQueue int `yaml:"decision_log_queue"`

	// DecisionSink receives every decision with the input the policy saw
	// and its raw result (the decision log in OPA's format); nil means
	// none, and then the core copies neither.
	DecisionSink DecisionSink `yaml:"-"`
	// MaskDecision and DropDecision are the entrypoints of the decision
	// log's mask and drop rules (slash paths, as OPA's mask_decision and
	// drop_decision without the leading slash); "" means
	// DefaultMaskDecision and DefaultDropDecision. They are evaluated
	// only when the loaded bundle has them (compile the policy with them
	// as optional entrypoints).
	MaskDecision, DropDecision string `yaml:"-"`
	// Revisions waits for the consistency token a check may carry
	// (WaitRevision); nil means a waiter over Store's revision, bounded by
	// RevisionWait.
	Revisions RevisionWaiter `yaml:"-"`
	// RevisionWait bounds the default waiter; zero means
	// DefaultRevisionWait.
	RevisionWait time.Duration `yaml:"-"`

	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger `yaml:"-"`
	// Registerer receives the decision metrics; nil means a new registry
	// (metrics then go nowhere).
	Registerer prometheus.Registerer `yaml:"-"`
}

// Validate fills defaults and rejects nonsense.
func (c *Config) Validate() error {
	if c.Engine == nil {
		return errors.New("pdp: Config.Engine is required")
	}
	if c.Store == nil {
		return errors.New("pdp: Config.Store is required")
	}
	if c.Policy == nil {
		return errors.New("pdp: Config.Policy is required")
	}
	if c.EnvoyEntrypoint == "" {
		c.EnvoyEntrypoint = DefaultEnvoyEntrypoint
	}
	if c.AuthzEntrypoint == "" {
		c.AuthzEntrypoint = DefaultAuthzEntrypoint
	}
	c.MaskDecision = strings.Trim(c.MaskDecision, "/")
	if c.MaskDecision == "" {
		c.MaskDecision = DefaultMaskDecision
	}
	c.DropDecision = strings.Trim(c.DropDecision, "/")
	if c.DropDecision == "" {
		c.DropDecision = DefaultDropDecision
	}
	switch {
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("pdp: MaxBodyBytes %d is negative", c.MaxBodyBytes)
	case c.MaxBodyBytes == 0:
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	switch {
	case c.EvalTimeout < 0:
		return fmt.Errorf("pdp: EvalTimeout %v is negative", c.EvalTimeout)
	case c.EvalTimeout == 0:
		c.EvalTimeout = DefaultEvalTimeout
	}
	switch {
	case c.CacheSize < 0:
		return fmt.Errorf("pdp: CacheSize %d is negative", c.CacheSize)
	case c.CacheSize == 0:
		c.CacheSize = DefaultCacheSize
	}
	switch {
	case c.RevisionWait < 0:
		return fmt.Errorf("pdp: RevisionWait %v is negative", c.RevisionWait)
	case c.RevisionWait == 0:
		c.RevisionWait = DefaultRevisionWait
	}
	if c.Revisions == nil {
		c.Revisions = storeWaiter{store: c.Store, max: c.RevisionWait}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	return nil
}
