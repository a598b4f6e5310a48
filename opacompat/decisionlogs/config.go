package decisionlogs

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
	"github.com/nexuspdp/nexus/pdp"
)

// Defaults of Config, OPA's where OPA has one.
const (
	DefaultResource              = "/logs"
	DefaultUploadSizeLimitBytes  = 32 << 10
	MinUploadSizeLimitBytes      = 90
	MaxUploadSizeLimitBytes      = 4 << 30
	DefaultMinDelay              = 300 * time.Second
	DefaultMaxDelay              = 600 * time.Second
	DefaultBufferSizeLimitEvents = 10_000
	// DefaultBufferSizeLimitBytes bounds the size buffer when the
	// configuration does not (OPA's size buffer is then unbounded; nexus
	// never lets a collector that is down grow memory without end).
	DefaultBufferSizeLimitBytes = 64 << 20
	// DefaultQueueSize bounds the decisions waiting to become events.
	DefaultQueueSize = 4096
)

// Buffer types of Config.BufferType, OPA's reporting.buffer_type.
const (
	BufferSize  = "size"
	BufferEvent = "event"
)

// Config configures a Logger. A zero Config logs nowhere.
type Config struct {
	// Labels go into every event (OPA's labels: id, version and the
	// configured ones).
	Labels map[string]string
	// Bundle names the policy bundle in the events' "bundles" (with the
	// loaded revision); "" leaves "bundles" out.
	Bundle string
	// GRPCPath and GRPCQuery name the decision in the events of ext_authz
	// gRPC checks (records of interface pdp.IfaceGRPC) as opa-envoy-plugin
	// logs it: its path as configured, or its deprecated query as
	// configured (the event then has a query and no path). Both "" keep
	// the record's Path; other records always keep it.
	GRPCPath, GRPCQuery string
	// Console, when not nil, receives each event as one JSON line, the
	// line OPA's console decision logger prints.
	Console interface{ Write([]byte) (int, error) }
	// Service, when not nil, receives the events in batches.
	Service *opaconfig.Service
	// Resource is the path the batches are POSTed to; "" means
	// DefaultResource.
	Resource string
	// UploadSizeLimitBytes bounds one gzip-compressed batch; zero means
	// DefaultUploadSizeLimitBytes. It is clamped to
	// [MinUploadSizeLimitBytes, MaxUploadSizeLimitBytes] as OPA does.
	UploadSizeLimitBytes int64
	// MinDelay and MaxDelay bound the random wait between uploads; zero
	// means DefaultMinDelay and DefaultMaxDelay. After a failed upload the
	// wait backs off exponentially from 100ms up to MaxDelay.
	MinDelay, MaxDelay time.Duration
	// BufferType is BufferSize (the default: the buffer is bounded in
	// bytes) or BufferEvent (bounded in events).
	BufferType string
	// BufferSizeLimitBytes bounds the size buffer; zero means
	// DefaultBufferSizeLimitBytes.
	BufferSizeLimitBytes int64
	// BufferSizeLimitEvents bounds the event buffer; zero means
	// DefaultBufferSizeLimitEvents.
	BufferSizeLimitEvents int
	// QueueSize bounds the decisions waiting to become events; zero means
	// DefaultQueueSize. A full queue drops the decision, counted with the
	// buffer's drops.
	QueueSize int
	// OnStatus is called (from the uploader) when the upload status
	// changes: the status reporter's Notify (package status).
	OnStatus func()
	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger
}

