package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/plugins"

	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
	"github.com/nexuspdp/nexus/opacompat/decisionlogs"
)

// DefaultInterval is how often a Reporter reports when nothing
// prompts it sooner.
const DefaultInterval = 5 * time.Minute

// Bundle is the status of one bundle, the fields of OPA's bundle
// status.
type Bundle struct {
	Name                     string    `json:"name"`
	ActiveRevision           string    `json:"active_revision,omitempty"`
	LastSuccessfulActivation time.Time `json:"last_successful_activation"`
	LastSuccessfulDownload   time.Time `json:"last_successful_download"`
	LastSuccessfulRequest    time.Time `json:"last_successful_request"`
	LastRequest              time.Time `json:"last_request"`
	Code                     string    `json:"code,omitempty"`
	Message                  string    `json:"message,omitempty"`
	// Errors are the messages of the errors behind Code.
	Errors   []string `json:"-"`
	HTTPCode int      `json:"http_code,omitempty"`
}

// Config configures a Reporter.
type Config struct {
	// Labels identify this process (OPA's labels: id, version and the
	// configured ones).
	Labels map[string]string
	// Service, when not nil, receives the reports: POST /status/ (OPA's
	// path) or /status/<Partition>.
	Service   *opaconfig.Service
	Partition string
	// Console, when not nil, receives each report as one JSON line, as
	// OPA's console status logger prints it.
	Console io.Writer
	// Interval is how often to report when not prompted; zero means
	// DefaultInterval.
	Interval time.Duration
	// Bundles returns the bundles' status; nil means the report has no
	// bundles and no "bundle" plugin. It is called from the reporter's
	// goroutine.
	Bundles func() []Bundle
	// Ready reports whether the server answers checks (the
	// envoy_ext_authz_grpc plugin's state), from the reporter's
	// goroutine; nil means always.
	Ready func() bool
	// DecisionLogs is the decision logger whose status and counters the
	// report carries; nil when decision logs are not configured.
	DecisionLogs *decisionlogs.Logger
	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger
}

// Reporter sends OPA status reports.
type Reporter struct {
	cfg    Config
	notify chan struct{}
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

var statusKeys = []string{"service", "partition_name", "console", "trigger"}

// ParseConfig reads OPA's status section. Like OPA, with no service named
// and no console, the only service configured receives the reports. It
// returns nil when the section is absent or names nowhere to report to.
func ParseConfig(raw json.RawMessage, services map[string]*opaconfig.Service) (*Config, error) {
	const where = "status"
	if opaconfig.Absent(raw) {
		return nil, nil
	}
	m, err := opaconfig.Object(where, raw, statusKeys, "plugin", "prometheus", "prometheus_config")
	if err != nil {
		return nil, err
	}
	var service, trigger string
	cfg := &Config{}
	var console bool
	if err := opaconfig.DecodeFields(where, m, map[string]any{"service": &service, "partition_name": &cfg.Partition, "console": &console, "trigger": &trigger}); err != nil {
		return nil, err
	}
	switch trigger {
	case "", "periodic":
	case "manual":
		return nil, fmt.Errorf("%s.trigger: %q: %w (nexus reports periodically and on bundle changes)", where, trigger, opaconfig.ErrUnsupported)
	default:
		return nil, fmt.Errorf("%s.trigger: %q is not a trigger mode", where, trigger)
	}
	if cfg.Service, cfg.Console, err = opaconfig.ReportTo(services, where, service, console); err != nil {
		return nil, err
	}
	if cfg.Service == nil && cfg.Console == nil {
		return nil, nil // as in OPA: nowhere to report to, nothing to do
	}
	return cfg, nil
}

// New starts a Reporter: it reports at once, then every
// Interval and whenever Notify is called.
func New(cfg Config) *Reporter {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Reporter{cfg: cfg, notify: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	r.Notify()
	go r.run()
	return r
}

// Notify asks for a report soon (a bundle was activated or failed, the
// decision log's upload status changed). It never blocks; notifications
// that come while one is pending make one report.
func (r *Reporter) Notify() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *Reporter) run() {
	defer close(r.done)
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-r.notify:
		case <-t.C:
		}
		if err := r.send(context.Background()); err != nil {
			r.cfg.Logger.Warn("status report failed", "err", err)
		}
	}
}

