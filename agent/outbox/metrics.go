package outbox

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasekeeper/leasekeeper/internal/promreg"
)

type metrics struct {
	reg           prometheus.Registerer
	collectors    []prometheus.Collector
	appended      prometheus.Counter
	coalesced     prometheus.Counter
	commitErrors  prometheus.Counter
	commitSeconds prometheus.Histogram
}

func newMetrics(s *Store) metrics {
	m := metrics{
		appended: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_outbox_appended_total",
			Help: "Events that entered the outbox queue (appended, or a dead letter retried), counted once on disk.",
		}),
		coalesced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_outbox_coalesced_total",
			Help: "Queued events dropped by coalescing per IP because the outbox reached its bound.",
		}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_outbox_commit_errors_total",
			Help: "Outbox transactions that failed to commit (full disk, I/O error).",
		}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leasekeeper_outbox_commit_seconds",
			Help:    "Latency of one outbox group commit: apply every grouped request, write, fsync.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16), // 100µs .. 3.3s
		}),
	}
	m.collectors = []prometheus.Collector{
		m.appended, m.coalesced, m.commitErrors, m.commitSeconds,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leasekeeper_outbox_depth",
			Help: "Events queued for the region.",
		}, func() float64 { return float64(s.depth.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leasekeeper_deadletters",
			Help: "Events the region refused, kept for an operator (leasekeeper deadletter list).",
		}, func() float64 { return float64(s.dead.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leasekeeper_outbox_over_bound",
			Help: "1 while the outbox holds more than its bound even after coalescing (nothing is dropped).",
		}, func() float64 {
			if s.over.Load() {
				return 1
			}
			return 0
		}),
	}
	return m
}

func (m *metrics) register(reg prometheus.Registerer) error {
	if err := promreg.Register(reg, m.collectors...); err != nil {
		return err
	}
	m.reg = reg
	return nil
}

func (m *metrics) unregister() { promreg.Unregister(m.reg, m.collectors...) }