// Validate fills defaults and rejects nonsense.
func (c *Config) Validate() error {
	if c.Resource == "" {
		c.Resource = DefaultResource
	}
	switch {
	case c.UploadSizeLimitBytes < 0:
		return fmt.Errorf("opalog: upload size limit %d is negative", c.UploadSizeLimitBytes)
	case c.UploadSizeLimitBytes == 0:
		c.UploadSizeLimitBytes = DefaultUploadSizeLimitBytes
	case c.UploadSizeLimitBytes < MinUploadSizeLimitBytes:
		c.UploadSizeLimitBytes = MinUploadSizeLimitBytes
	case c.UploadSizeLimitBytes > MaxUploadSizeLimitBytes:
		c.UploadSizeLimitBytes = MaxUploadSizeLimitBytes
	}
	if c.MinDelay == 0 && c.MaxDelay == 0 {
		c.MinDelay, c.MaxDelay = DefaultMinDelay, DefaultMaxDelay
	}
	if c.MinDelay <= 0 || c.MaxDelay < c.MinDelay {
		return fmt.Errorf("opalog: delays %v..%v: want 0 < min <= max", c.MinDelay, c.MaxDelay)
	}
	switch c.BufferType {
	case "":
		c.BufferType = BufferSize
	case BufferSize, BufferEvent:
	default:
		return fmt.Errorf("opalog: buffer type %q: want %q or %q", c.BufferType, BufferSize, BufferEvent)
	}
	if c.BufferSizeLimitBytes < 0 || c.BufferSizeLimitEvents < 0 || c.QueueSize < 0 {
		return fmt.Errorf("opalog: negative buffer or queue size")
	}
	if c.BufferSizeLimitBytes == 0 {
		c.BufferSizeLimitBytes = DefaultBufferSizeLimitBytes
	}
	if c.BufferSizeLimitEvents == 0 {
		c.BufferSizeLimitEvents = DefaultBufferSizeLimitEvents
	}
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Rules are the entrypoints of the mask and drop rules a decision_logs
// section names, as pdp.Config and compiler.Options take them (slash
// paths without the leading slash).
type Rules struct {
	Mask, Drop string
}

var (
	decisionLogsKeys        = []string{"service", "resource", "partition_name", "reporting", "mask_decision", "drop_decision", "console"}
	decisionLogsUnsupported = []string{"plugin", "request_context", "nd_builtin_cache"}
	reportingKeys           = []string{"buffer_type", "buffer_size_limit_bytes", "buffer_size_limit_events", "upload_size_limit_bytes", "min_delay_seconds", "max_delay_seconds", "trigger"}
	reportingUnsupported    = []string{"max_decisions_per_second"}
)

// ParseDecisionLogs reads OPA's decision_logs section. With no service
// named and no console, the only service configured receives the logs,
// as in OPA. A setting nexus does not implement is an error naming it.
func ParseDecisionLogs(raw json.RawMessage, services map[string]*opaconfig.Service) (Config, Rules, error) {
	const where = "decision_logs"
	var cfg Config
	rules := Rules{Mask: pdp.DefaultMaskDecision, Drop: pdp.DefaultDropDecision}
	m, err := opaconfig.Object(where, raw, decisionLogsKeys, decisionLogsUnsupported...)
	if err != nil {
		return cfg, rules, err
	}
	var service, partition string
	var resource *string
	var console bool
	if err := opaconfig.DecodeFields(where, m, map[string]any{"service": &service, "partition_name": &partition, "resource": &resource,
		"mask_decision": &rules.Mask, "drop_decision": &rules.Drop, "console": &console}); err != nil {
		return cfg, rules, err
	}
	if cfg.Service, cfg.Console, err = opaconfig.ReportTo(services, where, service, console); err != nil {
		return cfg, rules, err
	}
	switch {
	case partition != "":
		cfg.Resource = "/logs/" + partition
	case resource != nil:
		cfg.Resource = *resource
	}
	for _, r := range []struct {
		key  string
		rule *string
	}{{"mask_decision", &rules.Mask}, {"drop_decision", &rules.Drop}} {
		given := *r.rule
		*r.rule = strings.TrimPrefix(strings.Trim(given, "/"), "data/")
		if *r.rule == "" {
			return cfg, rules, fmt.Errorf("%s.%s: %q names no rule", where, r.key, given)
		}
	}
	if err := parseReporting(where+".reporting", m["reporting"], &cfg); err != nil {
		return cfg, rules, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, rules, fmt.Errorf("%s: %w", where, err)
	}
	return cfg, rules, nil
}

func parseReporting(where string, raw json.RawMessage, cfg *Config) error {
	m, err := opaconfig.Object(where, raw, reportingKeys, reportingUnsupported...)
	if err != nil {
		return err
	}
	var minS, maxS, bytesLimit, eventsLimit, upload *int64
	var trigger string
	if err := opaconfig.DecodeFields(where, m, map[string]any{"buffer_type": &cfg.BufferType, "buffer_size_limit_bytes": &bytesLimit,
		"buffer_size_limit_events": &eventsLimit, "upload_size_limit_bytes": &upload, "min_delay_seconds": &minS,
		"max_delay_seconds": &maxS, "trigger": &trigger}); err != nil {
		return err
	}
	switch trigger {
	case "", "periodic":
	case "manual", "immediate":
		return fmt.Errorf("%s.trigger: %q: %w (nexus uploads periodically)", where, trigger, opaconfig.ErrUnsupported)
	default:
		return fmt.Errorf("%s.trigger: %q is not a trigger mode", where, trigger)
	}
	switch cfg.BufferType {
	case "", BufferSize:
		if eventsLimit != nil {
			return fmt.Errorf("%s.buffer_size_limit_events: applies to the %q buffer type only", where, BufferEvent)
		}
	case BufferEvent:
		if bytesLimit != nil {
			return fmt.Errorf("%s.buffer_size_limit_bytes: applies to the %q buffer type only", where, BufferSize)
		}
	default:
		return fmt.Errorf("%s.buffer_type: %q: want %q or %q", where, cfg.BufferType, BufferSize, BufferEvent)
	}
	if bytesLimit != nil {
		if *bytesLimit <= 0 {
			return fmt.Errorf("%s.buffer_size_limit_bytes: must be positive", where)
		}
		cfg.BufferSizeLimitBytes = *bytesLimit
	}
	if eventsLimit != nil {
		if *eventsLimit <= 0 || *eventsLimit > math.MaxInt32 {
			return fmt.Errorf("%s.buffer_size_limit_events: must be positive", where)
		}
		cfg.BufferSizeLimitEvents = int(*eventsLimit)
	}
	if upload != nil {
		if *upload <= 0 {
			return fmt.Errorf("%s.upload_size_limit_bytes: must be positive", where)
		}
		cfg.UploadSizeLimitBytes = *upload
	}
	switch {
	case minS == nil && maxS == nil:
	case minS == nil:
		return fmt.Errorf("%s: max_delay_seconds needs min_delay_seconds", where)
	case maxS == nil:
		return fmt.Errorf("%s: min_delay_seconds needs max_delay_seconds", where)
	case *minS <= 0 || *maxS < *minS:
		return fmt.Errorf("%s: want 0 < min_delay_seconds <= max_delay_seconds", where)
	default:
		cfg.MinDelay, cfg.MaxDelay = time.Duration(*minS)*time.Second, time.Duration(*maxS)*time.Second
	}
	return nil
}
