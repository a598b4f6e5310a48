package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nexuspdp/nexus/datastore"
)

// Defaults of --scrub-rate and --scrub-interval.
const (
	defaultScrubRate     = 10_000
	defaultScrubInterval = time.Minute
)

// startScrub checks the store in the background (datastore's Scrub): a
// pass every interval (counted from the end of the last), reading at most
// rate index keys a second. A pass that finds damage leaves the store
// unhealthy (/readyz answers 503 with the reason, writes and checks are
// refused) and ends the scrub. rate or interval 0 disables it. The
// returned function stops it and waits for it.
func startScrub(ctx context.Context, store *datastore.BoltStore, rate int, interval time.Duration, reg prometheus.Registerer, log *slog.Logger) func() {
	passes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nexus_datastore_scrub_passes_total",
		Help: "Background scrub passes over the data file, by result (ok, damage, error).",
	}, []string{"result"})
	entries := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nexus_datastore_scrub_entries_total",
		Help: "Index keys the background scrub checked.",
	})
	corrupt := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "nexus_datastore_corrupt",
		Help: "1 when the data file was found damaged (by the scrub or a read): the store refuses writes and /readyz answers 503.",
	}, func() float64 {
		if errors.Is(store.Health(), datastore.ErrCorrupt) {
			return 1
		}
		return 0
	})
	for _, c := range []prometheus.Collector{passes, entries, corrupt} {
		if err := reg.Register(c); err != nil {
			log.Warn("scrub metrics not registered", "err", err)
		}
	}
	if rate <= 0 || interval <= 0 {
		log.Info("the background scrub of the data file is disabled")
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			start := time.Now()
			rep, err := store.Scrub(ctx, rate)
			entries.Add(float64(rep.Entries))
			switch {
			case errors.Is(err, datastore.ErrCorrupt):
				passes.WithLabelValues("damage").Inc()
				log.Error("the scrub found the data file damaged: the store is not ready and refuses writes and checks until the file is repaired or restored (nexus rel verify lists the damage)", "err", err)
				return
			case err != nil && ctx.Err() != nil:
				return
			case err != nil:
				passes.WithLabelValues("error").Inc()
				log.Warn("the scrub pass failed", "err", err)
			default:
				passes.WithLabelValues("ok").Inc()
				log.Debug("scrubbed the data file", "pages", rep.Pages, "entries", rep.Entries, "unchecked", rep.Unchecked, "took", time.Since(start).Round(time.Millisecond))
			}
			t.Reset(interval)
		}
	}()
	return func() { cancel(); <-done }
}
