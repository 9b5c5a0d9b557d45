package deliver

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasekeeper/leasekeeper/internal/promreg"
)

type metrics struct {
	delivered    prometheus.Counter
	attempts     *prometheus.CounterVec
	lastDelivery prometheus.Gauge
	latency      prometheus.Histogram
	deadlettered prometheus.Counter
	keptBack     prometheus.Counter
	unsafeSplits prometheus.Counter
	superseded   prometheus.Counter
	state        *prometheus.GaugeVec
	probes       *prometheus.CounterVec
	asking       prometheus.GaugeFunc
}

// newMetrics makes the deliverer's metrics; asking is how long the
// request awaiting its answer has waited (0 when none).
func newMetrics(asking func() float64) metrics {
	m := metrics{
		delivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_delivered_total",
			Help: "Events the region accepted (2xx).",
		}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_delivery_attempts_total",
			Help: "HTTP attempts to deliver a batch, by result: ok (2xx), rejected (422: the batch is split, a lone event dead-lettered), failed (500, or MAAS's service-layer 404 \"Entity not found.\": the batch is split, a lone event tested against its neighbours), retry (no answer, 408, 429, 502, 503, 504…: retried), error (3xx, 400, 401, 403, 404 with no such route, 405, TLS trust…: the agent's configuration, retried and never dead-lettered).",
		}, []string{"result"}),
		lastDelivery: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasekeeper_last_delivery_timestamp_seconds",
			Help: "When the region last accepted a batch, Unix seconds.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leasekeeper_delivery_latency_seconds",
			Help:    "From an event's time (its timestamp_ns, or when the deliverer first took it) to the region's 2xx.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 16), // 1ms .. 15min
		}),
		deadlettered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_deadlettered_total",
			Help: "Events the region refused (422, alone, right after it accepted another event) or failed (500 or a service-layer 404, alone, right after it accepted another event, and every time since over 30 s) on their own, moved to the dead letters.",
		}),
		keptBack: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_deliver_kept_back_total",
			Help: "Queued events the region cannot take (no six-octet MAC: a DHCPv6 DUID without one), taken off the queue unsent; the reconciler keeps such events back before they are queued, so these were queued by an older agent.",
		}),
		unsafeSplits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_deliver_unsafe_splits_total",
			Help: "Batches the region may have applied already (sent before, never answered) that it then failed or refused, and that were split with an address or MAC on both sides of the cut, after sending them whole again did not help: until the second half landed, the region may have shown an older state.",
		}),
		superseded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_deliver_superseded_total",
			Help: "Queued events taken off the queue unsent because, in a failover pair, the peer's agent had delivered newer news of their address since (sent now, they would take the region back), or the same news a moment before (both servers' hooks of one ack). Most are news the peer told the region too (both racks' files record every lease); one that was not is a lease life the region never hears of (the hold_max pattern, docs/failover.md).",
		}),
	}
	m.asking = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "leasekeeper_region_request_wait_seconds",
		Help: "How long the request awaiting the region's answer has waited (0 when none): a region slow or stuck applying a batch shows here while its state is still its last answer's. Not sent again before region's answer timeout (5m).",
	}, asking)
	m.probes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasekeeper_region_probes_total",
		Help: "Connection probes of a region that could not be reached at the last attempt (probe.go), by result: down (no connection), up (connected: the batch is retried at once).",
	}, []string{"result"})
	for _, r := range []string{"down", "up"} {
		m.probes.WithLabelValues(r)
	}
	m.state = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leasekeeper_region_state",
		Help: "1 for the state delivery to the region is in: unknown (nothing sent yet), ok, outage (no answer: waiting), config (the agent's settings are wrong: retried, nothing dead-lettered; see leasekeeper status), failing (the region fails every event with 500, or refuses every event with 422), waiting (the credential files are not there yet, a MAAS rack not registered: nothing is sent).",
	}, []string{"state"})
	for _, r := range resultLabel {
		m.attempts.WithLabelValues(r)
	}
	for _, st := range states {
		m.state.WithLabelValues(st)
	}
	m.setState(StateUnknown)
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.delivered, m.attempts, m.lastDelivery, m.latency, m.deadlettered, m.keptBack, m.unsafeSplits, m.superseded, m.state, m.probes, m.asking}
}

func (m *metrics) setState(state string) {
	for _, st := range states {
		v := 0.0
		if st == state {
			v = 1
		}
		m.state.WithLabelValues(st).Set(v)
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	return promreg.Register(reg, m.collectors()...)
}

func (m *metrics) unregister(reg prometheus.Registerer) { promreg.Unregister(reg, m.collectors()...) }
