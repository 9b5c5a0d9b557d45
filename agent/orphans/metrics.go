package orphans

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	found, busy, freed prometheus.Counter
	refused            *prometheus.CounterVec
	held               prometheus.Gauge
	states             stateCollector
}

// stateCollector reports the jobs held by state, counted at each scrape
// (count: the Releaser's stateCounts).
type stateCollector struct {
	desc  *prometheus.Desc
	count func() map[string]int
}

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.count()
	for _, s := range states {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n[s]), s)
	}
}

func newMetrics(count func() map[string]int) *metrics {
	m := &metrics{
		states: stateCollector{
			desc: prometheus.NewDesc("leasekeeper_orphans_jobs",
				"Orphaned addresses held, by state (leasekeeper orphans says why each is): alert on refused, misdirected and unconfirmed, which only the configuration, the region or what stands in front of it can mend; busy, blocked and unreleasable may last for ever by nature.",
				[]string{"state"}, nil),
			count: count,
		},
		found: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_orphans_found_total",
			Help: "Addresses whose lease a dhcpd reload dropped because they left every range, handed over to be freed in the region at the lease's end.",
		}),
		busy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_orphans_probed_busy_total",
			Help: "Probes before freeing an orphaned address that found it in use (something answered ARP for it): kept and probed again.",
		}),
		freed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_orphans_freed_total",
			Help: "Orphaned addresses the region no longer holds: freed (ipaddresses op=release), or found already free.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_orphans_refused_total",
			Help: "Orphaned addresses not freed, by reason: other-mac and not-discovered (the region's record is someone else's: left alone), back (dhcpd.leases lists the address again, or a hook told a new lease of it, a range holding it: no orphan any more), api-key (the key is refused or not an administrator's: alert), clock (MAAS refuses the request's OAuth timestamp: this rack's clock is more than 300 s behind the region's: alert), linked-interfaces (the region's record is linked to several interfaces, which MAAS's release fails on: kept, tried hourly), unconfirmed (the region answered the release with success and still lists the record: something answers for the region, alert), api-url (maas.api_url redirects or answers 404: not the region's API, alert), api-tls (the region's TLS certificate is not trusted or not for api_url's host, or its port does not speak TLS: set maas.ca_file or api_url, alert).",
		}, []string{"reason"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasekeeper_orphans_held",
			Help: "Orphaned addresses waiting to be freed in the region (leasekeeper orphans lists them and why; so does leasekeeper status --json).",
		}),
	}
	for _, r := range []string{"other-mac", "not-discovered", "back", "api-key", "clock", "linked-interfaces", "unconfirmed", "api-url", "api-tls"} {
		m.refused.WithLabelValues(r)
	}
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.found, m.busy, m.freed, m.refused, m.held, m.states}
}
