package reconcile

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/promreg"
)

// Labels of leasekeeper_reconcile_file_problems_total.
const (
	problemSyntax    = "syntax"    // a statement dhcpd would reject, skipped
	problemRefused   = "refused"   // a block dhcpd refuses when it loads the file, skipped (appended, or in a whole read: a whole read of the same file again counts it again)
	problemUnknown   = "unknown"   // a statement dhcpd does not read in a leases file, skipped (likewise)
	problemTorn      = "torn"      // a whole read that stayed unfinished from one poll to the next
	problemRead      = "read"      // an I/O error reading the file or the directory
	problemWatch     = "watch"     // an inotify error
	problemOverflow  = "overflow"  // the inotify queue overflowed: events were lost
	problemPersist   = "persist"   // writing the state or queuing events failed
	problemInvalid   = "invalid"   // a synthesised event failed validation, dropped
	problemOldTorn   = "old-torn"  // a replaced file ended inside a statement
	problemStateRead = "state-bad" // stored records that did not decode, skipped at start
)

// problemKinds are every kind.
var problemKinds = []string{problemSyntax, problemRefused, problemUnknown, problemTorn, problemRead, problemWatch,
	problemOverflow, problemPersist, problemInvalid, problemOldTorn, problemStateRead}

type metrics struct {
	collectors  []prometheus.Collector
	synthesised *prometheus.CounterVec
	rewrites    *prometheus.CounterVec
	snapshots   *prometheus.CounterVec
	problems    *prometheus.CounterVec
	superseded  prometheus.Counter
	keptBack    *prometheus.CounterVec
	mode        *prometheus.GaugeVec
	unsure      prometheus.Gauge
	// gauges read from atomics the task updates after each round
	leases, pending atomic.Int64
	consistent      atomic.Bool
	hookless        atomic.Bool
	absent          atomic.Bool  // the leases file does not exist
	unreadable      atomic.Bool  // reading the leases file fails
	keptBackN       atomic.Int64 // keptBack's total, for /status
	failoverPeers   atomic.Int64 // failover peers dhcpd.conf's pools use
}

