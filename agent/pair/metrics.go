package pair

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasekeeper/leasekeeper/internal/promreg"
)

type metrics struct {
	datagrams *prometheus.CounterVec
	answering prometheus.Gauge
	held      prometheus.Counter
	gaveUp    *prometheus.CounterVec
	offset    prometheus.Gauge
}

func newMetrics() metrics {
	m := metrics{
		datagrams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_pair_datagrams_total",
			Help: "Datagrams received on the failover pair channel, by kind: query (answered), answer, unready (a query while this agent was starting, or holding events it could not store: not answered), busy (a query while the last was still being answered: dropped, the peer asks again), refused (not signed with the pair's key, malformed, or from a sender of this agent's own role).",
		}, []string{"kind"}),
		answering: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasekeeper_pair_peer_answering",
			Help: "1 while the peer agent answers this agent's queries, 0 while it is silent (deliveries wait for it up to pair.hold_max, then go on alone).",
		}),
		held: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_pair_held_seconds_total",
			Help: "Time this agent's deliveries waited for the peer agent's older news of the same addresses.",
		}),
		gaveUp: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_pair_gave_up_total",
			Help: "Waits for the peer ended by pair.hold_max, by why the agent waited: silent (the peer agent did not answer; delivering alone until it does), peer-older (the peer kept older news of the address queued), too-recent, not-asked.",
		}, []string{"why"}),
		offset: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasekeeper_pair_clock_offset_seconds",
			Help: "How far the peer agent's clock is ahead of this one's (negative: behind), from the last answer, within half its round trip. The channel orders the two racks' news of one address by their clocks: alert beyond ±1 (check NTP on both racks).",
		}),
	}
	for _, k := range []string{"query", "answer", "unready", "busy", "refused"} {
		m.datagrams.WithLabelValues(k)
	}
	for _, w := range []string{"silent", WhyPeerOlder, WhyRecent, WhyUnasked} {
		m.gaveUp.WithLabelValues(w)
	}
	m.answering.Set(1)
	return m
}

func (m *metrics) register(reg prometheus.Registerer) error {
	return promreg.Register(reg, m.datagrams, m.answering, m.held, m.gaveUp, m.offset)
}
