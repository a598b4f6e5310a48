// Package decisionlogs writes nexus' decisions as OPA writes its decision
// logs, so that a log pipeline built for OPA (and opa-envoy-plugin) takes
// nexus' output unchanged.
//
// A Logger is a pdp.DecisionSink: the core hands it every decision (the
// request's whole input document, the raw result, timings) without waiting. A
// goroutine turns each record into an OPA decision event, applies the
// policy's drop and mask rules (evaluated by the core), prints it on the
// console and queues it for upload: gzip-compressed JSON arrays POSTed to
// a service of the OPA configuration, from a bounded buffer that drops
// its oldest events (counted) when full, retried with back-off on errors
// and flushed on Close.
//
//	lg, err := opalog.New(opalog.Config{Labels: labels, Service: svc, Console: os.Stdout})
//	p, err := pdp.New(ctx, pdp.Config{..., DecisionSink: lg})
//	defer lg.Close(ctx)
//
// Package status reports the logger's upload status and counters
// ([Logger.Status], [Logger.Metrics]) in OPA's status reports;
// Config.OnStatus tells it when the upload status changes.
//
// # Caveats
//
// A mask rule whose result cannot be read (not an array, an entry that is
// neither a JSON pointer nor an upsert or remove object, a pointer outside
// /input and /result), or whose evaluation fails, drops the event and
// counts it: the log never carries an event the policy meant to mask and
// could not. A failing drop rule drops the event too, as OPA does.
//
// An event that, gzip-compressed on its own, is larger than the upload
// size limit is dropped when its batch is sent, and counted as OPA counts
// it (enc_log_exceeded_upload_size_limit_bytes and
// decision_logs_encoding_failure). OPA drops it when it is buffered, and
// first tries without its ND builtin cache; nexus' events have none.
package decisionlogs