func newMetrics() *metrics {
	m := &metrics{
		synthesised: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_synthesised_total",
			Help: "Events the reconciler synthesised from dhcpd.leases and queued for the region, by reason: missed-commit, missed-release, missed-expiry (the file changed and no hook said so within reconcile.expiry_grace), vanished (an active lease a rewrite dropped, stamped with its end and sent reconcile.expiry_grace after it), ends-passed (dhcpd never expired an ended lease), unwritten (a lease a hook told and dhcpd never wrote, killed or restarted in between: ended at its end plus reconcile.expiry_grace), given-away (the end of a lease whose address another client's hook committed before any read of the file showed the lease dropped, sent ahead of that commit), restated (a MAC's running lease, as the file or its hook's commit shows it, queued again after the end of another of its addresses, which MAAS would take it away with), stale-update (in a failover pair, a hook's expiry seconds into this side's own lease of the client, from the partner's stale binding update of the life before: held and sent at that lease's end, or ahead of another client's lease of the address; dropped if the client's next lease came first).",
		}, []string{"reason"}),
		rewrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_reconcile_rewrites_total",
			Help: "dhcpd.leases replaced by dhcpd's rewrite, by kind: restart (a server-duid line followed, or the pid file changed) or hourly.",
		}, []string{"kind"}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_reconcile_snapshots_total",
			Help: "Whole reads of dhcpd.leases, by result: complete (reconciled) or held (syntax errors or a torn end: nothing decided, retried at the next poll; or not a leases file at all: nothing decided until the file changes).",
		}, []string{"result"}),
		problems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_reconcile_file_problems_total",
			Help: "Problems following dhcpd.leases, by kind: syntax, refused, unknown, torn, read, watch, overflow, persist, invalid, old-torn, state-bad (refused and unknown count each statement found, appended or in a whole read; a whole read of the same file again counts them again).",
		}, []string{"kind"}),
		superseded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasekeeper_reconcile_superseded_total",
			Help: "Hook events dropped because the region was told newer news about the address (the address committed to another MAC since: the region would free the new lease), or, in a failover pair, the same news or a recovering server's replay.",
		}),
		keptBack: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasekeeper_events_kept_back_total",
			Help: "Events not sent because the region's leases API takes only six-octet MACs, by kind: no-mac (none given), duid-no-mac (a DHCPv6 DUID without an Ethernet address: DUID-EN, DUID-UUID, other hardware), not-ethernet (a hardware address of another length).",
		}, []string{"kind"}),
		mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "leasekeeper_reconcile_mode",
			Help: "1 for the reconciler's mode: replacement (hooks reach the agent), complement (hooks tell the region through another program, e.g. MAAS's helper; only leases a restart dropped are sent), hookless (every event from the leases file).",
		}, []string{"mode"}),
		unsure: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasekeeper_reconcile_mode_unsure",
			Help: "1 when mode detection could not tell (dhcpd.conf unreadable or unset, a hook program it does not know) and took complement, the safe side, or, when dhcpd.conf became unreadable after a mode was detected for sure, kept that mode (leasekeeper status says which); 0 when reconcile.mode forces the mode. Alert on 1; leasekeeper check-maas says why.",
		}),
	}
	for _, k := range []string{event.NoMACEmpty, event.NoMACDUID, event.NoMACNotSixByte} {
		m.keptBack.WithLabelValues(k)
	}
	for _, r := range []string{ReasonMissedCommit, ReasonMissedRelease, ReasonMissedExpiry, ReasonVanished, ReasonEndsPassed, ReasonUnwritten, ReasonGivenAway, ReasonRestated, ReasonStaleUpdate} {
		m.synthesised.WithLabelValues(r)
	}
	// Every kind from 0, so that the first problem is an increase.
	for _, k := range problemKinds {
		m.problems.WithLabelValues(k)
	}
	m.rewrites.WithLabelValues("restart")
	m.rewrites.WithLabelValues("hourly")
	m.snapshots.WithLabelValues("complete")
	m.snapshots.WithLabelValues("held")
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	m.collectors = []prometheus.Collector{
		m.synthesised, m.rewrites, m.snapshots, m.problems, m.superseded, m.keptBack, m.mode, m.unsure,
		gauge("leasekeeper_reconcile_leases", "Addresses in the reconciler's copy of dhcpd.leases.",
			func() float64 { return float64(m.leases.Load()) }),
		gauge("leasekeeper_reconcile_pending", "Synthesised events waiting for their time (a vanished lease's end, the grace).",
			func() float64 { return float64(m.pending.Load()) }),
		gauge("leasekeeper_reconcile_file_consistent", "1 when the last whole read of dhcpd.leases was complete; 0 while decisions are held (syntax errors, torn end, not a leases file). Alert on 0.",
			func() float64 { return b2f(m.consistent.Load()) }),
		gauge("leasekeeper_reconcile_hookless", "1 when dhcpd.conf runs no hook, so every event comes from the leases file at once.",
			func() float64 { return b2f(m.hookless.Load()) }),
		gauge("leasekeeper_reconcile_leases_file_missing", "1 while dhcpd.leases does not exist (dhcpd never ran, or the setting names a file dhcpd does not write): nothing is read. Alert when it stays 1 while dhcpd runs.",
			func() float64 { return b2f(m.absent.Load()) }),
		gauge("leasekeeper_reconcile_failover_peers", "Failover peers dhcpd.conf's pools use (MAAS: one per HA VLAN); each address follows its subnet's peer.",
			func() float64 { return float64(m.failoverPeers.Load()) }),
		gauge("leasekeeper_reconcile_leases_file_unreadable", "1 while reading dhcpd.leases fails (permissions, a directory at its path, an I/O error): every synthesised event is held. Alert on 1.",
			func() float64 { return b2f(m.unreadable.Load()) }),
	}
	return m
}

// setMode sets the mode gauges.
func (m *metrics) setMode(mode Mode, unsure bool) {
	for _, x := range []Mode{ModeReplacement, ModeComplement, ModeHookless} {
		v := 0.0
		if x == mode {
			v = 1
		}
		m.mode.WithLabelValues(string(x)).Set(v)
	}
	if unsure {
		m.unsure.Set(1)
	} else {
		m.unsure.Set(0)
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	return promreg.Register(reg, m.collectors...)
}

func (m *metrics) unregister(reg prometheus.Registerer) { promreg.Unregister(reg, m.collectors...) }
