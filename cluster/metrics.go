package cluster

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the nexus_cluster_* series. Gauges that mirror the
// replica's state are read from it when scraped.
type metrics struct {
	applyDuration prometheus.Histogram
	applyRun      prometheus.Histogram
	conflicts     prometheus.Counter
	retries       prometheus.Counter
	rejected      prometheus.Counter
	policyErrors  prometheus.Counter
	snapshots     *prometheus.CounterVec
	outcomes      *prometheus.CounterVec
}

func newMetrics(r *Replica, reg prometheus.Registerer) *metrics {
	m := &metrics{
		applyDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nexus_cluster_apply_duration_seconds",
			Help:    "Time to apply a run of consecutive log entries to the local store (one bbolt transaction, fsync included).",
			Buckets: []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5},
		}),
		applyRun: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nexus_cluster_apply_run_entries",
			Help:    "Log entries applied in one transaction (those that arrived while the previous one committed).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nexus_cluster_conflicts_total",
			Help: "Writes of this replica that the log refused because another write came first (expected last sequence mismatch).",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nexus_cluster_retries_total",
			Help: "Writes of this replica published again after a conflict or an unanswered publish.",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nexus_cluster_rejected_entries_total",
			Help: "Log entries recorded without effect because they did not apply to the state they met (malformed, a precondition or the schema refused them).",
		}),
		policyErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nexus_cluster_policy_load_errors_total",
			Help: "Policy loads from the log that the server's policy callback refused or that could not be fetched.",
		}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nexus_cluster_snapshots_total",
			Help: "Snapshots written to and restored from the object store, by operation and result.",
		}, []string{"op", "result"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nexus_cluster_write_outcomes_total",
			Help: "Writes through this replica by answer: written, refused (a precondition or the schema), not_written (never applied), unknown (may apply; a retry with the same write ID learns which).",
		}, []string{"outcome"}),
	}
	for _, o := range []string{"written", "refused", "not_written", "unknown"} {
		m.outcomes.WithLabelValues(o)
	}
	if reg == nil {
		return m
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(
		m.applyDuration, m.applyRun, m.conflicts, m.retries, m.rejected, m.policyErrors, m.snapshots, m.outcomes,
		gauge("nexus_cluster_applied_revision", "The last log sequence applied to the local store (the store's revision).",
			func() float64 { return float64(r.applied.Load()) }),
		gauge("nexus_cluster_stream_last_sequence", "The log's last sequence as last seen by this replica.",
			func() float64 { return float64(r.streamLast.Load()) }),
		gauge("nexus_cluster_lag_messages", "Log entries not yet applied on this replica.",
			func() float64 { return float64(r.Status().LagMessages) }),
		gauge("nexus_cluster_lag_seconds", "How long this replica has been behind the log (0 when caught up).",
			func() float64 { return r.Status().Lag.Seconds() }),
		gauge("nexus_cluster_snapshot_age_seconds", "Age of the newest snapshot in the object store as last seen by this replica (0 if none).",
			func() float64 { return r.Status().SnapshotAge.Seconds() }),
		gauge("nexus_cluster_snapshot_revision", "Revision of the newest snapshot in the object store as last seen by this replica.",
			func() float64 { return float64(r.Status().SnapshotRevision) }),
		gauge("nexus_cluster_writes_available", "1 while this replica can write through the log (connected, following it, JetStream answering); checks are answered either way.",
			func() float64 {
				if r.Status().Degraded {
					return 0
				}
				return 1
			}),
		gauge("nexus_cluster_degraded", "1 while this replica cannot write through the log (NATS unreachable, no JetStream quorum, or the store cannot follow the log).",
			func() float64 {
				if r.Status().Degraded {
					return 1
				}
				return 0
			}),
	)
	return m
}