// Close stops the Reporter.
func (r *Reporter) Close(ctx context.Context) error {
	r.once.Do(func() { close(r.stop) })
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("status: closing the reporter: %w", ctx.Err())
	}
}

// statusReport is OPA's status report (UpdateRequestV1).
type statusReport struct {
	Labels       map[string]string          `json:"labels"`
	Bundles      map[string]json.RawMessage `json:"bundles,omitempty"`
	DecisionLogs *decisionlogs.UploadStatus `json:"decision_logs,omitempty"`
	Metrics      map[string]any             `json:"metrics,omitempty"`
	Plugins      map[string]plugins.Status  `json:"plugins"`
}

// Report returns the current status report.
func (r *Reporter) Report() ([]byte, error) {
	rep := statusReport{Labels: r.cfg.Labels, Plugins: map[string]plugins.Status{"status": {State: plugins.StateOK}}}
	authz := plugins.StateOK
	if r.cfg.Ready != nil && !r.cfg.Ready() {
		authz = plugins.StateNotReady
	}
	rep.Plugins["envoy_ext_authz_grpc"] = plugins.Status{State: authz}
	if r.cfg.Bundles != nil {
		state := plugins.StateOK
		rep.Bundles = map[string]json.RawMessage{}
		for _, b := range r.cfg.Bundles() {
			if b.ActiveRevision == "" && b.LastSuccessfulActivation.IsZero() {
				state = plugins.StateNotReady
			}
			raw, err := encodeBundleStatus(&b)
			if err != nil {
				return nil, err
			}
			rep.Bundles[b.Name] = raw
		}
		rep.Plugins["bundle"] = plugins.Status{State: state}
	}
	if l := r.cfg.DecisionLogs; l != nil {
		st := l.Status()
		rep.DecisionLogs = &st
		rep.Plugins["decision_logs"] = plugins.Status{State: plugins.StateOK}
		rep.Metrics = map[string]any{"prometheus": l.Metrics()}
	}
	out, err := json.Marshal(&rep)
	if err != nil {
		return nil, fmt.Errorf("status: encoding the report: %w", err)
	}
	return out, nil
}

// encodeBundleStatus encodes b as OPA does, its errors as objects with a
// message.
func encodeBundleStatus(b *Bundle) (json.RawMessage, error) {
	type plain Bundle
	v := struct {
		*plain
		Errors []map[string]string `json:"errors,omitempty"`
	}{plain: (*plain)(b)}
	for _, e := range b.Errors {
		v.Errors = append(v.Errors, map[string]string{"message": e})
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("status: encoding bundle %q's status: %w", b.Name, err)
	}
	return raw, nil
}

func (r *Reporter) send(ctx context.Context) error {
	rep, err := r.Report()
	if err != nil {
		return err
	}
	if r.cfg.Console != nil {
		line := append(rep[:len(rep)-1:len(rep)-1], `,"level":"info","msg":"Status Log","time":"`...)
		line = time.Now().AppendFormat(line, time.RFC3339)
		line = append(line, `","type":"openpolicyagent.org/status"}`+"\n"...)
		if _, err := r.cfg.Console.Write(line); err != nil {
			r.cfg.Logger.Error("status: console write", "err", err)
		}
	}
	if r.cfg.Service == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	code, err := r.cfg.Service.Post(ctx, "status update", "/status/"+r.cfg.Partition, rep, map[string]string{"Content-Type": "application/json"})
	if err == nil && (code < 200 || code > 299) {
		err = fmt.Errorf("status update failed, server replied with HTTP %d %s", code, http.StatusText(code))
	}
	return err
}
