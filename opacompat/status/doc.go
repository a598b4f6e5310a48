// Package status reports nexus' status as OPA's status plugin does, so
// that a control plane built for OPA (and opa-envoy-plugin) reads nexus'
// reports unchanged: OPA's UpdateRequestV1 with the labels, each bundle's
// status, the plugins' states (envoy_ext_authz_grpc, bundle,
// decision_logs, status) and the decision log's upload status and
// counters.
//
// [ParseConfig] reads the status section of an OPA configuration. [New]
// starts a [Reporter], which reports at once, then every Interval and
// whenever [Reporter.Notify] is called (a bundle was activated or
// refused, the decision log's upload status changed): POSTed to
// /status/<partition_name> of the configured service, and printed as one
// JSON line when console is set.
//
// Example:
//
//	cfg, err := status.ParseConfig(opaCfg.Status, services)
//	if err != nil || cfg == nil {
//		return err // a nil cfg: the section names nowhere to report to
//	}
//	cfg.Labels = labels
//	cfg.Bundles = func() []status.Bundle { return bundleStatus(syncer) }
//	cfg.DecisionLogs = logger // a *decisionlogs.Logger, or nil
//	r := status.New(*cfg)
//	defer r.Close(ctx)
//
// # Caveats
//
//   - Reports are periodic and on changes; trigger "manual" is refused,
//     as are a status plugin and Prometheus reporting.
//   - A failed report is logged and not retried: the next one carries the
//     current status.
package status
