package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/internal/version"
	bundlesync "github.com/nexuspdp/nexus/opacompat/bundles"
	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
	opalog "github.com/nexuspdp/nexus/opacompat/decisionlogs"
	opastatus "github.com/nexuspdp/nexus/opacompat/status"
	"github.com/nexuspdp/nexus/pdp"
)

// defaultLogRules are the entrypoints of OPA's default mask and drop
// rules, compiled whenever a policy defines them.
var defaultLogRules = []string{pdp.DefaultMaskDecision, pdp.DefaultDropDecision}

// opaLogInputs are the parts of an OPA configuration file the decision
// log and the status reports read.
type opaLogInputs struct {
	// DecisionLogs and Status are the raw decision_logs and status
	// sections; empty when absent.
	DecisionLogs, Status json.RawMessage
	// Services are the configuration's services.
	Services map[string]*opaconfig.Service
	// Labels are the configured labels; id and version are added.
	Labels map[string]string
	// Bundle names the policy bundle in the events ("bundles"); "" leaves
	// it out.
	Bundle string
	// Path and Query name the ext_authz decision in its events as
	// opa-envoy-plugin logs it (opalog.Config's GRPCPath and GRPCQuery);
	// both "" log the entrypoint.
	Path, Query string
	// Bundles returns the bundles' status for the status reports; nil when
	// no bundle is downloaded.
	Bundles func() []opastatus.Bundle
	// Ready reports whether the server answers checks; nil means always.
	Ready func() bool
	// Logger receives operational logs.
	Logger *slog.Logger
}

// opaLogging is what the decision_logs and status sections set up.
type opaLogging struct {
	// isReady is the server's readiness as the status report gives it;
	// nil until startOPALogging sets it.
	isReady *atomic.Bool
	// syncer is the bundle downloader whose status the reports carry;
	// nil until startOPALogging sets it.
	syncer *atomic.Pointer[bundlesync.Syncer]

	// Logger writes decisions in OPA's format; nil when decision_logs is
	// absent (nexus' own --decision-log is then unchanged).
	Logger *opalog.Logger
	// Reporter sends status reports; nil when status is absent.
	Reporter *opastatus.Reporter
	// Rules are the mask and drop entrypoints.
	Rules opalog.Rules
	// Labels are the labels events and reports carry.
	Labels map[string]string
}

// newOPALogging reads the decision_logs and status sections and starts
// the decision logger and the status reporter they configure.
func newOPALogging(in opaLogInputs) (*opaLogging, error) {
	o := &opaLogging{
		Rules:  opalog.Rules{Mask: pdp.DefaultMaskDecision, Drop: pdp.DefaultDropDecision},
		Labels: opaLabels(in.Labels),
	}
	in.Logger = cmp.Or(in.Logger, slog.New(slog.DiscardHandler))
	if len(in.DecisionLogs) > 0 && string(in.DecisionLogs) != "null" {
		cfg, rules, err := opalog.ParseDecisionLogs(in.DecisionLogs, in.Services)
		if err != nil {
			return nil, err
		}
		o.Rules = rules
		if cfg.Service == nil && cfg.Console == nil {
			// As in OPA: nowhere to write to, nothing to do.
			in.Logger.Info("decision_logs names no service and the console is off: no decision events are written")
		} else {
			cfg.Labels, cfg.Bundle, cfg.Logger = o.Labels, in.Bundle, in.Logger
			cfg.GRPCPath, cfg.GRPCQuery = in.Path, in.Query
			// The reporter, when there is one, reports a change of
			// upload status at once.
			cfg.OnStatus = o.notify
			if o.Logger, err = opalog.New(cfg); err != nil {
				return nil, err
			}
		}
	}
	sc, err := opastatus.ParseConfig(in.Status, in.Services)
	if err != nil {
		if o.Logger != nil {
			_ = o.Logger.Close(context.Background())
		}
		return nil, err
	}
	if sc != nil {
		sc.Labels, sc.Bundles, sc.Ready, sc.DecisionLogs, sc.Logger = o.Labels, in.Bundles, in.Ready, o.Logger, in.Logger
		o.Reporter = opastatus.New(*sc)
	}
	return o, nil
}

// apply sets the decision core's decision sink and mask and drop rules.
func (o *opaLogging) apply(c *pdp.Config) {
	if o.Logger != nil {
		c.DecisionSink = o.Logger
	}
	c.MaskDecision, c.DropDecision = o.Rules.Mask, o.Rules.Drop
}

// startOPALogging starts what the OPA configuration serve read asks for:
// decision events in OPA's format and status reports. With nexus' own
// YAML there is nothing to start.
func startOPALogging(c serveConfig, log *slog.Logger) (*opaLogging, error) {
	in := opaLogInputs{Logger: log, Bundle: eventBundle(c)}
	if oc := c.opa.Config; oc != nil {
		in.DecisionLogs, in.Status, in.Services, in.Labels = oc.DecisionLogs, oc.Status, oc.Services, oc.Labels
		if oc.Envoy != nil {
			in.Path, in.Query = oc.Envoy.LogPath, oc.Envoy.LogQuery
		}
	}
	ready := new(atomic.Bool)
	in.Ready = ready.Load
	syncer := new(atomic.Pointer[bundlesync.Syncer])
	if c.opa.Config != nil && c.opa.Config.Bundles != nil {
		in.Bundles = func() []opastatus.Bundle { return bundleStatus(syncer.Load()) }
	}
	o, err := newOPALogging(in)
	if err != nil {
		return nil, err
	}
	o.isReady, o.syncer = ready, syncer
	return o, nil
}

