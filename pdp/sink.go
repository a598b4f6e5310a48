package pdp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nexuspdp/nexus/engine"
)

// DecisionSink receives the decisions of a PDP, with what the policy saw
// and said, for the decision log in OPA's format. Record is called on the
// decision path: it must return at once (queue the record, or drop it).
type DecisionSink interface {
	// Record takes r; the sink owns it and its Input.
	Record(r *DecisionRecord)
}

// DecisionRecord is one decision as the sink gets it.
type DecisionRecord struct {
	// ID is the decision's ID (Decision.ID).
	ID string
	// Time is when the core started deciding.
	Time time.Time
	// Path is the entrypoint evaluated, a slash path ("envoy/authz/allow").
	Path string
	// Interface is the transport that asked (IfaceGRPC, ...).
	Interface string
	// Input is the whole input document of the request, as JSON, as
	// OPA logs it (the policy itself is handed only the parts it reads).
	Input json.RawMessage
	// Result is the policy's result document; nil when the decision
	// failed. It may be shared with the decision cache: read it, never
	// modify it.
	Result json.RawMessage
	// ErrorCode and ErrorMessage describe a failed decision (Code(err) and
	// the error); empty when it succeeded.
	ErrorCode, ErrorMessage string
	// Revision is the loaded policy bundle's revision.
	Revision string
	// EvalNanos is the time taken to evaluate the policy (or to find the
	// decision in the cache); HandlerNanos the time the core took in all,
	// building the input included.
	EvalNanos, HandlerNanos int64
	// Cache is how the decision cache answered (CacheHit, ...).
	Cache string
	// Rules evaluates the loaded policy's mask and drop rules.
	Rules LogRules
}

// LogRules evaluates the decision log's mask and drop rules of the loaded
// policy, with an event as input. *PDP implements it.
type LogRules interface {
	// LogDrop reports whether the drop rule holds for event; false when
	// the policy has no drop rule or it is undefined.
	LogDrop(ctx context.Context, event []byte) (bool, error)
	// LogMask returns the mask rule's result for event; nil when the
	// policy has no mask rule or it is undefined.
	LogMask(ctx context.Context, event []byte) (json.RawMessage, error)
}

var _ LogRules = (*PDP)(nil)

// LogDrop evaluates the drop rule (Config.DropDecision) with event as its
// input, if the loaded bundle has it. Only a result of true drops.
func (p *PDP) LogDrop(ctx context.Context, event []byte) (bool, error) {
	out, err := p.evalLogRule(ctx, p.cfg.DropDecision, event)
	if err != nil || out == nil {
		return false, err
	}
	var drop any
	if err := json.Unmarshal(out, &drop); err != nil {
		return false, fmt.Errorf("pdp: the drop rule's result: %w", err)
	}
	return drop == true, nil
}

// LogMask evaluates the mask rule (Config.MaskDecision) with event as its
// input, if the loaded bundle has it, and returns its result unread.
func (p *PDP) LogMask(ctx context.Context, event []byte) (json.RawMessage, error) {
	return p.evalLogRule(ctx, p.cfg.MaskDecision, event)
}

// evalLogRule evaluates entrypoint on event if the loaded view has it; nil
// when it has not or the result is undefined.
func (p *PDP) evalLogRule(ctx context.Context, entrypoint string, event []byte) (json.RawMessage, error) {
	v := p.view.Load()
	if v == nil || !v.has(entrypoint) {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.EvalTimeout)
	defer cancel()
	out, err := p.eng.Eval(ctx, entrypoint, event, nil)
	if errors.Is(err, engine.ErrUndefined) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pdp: evaluating %s: %w", entrypoint, err)
	}
	return out, nil
}