// eventBundle is the name decision log events give the policy's bundle,
// as OPA names what it activated as a bundle: a bundle of the bundles
// section by its name; a policy path that ends in .tar.gz, or that opa
// run's --bundle names a bundle, by the path as given. A directory or a
// file of Rego and data (and nexus' embedded policy) is no bundle: ""
// leaves "bundles" out of the events.
func eventBundle(c serveConfig) string {
	if oc := c.opa.Config; oc != nil && len(oc.Bundles) > 0 {
		var names map[string]json.RawMessage
		if json.Unmarshal(oc.Bundles, &names) == nil && len(names) == 1 {
			for name := range names {
				return name
			}
		}
	}
	if c.Policy != "" && (c.opa.PolicyIsBundle || strings.HasSuffix(c.Policy, ".tar.gz")) {
		return c.Policy
	}
	return ""
}

// bundlesFrom makes the status reports carry s's bundles' status.
func (o *opaLogging) bundlesFrom(s *bundlesync.Syncer) {
	if o.syncer != nil && s != nil {
		o.syncer.Store(s)
		o.notify()
	}
}

// reportLoads wraps the function that activates a downloaded bundle so
// that each activation, or failure to activate, is reported at once.
func (o *opaLogging) reportLoads(load func(context.Context, *bundle.Bundle) error) func(context.Context, *bundle.Bundle) error {
	return func(ctx context.Context, b *bundle.Bundle) error {
		err := load(ctx, b)
		// The downloader records the outcome just after load returns:
		// report once its status shows it (or after a second at most).
		go func() {
			for range 100 {
				if err == nil && o.activeRevision(b.Manifest.Revision) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			o.notify()
		}()
		return err
	}
}

// activeRevision reports whether a downloaded bundle's status shows
// revision active.
func (o *opaLogging) activeRevision(revision string) bool {
	if o.syncer == nil {
		return false
	}
	for _, st := range bundleStatus(o.syncer.Load()) {
		if st.ActiveRevision == revision && !st.LastSuccessfulActivation.IsZero() {
			return true
		}
	}
	return false
}

// bundleStatus is the downloader's status as the status report takes it.
func bundleStatus(s *bundlesync.Syncer) []opastatus.Bundle {
	if s == nil {
		return nil
	}
	var out []opastatus.Bundle
	for _, st := range s.Status() {
		code, _ := strconv.Atoi(st.HTTPCode)
		out = append(out, opastatus.Bundle{
			Name: st.Name, ActiveRevision: st.ActiveRevision,
			LastSuccessfulActivation: st.LastSuccessfulActivation, LastSuccessfulDownload: st.LastSuccessfulDownload,
			LastSuccessfulRequest: st.LastSuccessfulRequest, LastRequest: st.LastRequest,
			Code: st.Code, Message: st.Message, Errors: st.Errors, HTTPCode: code,
		})
	}
	return out
}

// checkOPALogSections reads the decision_logs and status sections as
// startOPALogging will, so that a setting nexus does not support is an
// error when the configuration is read.
func checkOPALogSections(cfg *opaconfig.Config) error {
	if len(cfg.DecisionLogs) > 0 {
		if _, _, err := opalog.ParseDecisionLogs(cfg.DecisionLogs, cfg.Services); err != nil {
			return err
		}
	}
	_, err := opastatus.ParseConfig(cfg.Status, cfg.Services)
	return err
}

// logRuleEntrypoints are the mask and drop rules to compile policies
// with: those the configuration's decision_logs names, else OPA's.
func logRuleEntrypoints(c serveConfig) []string {
	oc := c.opa.Config
	if oc == nil || len(oc.DecisionLogs) == 0 {
		return defaultLogRules
	}
	_, r, err := opalog.ParseDecisionLogs(oc.DecisionLogs, oc.Services)
	if err != nil {
		return defaultLogRules // startOPALogging reports the error
	}
	return []string{r.Mask, r.Drop}
}

// ready marks the server as answering checks, and reports it.
func (o *opaLogging) ready() {
	if o.isReady != nil {
		o.isReady.Store(true)
	}
	o.notify()
}

// closeAfter closes o if serve returns before its shutdown did.
func (o *opaLogging) closeAfter(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = o.Close(ctx)
}

// notify prompts a status report (after a bundle was activated or
// failed to be).
func (o *opaLogging) notify() {
	if o.Reporter != nil {
		o.Reporter.Notify()
	}
}

// Close uploads what the decision log holds and stops the reporter;
// call it after the server's Shutdown.
func (o *opaLogging) Close(ctx context.Context) error {
	var errs []error
	if o.Logger != nil {
		errs = append(errs, o.Logger.Close(ctx))
	}
	if o.Reporter != nil {
		errs = append(errs, o.Reporter.Close(ctx))
	}
	return errors.Join(errs...)
}

// opaLabels returns labels with OPA's own: id (a UUID drawn once per
// process) and version (nexus' version), which win over configured ones
// as in OPA.
func opaLabels(configured map[string]string) map[string]string {
	out := maps.Clone(configured)
	if out == nil {
		out = map[string]string{}
	}
	out["id"] = processID
	out["version"] = version.Get().Version
	return out
}

// processID identifies this process in decision events and status
// reports: a random UUID.
var processID = uuid.NewString()
